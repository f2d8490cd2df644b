"""Geographic hierarchies per row: census national > state > county > tract > block, ACS national > state > PUMA."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from censusrecon.microdata.errors import GeographyError

#: The census hierarchy, coarsest first.
CENSUS_LEVELS: tuple[str, ...] = ("national", "state", "county", "tract", "block")
#: GEOID prefix length per census level.
_CENSUS_PREFIX = {"state": 2, "county": 5, "tract": 11, "block": 15}


def plural(level: str) -> str:
    """A level's name in the plural, as a sentence needs it: tracts, blocks, counties, pumas.

    >>> [plural(x) for x in ("tract", "county", "block group", "puma")]
    ['tracts', 'counties', 'block groups', 'pumas']
    """
    return level[:-1] + "ies" if level.endswith("y") and level[-2:-1] not in "aeiou" else level + "s"


#: How a unit list built from the person rows describes itself (a list that is not public).
FROM_ROWS = "derived from the person rows (not a public list: a unit with no one in it is missing)"


@dataclass(frozen=True, eq=False)
class UnitCatalogue:
    """The public list of every unit of a geography, empty ones included: one entry per unit of
    the finest level with its id at every level (coarsest first, national excluded), and where
    the list comes from (an agency's block file, the embedded population's geography, ...).

    A published table per block must take its blocks from here, never from the persons: if a
    block's only resident were replaced by someone elsewhere, a list built from the persons
    would lose the block, and the shape of the release would tell the two datasets apart.
    """

    ids: dict[str, np.ndarray]
    source: str

    def __post_init__(self) -> None:
        ids = {lv: np.asarray(a).astype(str) for lv, a in self.ids.items()}
        if not ids or len({a.shape for a in ids.values()}) != 1:
            raise GeographyError("a unit catalogue needs one id per unit at every level, equal lengths")
        finest = list(ids)[-1]
        if len(np.unique(ids[finest])) != len(ids[finest]):
            dup = pd.Series(ids[finest]).loc[lambda x: x.duplicated()].iloc[0]
            raise GeographyError(f"unit catalogue lists {finest} {dup!r} more than once")
        object.__setattr__(self, "ids", ids)

    @property
    def levels(self) -> tuple[str, ...]:
        return tuple(self.ids)

    def within(self, level: str, unit: str, finer: str) -> list[str]:
        """Sorted ids of the ``finer`` units inside ``unit`` of ``level``."""
        for lv in (level, finer):
            if lv not in self.ids:
                raise GeographyError(f"the unit catalogue has no level {lv!r}; it has {list(self.ids)}")
        return sorted(set(self.ids[finer][self.ids[level] == unit].tolist()))


@dataclass(frozen=True, eq=False)
class Geography:
    """Each row's unit at every level of a nested hierarchy (coarsest first, "national" on top).

    Unit ids are strings that are unique within their level (census GEOIDs, "SS-PPPPP"
    PUMAs); every unit lies inside exactly one unit of each coarser level, which is checked.

    >>> g = Geography.census(np.array(["010010001001001", "010010001001002"]))
    >>> g.units("tract").tolist(), g.coarser("tract")
    (['01001000100', '01001000100'], ('county', 'state', 'national'))
    """

    levels: tuple[str, ...]
    ids: dict[str, np.ndarray]
    _index: dict = field(default_factory=dict, repr=False)
    catalogue: UnitCatalogue | None = None

    def __post_init__(self) -> None:
        levels = tuple(self.levels)
        object.__setattr__(self, "levels", levels)
        if not levels or levels[0] != "national" or len(set(levels)) != len(levels):
            raise GeographyError(f"levels must start with 'national' and not repeat, got {levels}")
        if set(self.ids) != set(levels):
            raise GeographyError(f"ids must be given for exactly the levels {levels}, got {sorted(self.ids)}")
        ids = {lv: np.asarray(self.ids[lv]).astype(str) for lv in levels}
        n = {a.shape for a in ids.values()}
        if len(n) != 1 or len(next(iter(n))) != 1:
            raise GeographyError(f"each level needs one id per row (1-d, equal lengths), got shapes {n}")
        object.__setattr__(self, "ids", ids)
        # nesting: a unit has one parent at the next coarser level
        for coarse, fine in zip(levels[1:], levels[2:]):
            pairs = pd.DataFrame({"c": ids[coarse], "f": ids[fine]}).drop_duplicates()
            dup = pairs["f"].duplicated(keep=False)
            if dup.any():
                bad = pairs.loc[dup, "f"].iloc[0]
                raise GeographyError(f"{fine} {bad!r} lies in more than one {coarse}; levels must nest")

    # ---- constructors ----------------------------------------------------------------------
    @classmethod
    def census(cls, block_geoids: np.ndarray) -> "Geography":
        """From 15-digit block GEOIDs (2 state, 3 county, 6 tract, 4 block digits)."""
        block = np.asarray(block_geoids).astype(str)
        if block.size:
            lengths = np.char.str_len(block)
            if lengths.min() != 15 or lengths.max() != 15:
                bad = block[lengths != 15][0]
                raise GeographyError(
                    f"block GEOIDs must have 15 digits (2 state, 3 county, 6 tract, 4 block), got {bad!r}"
                )
        ids = {"national": np.full(block.shape, "US")}
        for lv, n in _CENSUS_PREFIX.items():
            ids[lv] = block.astype(f"<U{n}")  # numpy truncates to the prefix
        return cls(CENSUS_LEVELS, ids)

    @classmethod
    def from_parts(cls, state, county, tract, block) -> "Geography":
        """Census geography from per-row state, county, tract and block codes."""
        parts = [
            pd.Series(np.asarray(x)).astype(str).str.zfill(w).to_numpy()
            for x, w in ((state, 2), (county, 3), (tract, 6), (block, 4))
        ]
        return cls.census(np.char.add(np.char.add(parts[0], parts[1]), np.char.add(parts[2], parts[3])))

    @classmethod
    def from_levels(cls, levels: dict[str, np.ndarray]) -> "Geography":
        """From per-row ids of each level below national, coarsest first (e.g. state, puma)."""
        n = len(next(iter(levels.values()))) if levels else 0
        return cls(("national", *levels), {"national": np.full(n, "US"), **levels})

    # ---- queries ---------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.ids["national"])

    def check_level(self, level: str) -> str:
        if level not in self.levels:
            raise GeographyError(f"unknown geography level {level!r}; this data has levels {list(self.levels)}")
        return level

    def coarser(self, level: str) -> tuple[str, ...]:
        """Levels strictly coarser than ``level``, finest first."""
        i = self.levels.index(self.check_level(level))
        return tuple(reversed(self.levels[:i]))

    def finer(self, level: str) -> tuple[str, ...]:
        i = self.levels.index(self.check_level(level))
        return self.levels[i + 1:]

    def units(self, level: str) -> np.ndarray:
        """Per-row id of the unit at ``level``."""
        return self.ids[self.check_level(level)]

    def unit_ids(self, level: str) -> list[str]:
        """Sorted distinct units at ``level``."""
        return sorted(set(self.units(level).tolist()))

    def mask(self, level: str, unit: str) -> np.ndarray:
        """Rows in ``unit`` at ``level`` (none for a unit the public catalogue lists and nobody
        lives in); an error names the level's units if it is unknown."""
        m = self.units(level) == unit
        if not m.any() and not self.listed(level, unit):
            raise GeographyError(
                f"no {level} {unit!r} in this data; known {plural(level)} include {self.unit_ids(level)[:5]}"
            )
        return m

    def parent(self, level: str, unit: str, parent_level: str) -> str:
        """The unit at ``parent_level`` enclosing ``unit`` of ``level``."""
        if parent_level not in self.coarser(level) and parent_level != level:
            raise GeographyError(
                f"{parent_level!r} is not coarser than {level!r}; coarser levels are {list(self.coarser(level))}"
            )
        m = self.mask(level, unit)
        if not m.any():  # listed, empty: the catalogue knows its parents
            return self.enclosing(level, [unit], parent_level)[0]
        return str(self.units(parent_level)[int(np.argmax(m))])

    def listed(self, level: str, unit: str) -> bool:
        """Whether the public unit catalogue names ``unit`` at ``level``."""
        return self.catalogue is not None and level in self.catalogue.ids and unit in set(self.catalogue.ids[level].tolist())

    def take(self, index: np.ndarray) -> "Geography":
        return Geography(self.levels, {lv: a[index] for lv, a in self.ids.items()}, catalogue=self.catalogue)

    def with_catalogue(self, catalogue: UnitCatalogue) -> "Geography":
        """This geography with the public list of its units; every row's unit must be on it."""
        for lv in self.levels[1:]:
            if lv not in catalogue.ids:
                continue
            listed = set(catalogue.ids[lv].tolist())
            missing = sorted(set(self.ids[lv].tolist()) - listed)
            if missing:
                raise GeographyError(f"{lv} {missing[0]!r} has persons but is missing from the unit list "
                                     f"({catalogue.source}); {len(missing)} such {lv}(s)")
        return Geography(self.levels, self.ids, catalogue=catalogue)

    def units_within(self, level: str, unit: str, finer: str) -> tuple[list[str], str]:
        """Sorted ids of the ``finer`` units inside ``unit`` of ``level``, and where the list comes
        from: the public catalogue when there is one (empty units included), else the rows."""
        self.check_level(finer)
        if self.catalogue is not None and finer in self.catalogue.ids and level in self.catalogue.ids:
            return self.catalogue.within(level, unit, finer), self.catalogue.source
        rows = self.mask(level, unit)
        return sorted(set(self.units(finer)[rows].tolist())), FROM_ROWS

    def enclosing(self, finer: str, ids: list[str], level: str) -> list[str]:
        """The unit of ``level`` around each of ``ids`` (units of ``finer``): from the public
        catalogue when it has both levels (empty units included), else from the rows."""
        if level not in self.coarser(finer):
            raise GeographyError(f"{level!r} is not coarser than {finer!r}; coarser levels are {list(self.coarser(finer))}")
        if self.catalogue is not None and {finer, level} <= set(self.catalogue.ids):
            lookup = dict(zip(self.catalogue.ids[finer].tolist(), self.catalogue.ids[level].tolist()))
        else:
            lookup = dict(zip(self.units(finer).tolist(), self.units(level).tolist()))
        unknown = [i for i in ids if i not in lookup]
        if unknown:
            raise GeographyError(f"{finer} {unknown[0]!r} is not in this geography")
        return [lookup[i] for i in ids]

    def to_columns(self) -> dict[str, np.ndarray]:
        """``GEO_<level>`` columns for every level below national (for data frames)."""
        return {f"GEO_{lv}": self.ids[lv] for lv in self.levels[1:]}

    @classmethod
    def from_columns(cls, df: pd.DataFrame) -> "Geography | None":
        cols = [c for c in df.columns if str(c).startswith("GEO_")]
        if not cols:
            return None
        return cls.from_levels({c[4:]: df[c].to_numpy() for c in cols})
