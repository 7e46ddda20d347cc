"""What the privacy statement says in words about each mechanism, design, source of randomness, relation,
composition, the ledger and accuracy: fixed text keyed by the names the ledger records."""

from opal_dp.core import Relation

MECHANISMS = {
    "stability_based_histogram": {
        "reference": (
            "Stability-based histogram (SBH), Algorithm 1 of the Data61 Opal release document (2016), after "
            "Bun, Nissim & Stemmer, ITCS 2016, and Vadhan, The Complexity of Differential Privacy, 2016, §7.1; "
            "calibrated to bounded contributions (L0 bins, L1 in total, at most Linf per bin)."
        ),
        "algorithm": (
            "Only bins present in the data (true count > 0) are considered; no new bin is ever published. Each "
            "gets a = count + Z with Z discrete Laplace of scale L1/epsilon; the bin is published with count a "
            "iff a >= threshold = Linf + scale·ln(L0/delta), i.e. iff a >= min_released_count = ceil(threshold). "
            "A bin absent from the data and a suppressed bin look the same."
        ),
        "noise": (
            "Discrete Laplace, P(Z = z) proportional to exp(-|z|/scale), sampled exactly (difference of two "
            "geometric variables drawn by integer inversion, no floating point)."
        ),
    },
    "gaussian_threshold_histogram": {
        "reference": (
            "Thresholded discrete Gaussian histogram (as OpenDP's make_gaussian_threshold), accounted in "
            "zero-concentrated DP (Bun & Steinke 2016); discrete Gaussian of Canonne, Kamath & Steinke 2020."
        ),
        "algorithm": (
            "Only bins present in the data (true count > 0) are considered; no new bin is ever published. Each "
            "gets a = count + Z with Z discrete Gaussian of standard deviation sigma = sqrt(L2²/(2 rho)); the bin "
            "is published iff a >= min_released_count, the smallest integer m with L0·P(Z >= m - Linf) <= delta. "
            "A bin absent from the data and a suppressed bin look the same."
        ),
        "noise": (
            "Discrete Gaussian, P(Z = z) proportional to exp(-z²/(2 sigma²)), sampled exactly (rejection from "
            "an exact discrete Laplace with exact acceptance decisions, no floating point)."
        ),
    },
    "public_domain_histogram": {
        "reference": (
            "Public-domain histogram with consistent marginals (the 2017 assessment's recommendations): noise on "
            "every cell of a public domain (Montreal prefix tree, Theorem 4.1; Cormode et al. 2012), marginals made "
            "consistent by weighted least squares (Hay et al. 2010)."
        ),
        "algorithm": (
            "For each (date, mode, tap), the domain is every (15-minute window, location of the mode in the public "
            "stop list) cell, plus the unknown cell (-1, -1) for tap-off: it comes from public data only. The joint "
            "time x location table and both one-way tables get independent noise on every cell, zeros included "
            "(discrete Laplace of scale L1/epsilon: pure epsilon-DP, delta = 0; or discrete Gaussian of "
            "sigma = sqrt(L2²/(2 rho)): rho-zCDP). Weighted least squares makes each one-way count the sum of its "
            "joint cells; rounding keeps every sum exact. A cell is listed if its estimate rounds to at least tau "
            "(min_released_count); the others are summed into remainder rows. The least squares, the rounding and "
            "the threshold are post-processing: they cost no privacy."
        ),
        "noise": (
            "Discrete Laplace or discrete Gaussian, sampled exactly from the operating system's random words, on "
            "every cell of the domain."
        ),
    },
    "time_loc_hierarchy": {
        "reference": (
            "Hierarchical release with exact sums (the US Census Bureau's TopDown, the Montreal prefix tree and Hay "
            "et al. 2010): noise on every cell of every level of a public tree, a consistent top-down fit."
        ),
        "algorithm": (
            "For each (date, mode, tap), a tree of public cells: the mode's day, each station's day, each station's "
            "hours and each (15-minute window, station), plus the unknown cell (-1, -1) for tap-off at every level; "
            "it comes from the public stop list only. Every cell of every level gets independent discrete Gaussian "
            "noise, zeros included, of the level's sigma = sqrt(L2²/(2 rho_level)), L2² the most a card can change "
            "the level under the contribution bounds: rho-zCDP, delta = 0. The fit combines each level with the sums "
            "of its children (inverse variance), then from the top down projects each parent's children onto its "
            "count and rounds them to integers with exact sums. A 15-minute cell is listed if its noisy count reaches "
            "tau; the others of a station-hour are one remainder, spread over their windows by their noisy counts "
            "to give the windows' totals. Each table is charged the rho of the levels it is read from."
        ),
        "noise": "Discrete Gaussian, sampled exactly from the operating system's random words, on every cell.",
    },
}
DESIGNS = {
    "sbh": {
        "description": (
            "Stability-based histograms (the 2016 design): only bins present in the data are considered, each "
            "table is drawn on its own and thresholded, so the files do not add up exactly."
        ),
    },
    "public_domain": {
        "description": (
            "Public domain with zeros perturbed: every cell of the public domain gets noise, the one-way tables are "
            "derived consistently from the same measurements, and cells below tau are published as remainder rows, "
            "so every file adds up exactly."
        ),
        "post_processing": (
            "The least-squares consistency step, the rounding to non-negative integers with exact sums and the "
            "publication threshold tau are post-processing of the noisy measurements: they cost no privacy."
        ),
        "remainder_rows": (
            "time-loc.csv lists the cells with at least tau trips one by one; the others are summed into remainder "
            "rows: 'time = T, loc = other' (the unlisted cells of window T) and 'time = other, loc = L' (the "
            "unlisted cells of location L). For each (date, mode, tap), a count in time.csv equals the sum of the "
            "time-loc.csv rows of its window, its 'loc = other' row included, and a count in loc.csv the sum of "
            "the rows of its location, its 'time = other' row included. An unlisted cell is counted once in its "
            "window's remainder and once in its location's: summing all of time-loc.csv double-counts the unlisted "
            "mass. Use the totals below (from time.csv, equal to those of loc.csv) instead."
        ),
        "false_cells": (
            "An empty cell is listed when its noisy estimate reaches tau; expected_false_cells_per_day is the "
            "expected number of such cells over every (mode, tap) domain of one day, from the noise and the domain "
            "size alone (up to the small least-squares correction). A listed cell therefore does not prove that "
            "anyone travelled there. The release probabilities below are those of the noisy measurement at tau."
        ),
    },
}
DESIGNS["hierarchy"] = {
    "description": (
        "A hierarchy per date, mode and tap: the mode's day, each station's day, each station's hours and the "
        "15-minute cells are each measured with noise on every cell of the public domain, zeros included, then made "
        "consistent from the top down, so that every level adds up exactly to the one above; the three files are "
        "derived from that one fit, with remainder rows. Where totals.csv is published, the top of each tree is the "
        "day's published total (each marginal's root: totals.csv): the tap-on rows add up to the tap-on total and the "
        "tap-off rows of a known location to the tap-off total, exactly."
    ),
    "post_processing": (
        "The consistent fit (weighted least squares, rounded to non-negative integers with exact sums), the pin of "
        "each tree's top to the published daily totals (released and charged as totals.csv), the listing of a cell "
        "when its noisy count reaches its level's threshold and the spread of a remainder over its window's totals "
        "are post-processing of the noisy measurements: they cost no privacy."
    ),
    "remainder_rows": DESIGNS["public_domain"]["remainder_rows"].replace(
        "lists the cells with at least tau trips one by one", "lists the cells whose noisy count reached tau"),
    "false_cells": (
        "An empty cell is listed when its noisy count reaches tau; expected_false_cells_per_day bounds the expected "
        "number of such cells over every (mode, tap) of one day, from the noise and the domain size alone. A listed "
        "cell therefore does not prove that anyone travelled there, and after the fit its count can be a little "
        "below tau."
    ),
}
RANDOMNESS = {
    False: "operating system CSPRNG (os.urandom); no seed exists",
    True: "SEEDED pseudo-random generator: anyone who knows the seed can remove the noise",
}
RELATIONS = {
    Relation.REPLACE_ONE.value: "one {unit}'s data replaced with another's",
    Relation.ADD_REMOVE.value: "one {unit}'s data added or removed",
}
UNIT_NOUN = {"trip": "trip", "card_day": "card-day", "card_period": "card's period"}
COMPOSITION = {
    "trip": (
        "Trips are split into disjoint partitions by (service date = tap-on date, mode). Within a partition the "
        "six marginals are computed from the same trips and compose sequentially; a trip lies in exactly one "
        "partition, so partitions compose in parallel: the whole release protects one trip at its partition's "
        "(epsilon, delta)."
    ),
    "card_day": (
        "All trips of one card on one service day, in every mode, are bounded together before the card id is "
        "dropped. The four (date, mode) partitions of a date are pieces of one histogram over (mode, time, "
        "location) per marginal, released with one noise draw whose sensitivity covers the whole card-day; so "
        "each date is one ledger scope, the six marginals compose sequentially within it, and dates compose in "
        "parallel (a card-day lies in one date). A card travelling on k days is protected, for all those days "
        "together, at the sum of those dates' (epsilon, delta)."
    ),
    "card_period": (
        "All trips of one card over one period (a calendar week by default; the scopes list the periods) are "
        "bounded together before the card id is dropped. "
        "Every (date, mode) partition of the period is a piece of one histogram over (date, mode, time, "
        "location) per marginal, released with one noise draw whose sensitivity covers the card's whole "
        "period; the period is one ledger scope and its marginals compose in zero-concentrated DP (rho adds "
        "up) before one conversion to (epsilon, delta) by OpenDP. The period's (epsilon, delta) holds for "
        "each card, whatever it did in the period; a card in several periods of the release is protected at "
        "their composition (the worked examples), and the person-level sentence above covers every period of "
        "the horizon."
    ),
}
LEDGER = (
    "A persistent ledger records every noise draw and what it cost each scope, across runs. A draw that would "
    "take a scope over the cap in force is refused before any noise is drawn; publishing a stored draw again "
    "costs nothing. The cap is ledger state, fixed when the ledger was created: it can only be raised by an "
    "explicit, recorded command, and every raise is listed in the statements of later releases (this one "
    "lists the history up to its own creation). The per-scope totals above include everything the ledger had "
    "charged to those scopes when this release was made; anything released from them later is added there "
    "and stated by that release."
)
ACCURACY = (
    "Figures follow from the parameters alone. release_probability[n] = P(n + Z >= min_released_count), where "
    "n is the count of the mechanism's input (after contribution bounding). error_bound_95: |Z| <= e with "
    "probability >= 95% for each noisy count; a published count of a bin whose true count is near the "
    "threshold is biased upwards by the selection, and contribution bounding can only lower a count."
)


