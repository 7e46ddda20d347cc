"""The map of the public page: the published locations of ``loc.csv`` placed with the public stop list, as
inline SVG (no tiles). Two views: the whole network, and the city centre around the busiest location, where
stops of every mode crowd together. Each view has a scale bar, north up, and labels for its busiest places;
circle area is proportional to the average tap-ons per day, small circles drawn over large ones so that no
mode is hidden. Locations come from published labels only; coordinates from the public stop list.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

from opal_dp.network import MODES
from opal_dp.prep.binning import location_points
from opal_dp.release.page.common import COLOURS, MODE_NAMES, e, per_day, place, rows_of

WIDTH, PAD, MAX_RADIUS, MIN_RADIUS = 560, 20, 14.0, 3.0
KM_PER_DEGREE = 111.32  # of latitude
CENTRE_KM = 10.0  # the city-centre view is this wide
LABELS = 6  # busiest places labelled in each view
SCALE_STEPS = (0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500)
# Of a 15 px place label, for keeping labels apart and inside the map: generous, as DejaVu Sans (a common default
# font) takes up to 9.5 px a character of a place name.
CHAR_WIDTH, LABEL_HEIGHT = 10.0, 16.0


@dataclass(frozen=True)
class View:
    """An equirectangular view of a box of longitudes and latitudes, true to scale at its middle latitude."""

    lon0: float
    lat1: float
    aspect: float  # cosine of the middle latitude
    scale: float  # px per degree of latitude
    height: int

    @classmethod
    def of(cls, lon0: float, lon1: float, lat0: float, lat1: float) -> View:
        aspect = math.cos(math.radians((lat0 + lat1) / 2))
        scale = (WIDTH - 2 * PAD) / max((lon1 - lon0) * aspect, lat1 - lat0, 1e-3)
        return cls(lon0 - PAD / (aspect * scale), lat1 + PAD / scale, aspect, scale,
                   round((lat1 - lat0) * scale + 2 * PAD))

    def xy(self, lon: pd.Series, lat: pd.Series) -> tuple[np.ndarray, np.ndarray]:
        return (lon.to_numpy() - self.lon0) * self.aspect * self.scale, (self.lat1 - lat.to_numpy()) * self.scale

    def scale_bar(self) -> str:
        px_per_km = self.scale / KM_PER_DEGREE
        km = max((s for s in SCALE_STEPS if s * px_per_km <= WIDTH / 4), default=SCALE_STEPS[0])
        length, x, y = km * px_per_km, 12, self.height - 12
        return (f'<g class="scale-bar"><path d="M{x} {y - 5}v5h{length:.1f}v-5" stroke="#222" stroke-width="2" '
                f'fill="none"/><text x="{x + length + 6:.1f}" y="{y + 1}" class="halo">{km:g} km</text></g>')


def map_section(loc: pd.DataFrame, days: Mapping[str, list[str]], stops: pd.DataFrame, marginal: Mapping,
                whole: bool = False) -> str:
    """Average tap-ons per day at each published location (``per_day``; ``marginal``: loc.csv's tap-on marginal);
    ``whole``: of the locations published on enough days only (under a design that suppresses small counts)."""
    averages = [per_day(rows_of(loc, mode, "on"), "loc", len(days[mode]), marginal, whole).reset_index().assign(mode=mode)
                for mode in sorted(set(loc["mode"].astype(str)) & set(days)) if days[mode]]
    on = pd.concat(averages, ignore_index=True) if averages else pd.DataFrame(columns=["loc", "average", "mode"])
    partial = int(on["average"].isna().sum())
    on = on.dropna(subset=["average"])
    placed = on.merge(location_points(stops), on=["mode", "loc"], how="inner")
    unplaced = len(on) - len(placed)
    left_out = (f" {partial} location{'s' * (partial > 1)} published on too few days {'are' if partial > 1 else 'is'}"
                " not drawn (Busiest locations)." if partial else "")
    if placed.empty:
        return ('<section id="map" aria-labelledby="map-title">\n<h2 id="map-title">Map</h2>\n<p class="note">No '
                f"published location has coordinates in the stop list.{left_out}</p>\n</section>\n")
    placed = placed.assign(r=MIN_RADIUS + (MAX_RADIUS - MIN_RADIUS) * np.sqrt(placed["average"] / placed["average"].max()))
    placed = placed.sort_values(["average", "mode", "loc"], ascending=[False, True, True], ignore_index=True)
    network = View.of(placed["lon"].min(), placed["lon"].max(), placed["lat"].min(), placed["lat"].max())
    busiest = placed.iloc[0]
    half_lat = CENTRE_KM / 2 / KM_PER_DEGREE
    half_lon = half_lat / math.cos(math.radians(busiest["lat"]))
    centre = View.of(busiest["lon"] - half_lon, busiest["lon"] + half_lon, busiest["lat"] - half_lat,
                     busiest["lat"] + half_lat)
    legend = "".join(f'<span style="background:{COLOURS[m]}"></span>{MODE_NAMES[m]} '
                     for m in MODES if m in set(placed["mode"]))
    missing = (f" {unplaced} published location{'s' * (unplaced > 1)} with no coordinates in the stop list "
               f"{'are' if unplaced > 1 else 'is'} not drawn." if unplaced else "")
    return (
        '<section id="map" aria-labelledby="map-title">\n<h2 id="map-title">Map</h2>\n'
        f'<p class="legend">{legend}</p>\n'
        f"<h3>Whole network</h3>\n{_view_svg('map', network, placed, stops, 'Map of the whole network')}"
        f"<h3>City centre ({CENTRE_KM:g} km across, around {e(place(busiest['mode'], busiest['loc']))})</h3>\n"
        f"{_view_svg('map-centre', centre, placed, stops, 'Map of the city centre')}"
        '<p class="note">North is up. Circle area is proportional to the average tap-ons per day at a location, from '
        "loc.csv; hover over a circle for its figure. The busiest places are labelled. Grey dots are the stops of "
        "the public stop list; a bus postcode is drawn at the mean position of its bus stops (longitude scaled by "
        f"the cosine of the latitude).{missing}{left_out}</p>\n</section>\n"
    )


def _view_svg(name: str, view: View, placed: pd.DataFrame, stops: pd.DataFrame, label: str) -> str:
    sx, sy = view.xy(stops["lon"], stops["lat"])
    inside = (sx >= 0) & (sx <= WIDTH) & (sy >= 0) & (sy <= view.height)
    dots = sorted({(round(float(a)), round(float(b))) for a, b in zip(sx[inside], sy[inside])})
    network = "".join(f"M{a} {b}h0" for a, b in dots)
    px, py = view.xy(placed["lon"], placed["lat"])
    shown = placed.assign(x=px, y=py)
    shown = shown[(shown["x"] >= -MAX_RADIUS) & (shown["x"] <= WIDTH + MAX_RADIUS) & (shown["y"] >= -MAX_RADIUS)
                  & (shown["y"] <= view.height + MAX_RADIUS)]
    circles = "".join(
        f'<circle cx="{p.x:.1f}" cy="{p.y:.1f}" r="{p.r:.1f}" fill="{COLOURS[p.mode]}" fill-opacity="0.55" '
        f'stroke="{COLOURS[p.mode]}"><title>{MODE_NAMES[p.mode]}, {e(place(p.mode, p.loc))}: '
        f"{p.average:,.1f} tap-ons per day</title></circle>"
        for p in shown.itertuples()
    )
    return (
        f'<svg class="map" id="{name}" viewBox="0 0 {WIDTH} {view.height}" role="img" aria-label="{label}: published '
        f'locations, circle area by tap-ons per day">'
        f'<rect width="{WIDTH}" height="{view.height}" fill="#fbfbf8" stroke="#ccc"/>'
        f'<path d="{network}" stroke="#bbb" stroke-width="2" stroke-linecap="round"/>{circles}'
        f"{_labels(shown, view)}{view.scale_bar()}</svg>\n"
    )


def _labels(shown: pd.DataFrame, view: View) -> str:
    """Labels of the busiest places in view, right of their circle (left near the right edge), none overlapping."""
    taken: list[tuple[float, float, float, float]] = []
    out = []
    for p in shown.itertuples():
        if len(out) == LABELS:
            break
        text = p.loc if p.mode != "bus" else f"Bus {p.loc}"
        width = CHAR_WIDTH * len(text)
        left = p.x + p.r + 3 if p.x + p.r + 3 + width <= WIDTH else p.x - p.r - 3 - width
        box = (left, p.y - LABEL_HEIGHT / 2, left + width, p.y + LABEL_HEIGHT / 2)
        if left < 0 or box[1] < 0 or box[3] > view.height or any(
                box[0] < b[2] and b[0] < box[2] and box[1] < b[3] and b[1] < box[3] for b in taken):
            continue
        taken.append(box)
        out.append(f'<text class="place halo" x="{left:.1f}" y="{p.y + 4.5:.1f}">{e(text)}</text>')
    return "".join(out)
