"""The census geographic hierarchy national > state > county > tract > block, per row."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from microdata.errors import GeographyError

#: Levels from coarsest to finest.
LEVELS: tuple[str, ...] = ("national", "state", "county", "tract", "block")


def check_level(level: str) -> str:
    if level not in LEVELS:
        raise GeographyError(f"unknown geography level {level!r}; valid levels are {list(LEVELS)}")
    return level


def coarser(level: str) -> tuple[str, ...]:
    """Levels strictly coarser than ``level``, finest first (tract -> county, state, national)."""
    i = LEVELS.index(check_level(level))
    return tuple(reversed(LEVELS[:i]))


@dataclass(frozen=True)
class Geography:
    """Each row's unit at every level, as GEOID strings (a block's GEOID contains its tract's).

    Built from per-row GEOIDs of the finest level present; coarser GEOIDs are prefixes, as in
    census GEOIDs (state 2, county 3, tract 6, block 4 digits). The national unit is "US".

    >>> g = Geography.from_block_geoids(np.array(["010010001001001", "010010001001002"]))
    >>> g.units("tract").tolist()
    ['01001000100', '01001000100']
    """

    block: np.ndarray
    _cache: dict = field(default_factory=dict, compare=False, repr=False)

    #: GEOID prefix length per level.
    PREFIX = {"national": 0, "state": 2, "county": 5, "tract": 11, "block": 15}

    def __post_init__(self) -> None:
        block = np.asarray(self.block).astype(str)
        object.__setattr__(self, "block", block)
        if block.ndim != 1:
            raise GeographyError(f"block GEOIDs must be 1-d, got shape {block.shape}")
        if block.size:
            lengths = np.char.str_len(block)
            if lengths.min() != 15 or lengths.max() != 15:
                bad = block[lengths != 15][0]
                raise GeographyError(
                    f"block GEOIDs must have 15 digits (2 state, 3 county, 6 tract, 4 block), got {bad!r}"
                )

    @classmethod
    def from_block_geoids(cls, geoids: np.ndarray) -> "Geography":
        return cls(np.asarray(geoids))

    @classmethod
    def from_parts(cls, state, county, tract, block) -> "Geography":
        """From per-row state, county, tract and block codes (integers or digit strings)."""
        parts = [
            pd.Series(np.asarray(x)).astype(str).str.zfill(w).to_numpy()
            for x, w in ((state, 2), (county, 3), (tract, 6), (block, 4))
        ]
        return cls(np.char.add(np.char.add(parts[0], parts[1]), np.char.add(parts[2], parts[3])))

    def __len__(self) -> int:
        return len(self.block)

    def units(self, level: str) -> np.ndarray:
        """Per-row GEOID of the unit at ``level``."""
        check_level(level)
        if level not in self._cache:
            n = self.PREFIX[level]
            if n == 0:
                out = np.full(len(self.block), "US")
            elif n == 15:
                out = self.block
            else:
                out = self.block.astype(f"<U{n}")  # numpy truncates to the prefix
            self._cache[level] = out
        return self._cache[level]

    def unit_ids(self, level: str) -> list[str]:
        """Sorted distinct units at ``level``."""
        return sorted(set(self.units(level).tolist()))

    def mask(self, level: str, unit: str) -> np.ndarray:
        """Rows in ``unit`` at ``level``; an error names the level's units if it is unknown."""
        m = self.units(level) == unit
        if not m.any():
            known = self.unit_ids(level)
            raise GeographyError(
                f"no {level} {unit!r} in this geography; known {level}s include {known[:5]}"
            )
        return m

    def parent(self, level: str, unit: str, parent_level: str) -> str:
        """The unit at ``parent_level`` enclosing ``unit`` of ``level``."""
        if LEVELS.index(check_level(parent_level)) > LEVELS.index(check_level(level)):
            raise GeographyError(f"{parent_level!r} is finer than {level!r}; a parent must be coarser")
        self.mask(level, unit)
        n = self.PREFIX[parent_level]
        return "US" if n == 0 else unit[:n]

    def take(self, index: np.ndarray) -> "Geography":
        return Geography(self.block[index])
