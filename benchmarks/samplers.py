"""The exact samplers per call: ``python -m benchmarks.samplers`` prints the best of 5 timings of 10^6 draws of the
discrete Laplace (scales 3, 30, 300) and the discrete Gaussian (sigma 30) on seeded bits (docs/benchmarks.md, "The
exact samplers"). ``PYTHONPATH=TREE`` times another code tree's samplers."""

from __future__ import annotations

import time

from opal_dp.core.bits import SeededBits
from opal_dp.core.discrete_gaussian import DiscreteGaussian
from opal_dp.core.noise import DiscreteLaplace

DRAWS = 10**6


def best_of(call, repeat: int = 5) -> float:
    """The least wall time of ``repeat`` calls, in seconds."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    laplace, gaussian = DiscreteLaplace(SeededBits(1)), DiscreteGaussian(SeededBits(2))
    cases = {f"discrete Laplace, scale {s:g}": (lambda s=s: laplace.sample(s, DRAWS)) for s in (3.0, 30.0, 300.0)}
    cases["discrete Gaussian, sigma 30"] = lambda: gaussian.sample(30.0, DRAWS)
    for name, call in cases.items():
        call()  # the tables are built once per scale, outside the timing
        print(f"{name}: {1e3 * best_of(call):.1f} ms for {DRAWS:,} draws")


if __name__ == "__main__":
    main()
