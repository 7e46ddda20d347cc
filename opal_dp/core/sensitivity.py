"""How much one privacy unit can change a histogram: the (L0, L1, L2, L-infinity) bounds that every
histogram mechanism calibrates its noise and threshold to.

For neighbouring datasets ``D ~ D'`` (one privacy unit added, removed or replaced) and one histogram
``h`` (a marginal over a ledger scope), let ``d = h(D) - h(D')``. Then

- ``l0``: at most this many bins change (``d_b != 0``);
- ``l1``: ``sum |d_b| <= l1``;
- ``l2_squared``: ``sum d_b**2 <= l2_squared``;
- ``linf``: ``max |d_b| <= linf``.

The bounds are public: they follow from the privacy unit, the neighbouring relation and the
contribution bounds in the configuration, never from the data.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Sensitivity:
    """Public bounds on how one privacy unit changes one histogram (module docstring)."""

    l0: int
    l1: int
    l2_squared: int
    linf: int

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if not (self.linf <= self.l1 <= self.l0 * self.linf):
            raise ValueError(f"need linf <= l1 <= l0 * linf, got {self}")
        if not (self.linf**2 <= self.l2_squared <= self.l1 * self.linf):
            raise ValueError(f"need linf**2 <= l2_squared <= l1 * linf, got {self}")

    def describe(self) -> dict:
        return asdict(self)
