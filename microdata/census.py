"""The 2010 SF1 person tables as counting queries: each cell a product of per-attribute value sets."""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

from censusrecon.microdata.dataset import Dataset
from censusrecon.microdata.domain import Attribute, Domain
from censusrecon.microdata.errors import CensusReconError

#: The six OMB races, in SF1 order.
MAJOR_RACES = ("White", "Black or African American", "American Indian and Alaska Native", "Asian",
               "Native Hawaiian and Other Pacific Islander", "Some Other Race")
#: CENRACE codes 01..63 (stored as 0..62): every non-empty combination of the six races,
#: ordered by number of races, then as itertools.combinations orders them (SF1's order).
CENRACE_COMBOS: tuple[tuple[int, ...], ...] = tuple(
    c for k in range(1, 7) for c in itertools.combinations(range(6), k)
)
#: The P12 age groups (single years, inclusive ranges), SF1 order.
P12_AGE_GROUPS = ((0, 4), (5, 9), (10, 14), (15, 17), (18, 19), (20, 20), (21, 21), (22, 24), (25, 29), (30, 34),
                  (35, 39), (40, 44), (45, 49), (50, 54), (55, 59), (60, 61), (62, 64), (65, 66), (67, 69),
                  (70, 74), (75, 79), (80, 84), (85, 115))
MAX_AGE = 115
#: P12's age group of every single year of age 0..115 (index into ``P12_AGE_GROUPS``).
P12_GROUP_OF_AGE = np.concatenate([np.full(hi - lo + 1, g) for g, (lo, hi) in enumerate(P12_AGE_GROUPS)])
#: The Census Bureau's 38 age bins of its reconstruction study (Abowd et al., HDSR 2025, p. 9): single
#: years 0-21, then P12's groups from 22-24 on.
AGE_BINS_38 = tuple((a, a) for a in range(22)) + P12_AGE_GROUPS[7:]
#: The 38-bin age of every single year of age 0..115.
AGE_BIN38_OF_AGE = np.concatenate([np.full(hi - lo + 1, g) for g, (lo, hi) in enumerate(AGE_BINS_38)])
#: An AGE attribute of these 38 bins (a source whose single-year age is not the truth, the Bureau's extract)
#: is named so; the tables' single-year AGE sets are mapped onto it where they are unions of whole bins.
AGE_BINS_38_LABELS = tuple(str(lo) if lo == hi else f"{lo}+" if hi == MAX_AGE else f"{lo} - {hi}"
                           for lo, hi in AGE_BINS_38)
#: Attributes the tables read, by role (the embedded population's names; the PPMF reader maps
#: QAGE, QSEX, CENHISP, CENRACE onto them).
AGE, SEX, HISP, RACE = "AGE", "SEX", "HISP", "CENRACE"


def cenrace_label(code: int) -> str:
    return " and ".join(MAJOR_RACES[i] for i in CENRACE_COMBOS[code])


def races_with(pred) -> frozenset[int]:
    return frozenset(i for i, c in enumerate(CENRACE_COMBOS) if pred(c))


def membership_matrix(size: int, sets) -> np.ndarray:
    """(size × len(sets)) float32 0/1 matrix: entry (v, s) is 1 when value v is in set s."""
    m = np.zeros((size, len(sets)), dtype=np.float32)
    for s, vals in enumerate(sets):
        m[list(vals), s] = 1.0
    return m


def _all(attr_size: int) -> frozenset[int]:
    return frozenset(range(attr_size))


@dataclass(frozen=True)
class Cell:
    """One published count: table, SF1 cell number, label and the value set of each attribute it
    restricts (attributes it does not name are unrestricted); ``level`` is where it is published:
    "block", a geography level ("tract": per tract when the unit is coarser, else the unit) or
    "unit"."""

    table: str
    number: int
    label: str
    sets: tuple[tuple[str, frozenset[int]], ...]
    level: str = "block"

    @property
    def name(self) -> str:
        return f"{self.table}_{self.number:03d}"

    def attrs(self) -> dict[str, frozenset[int]]:
        return dict(self.sets)


def _cell(table, number, label, level="block", **sets) -> Cell:
    return Cell(table, number, label, tuple(sorted((k, frozenset(v)) for k, v in sets.items())), level)


def _race_structure(table: str, start: int, prefix: str, **extra) -> list[Cell]:
    """P8-style race cells from ``start``: one race, the 6 singles, two or more, then per number of
    races its subtotal and every combination."""
    out, n = [], start
    out.append(_cell(table, n, f"{prefix}Population of one race", **extra, CENRACE=races_with(lambda c: len(c) == 1)))
    n += 1
    for i in range(6):
        out.append(_cell(table, n, f"{prefix}{MAJOR_RACES[i]} alone", **extra, CENRACE={CENRACE_COMBOS.index((i,))}))
        n += 1
    out.append(_cell(table, n, f"{prefix}Two or more races", **extra, CENRACE=races_with(lambda c: len(c) >= 2)))
    n += 1
    for k in range(2, 7):
        out.append(_cell(table, n, f"{prefix}Population of {k} races", **extra,
                         CENRACE=races_with(lambda c, k=k: len(c) == k)))
        n += 1
        for combo in itertools.combinations(range(6), k):
            out.append(_cell(table, n, prefix + "; ".join(MAJOR_RACES[i] for i in combo), **extra,
                             CENRACE={CENRACE_COMBOS.index(combo)}))
            n += 1
    return out


def _sex_by_age(table: str, groups, level: str, total_label: str = "Total", **restrict) -> list[Cell]:
    out = [_cell(table, 1, total_label, level, **restrict)]
    n = 2
    for s, sex in enumerate(("Male", "Female")):
        out.append(_cell(table, n, f"{sex}", level, SEX={s}, **restrict))
        n += 1
        for lo, hi in groups:
            label = f"{sex}: {lo} years" if lo == hi else f"{sex}: {lo} to {hi} years"
            out.append(_cell(table, n, label, level, SEX={s}, AGE=range(lo, hi + 1), **restrict))
            n += 1
    return out


#: P12A–I and PCT12A–O: the race/ethnicity group each table is restricted to.
def _iteration_groups() -> dict[str, dict]:
    alone = {chr(ord("A") + i): races_with(lambda c, i=i: c == (i,)) for i in range(6)}
    groups = {k: {"CENRACE": v} for k, v in alone.items()}
    groups["G"] = {"CENRACE": races_with(lambda c: len(c) >= 2)}
    groups["H"] = {"HISP": {1}}
    groups["I"] = {"HISP": {0}, "CENRACE": alone["A"]}
    return groups


def _pct_groups() -> dict[str, dict]:
    g = _iteration_groups()
    out = {k: g[k] for k in "ABCDEFGH"}
    singles = [races_with(lambda c, i=i: c == (i,)) for i in range(6)] + [races_with(lambda c: len(c) >= 2)]
    for letter, races in zip("IJKLMNO", singles):
        out[letter] = {"HISP": {0}, "CENRACE": races}
    return out


PCT12_AGES = tuple((a, a) for a in range(100)) + ((100, 104), (105, 109), (110, 115))


def sf1_tables() -> dict[str, list[Cell]]:
    """Every cell of P1, P6, P7, P8, P9, P10, P11, P12, P12A–I, P14 (block) and PCT12, PCT12A–O (tract)."""
    t: dict[str, list[Cell]] = {}
    t["P1"] = [_cell("P1", 1, "Total")]
    tallies = [races_with(lambda c, i=i: i in c) for i in range(6)]
    # P6 and P7 count race *tallies*: their total cells are sums over the race cells, so they are
    # kept as the race cells only (the totals are linear combinations, not counting queries).
    t["P6"] = [_cell("P6", 2 + i, f"{MAJOR_RACES[i]} alone or in combination", CENRACE=tallies[i]) for i in range(6)]
    t["P7"] = ([_cell("P7", 3 + i, f"Not Hispanic or Latino: {MAJOR_RACES[i]} alone or in combination",
                      HISP={0}, CENRACE=tallies[i]) for i in range(6)]
               + [_cell("P7", 10 + i, f"Hispanic or Latino: {MAJOR_RACES[i]} alone or in combination",
                        HISP={1}, CENRACE=tallies[i]) for i in range(6)])
    t["P8"] = [_cell("P8", 1, "Total")] + _race_structure("P8", 2, "")
    t["P9"] = ([_cell("P9", 1, "Total"), _cell("P9", 2, "Hispanic or Latino", HISP={1}),
                _cell("P9", 3, "Not Hispanic or Latino", HISP={0})]
               + _race_structure("P9", 4, "Not Hispanic or Latino: ", HISP={0}))
    adult = range(18, MAX_AGE + 1)
    t["P10"] = [_cell("P10", 1, "Total 18 years and over", AGE=adult)] + _race_structure("P10", 2, "18+: ", AGE=adult)
    t["P11"] = ([_cell("P11", 1, "Total 18 years and over", AGE=adult),
                 _cell("P11", 2, "18+: Hispanic or Latino", AGE=adult, HISP={1}),
                 _cell("P11", 3, "18+: Not Hispanic or Latino", AGE=adult, HISP={0})]
                + _race_structure("P11", 4, "18+: Not Hispanic or Latino: ", AGE=adult, HISP={0}))
    t["P12"] = _sex_by_age("P12", P12_AGE_GROUPS, "block")
    for letter, restrict in _iteration_groups().items():
        t[f"P12{letter}"] = _sex_by_age(f"P12{letter}", P12_AGE_GROUPS, "block", **restrict)
    t["P14"] = [_fix_under20(c) for c in _sex_by_age("P14", tuple((a, a) for a in range(20)), "block",
                                                       "Total under 20")]
    t["PCT12"] = _sex_by_age("PCT12", PCT12_AGES, "tract")
    for letter, restrict in _pct_groups().items():
        t[f"PCT12{letter}"] = _sex_by_age(f"PCT12{letter}", PCT12_AGES, "tract", **restrict)
    return t


def _fix_under20(c: Cell) -> Cell:
    # P14's sex totals are "under 20" too: intersect every AGE set with 0..19
    sets = dict(c.sets)
    sets["AGE"] = frozenset(sets.get("AGE", range(MAX_AGE + 1))) & frozenset(range(20))
    return Cell(c.table, c.number, c.label, tuple(sorted(sets.items())), c.level)


#: Correct table sets by name.
TABLE_SETS = {
    "sf1": ("P1", "P6", "P7", "P8", "P9", "P10", "P11", "P12", *[f"P12{x}" for x in "ABCDEFGHI"], "P14",
            "PCT12", *[f"PCT12{x}" for x in "ABCDEFGHIJKLMNO"]),
    "race_hispanic": ("P1", "P6", "P7", "P8", "P9"),
    # the block tables, every one keyed on SF1's 38 age groups or coarser (P14's single years are groups
    # 0-19): what a reconstruction that is exact on {block, sex, age group, race, Hispanic} (the Bureau's
    # solvar-0 extract) tabulates exactly as published; PCT12's single years from 22 on are not
    "sf1_binned": ("P1", "P6", "P7", "P8", "P9", "P10", "P11", "P12", *[f"P12{x}" for x in "ABCDEFGHI"], "P14"),
}


def reference_cells() -> list[Cell]:
    """The paper's public code's query set, defects kept (see the module notes in README):
    per block P1, P6 (6 race cells), P7 (12), P9 cells 4–73, P11 without cell 48, and P12 with
    P12A–I where the female-by-age cells are copies of the male ones (only the female totals
    remain); per tract PCT12 cells 2–209. 421 block cells, 417 distinct; 208 tract cells."""
    t = sf1_tables()
    cells = list(t["P1"]) + list(t["P6"]) + list(t["P7"])
    cells += [c for c in t["P9"] if c.number >= 4]
    cells += [c for c in t["P11"] if c.number != 48]
    for name in ["P12", *[f"P12{x}" for x in "ABCDEFGHI"]]:
        table = t[name]
        # cells 1, 2 (male), 3–25 (male ages), 26 (female total); the female loop rewrote 3–25
        cells += [c for c in table if c.number <= 26]
    cells += [c for c in t["PCT12"] if c.number >= 2]
    return cells


def required_attributes(cells: Iterable[Cell]) -> set[str]:
    return {a for c in cells for a, _ in c.sets}


def tables_needing(cells: Iterable[Cell], attrs: Iterable[str]) -> list[str]:
    """The tables (in table order: P1 before P12) with a cell that restricts any of ``attrs``."""
    attrs = set(attrs)
    return sorted({c.table for c in cells if attrs & {a for a, _ in c.sets}}, key=lambda t: (len(t), t))


def placed_cells(domain: Domain, cells: Sequence[Cell], block_attr: str | None = "BLOCK",
                 areas: dict[str, Sequence[tuple[str, Sequence[int]]]] | None = None):
    """Every published copy of every cell, duplicates included, in the order :meth:`CensusWorkload.build`
    keeps them: (cell, place, level, product) with ``place`` the block's value name (block cells when
    the domain has ``block_attr``), the area's name (cells of a level in ``areas``) or None (the
    unit), and ``product`` the query's value set per attribute (equal products are one query)."""
    need = required_attributes(cells)
    missing = sorted(need - set(domain.names))
    if missing:
        raise CensusReconError(
            f"tables {tables_needing(cells, missing)} need attributes {missing}, which the data does not have "
            f"(it has {list(domain.names)})")
    binned = "AGE" in domain and domain.attribute("AGE").values == AGE_BINS_38_LABELS
    has_block = block_attr is not None and block_attr in domain
    blocks = range(domain.size(block_attr)) if has_block else [None]
    areas = areas or {}
    block_names = domain.attribute(block_attr).values if has_block else ()
    names, sizes = domain.names, domain.sizes
    jb = names.index(block_attr) if has_block else None
    for c in cells:
        sets = c.attrs()
        if binned and "AGE" in sets:
            sets = {**sets, "AGE": _binned_ages(c, sets["AGE"])}
        if not has_block:
            where = [(None, None, "unit")]
        elif c.level == "block":
            where = [(frozenset({b}), block_names[b], "block") for b in blocks]
        elif c.level in areas:
            where = [(frozenset(int(i) for i in members), name, c.level) for name, members in areas[c.level]]
        else:
            where = [(None, None, "unit")]
        base = [frozenset(v for v in sets[a] if v < n) if a in sets else _all(n) for a, n in zip(names, sizes)]
        for bset, place, level in where:
            full = base
            if bset is not None:
                full = list(base)
                full[jb] = bset
            yield c, place, level, tuple(full)


@dataclass(frozen=True)
class _Template:
    """What a census workload is for every unit of one domain shape: its queries, with each label as its cell's
    name and the block it is placed in (-1: none; an area's name is in the cell name)."""

    value_sets: tuple
    queries: tuple
    cells_per_table: tuple
    query_levels: tuple
    label_names: tuple
    label_blocks: tuple


@functools.lru_cache(maxsize=64)  # per domain shape, cells and areas: a state's padded sizes, bounded
def _workload_template(names: tuple, shape: tuple, cells: tuple, block_attr: str | None, areas_key) -> _Template:
    """The workload of a domain of ``names`` whose attributes have the values ``shape`` (the block attribute only
    its size), built once with placeholder block names that are then read back out of the labels."""
    attrs = tuple(Attribute(n, tuple(f"\x00{i}" for i in range(v)) if n == block_attr else v)
                  for n, v in zip(names, shape))
    areas = None if areas_key is None else {lv: [(nm, list(m)) for nm, m in v] for lv, v in areas_key}
    w = CensusWorkload._build(Domain(attrs), list(cells), block_attr or "BLOCK", areas)
    label_names, label_blocks = [], []
    for label in w.labels:
        name, at, place = label.partition("@\x00")
        label_names.append(name)
        label_blocks.append(int(place) if at else -1)
    return _Template(w.value_sets, w.queries, w.cells_per_table, w.query_levels, tuple(label_names),
                     tuple(label_blocks))


def _binned_ages(cell: "Cell", ages: frozenset[int]) -> frozenset[int]:
    """A cell's single-year AGE set as the 38 bins it covers, when it is a union of whole bins; a table
    keyed on single years inside a bin (PCT12 from 22 on) cannot be tabulated from binned ages."""
    groups = frozenset(int(AGE_BIN38_OF_AGE[a]) for a in ages if a <= MAX_AGE)
    whole = frozenset(a for g in groups for a in range(AGE_BINS_38[g][0], AGE_BINS_38[g][1] + 1))
    if whole != frozenset(a for a in ages if a <= MAX_AGE):
        raise CensusReconError(f"table {cell.table} is keyed on single years of age ({cell.label}), but this data's "
                               "AGE is SF1's 38 age groups: choose tables keyed on the groups or coarser "
                               "(tables: sf1_binned)")
    return groups


@dataclass(frozen=True)
class CensusWorkload:
    """Census cells over an attack domain, expanded per block when the domain has BLOCK.

    Every query is a product of per-attribute value sets; ``queries`` holds, per query, the
    index of its value set for each attribute (into ``value_sets[attr]``). Duplicate
    queries (the same product) are kept once; ``labels`` names each kept query by its
    first cell, ``query_levels`` says where it is published ("block", "unit", or the level of
    an area inside the unit: "tract" in a county), and ``cells_per_table`` counts the cells
    asked for, before deduplication.
    """

    domain: Domain
    value_sets: tuple[tuple[frozenset[int], ...], ...]  # per attribute, the distinct sets used
    queries: tuple[tuple[int, ...], ...]  # per query, a set index per attribute
    labels: tuple[str, ...]
    cells_per_table: tuple[tuple[str, int], ...]
    query_levels: tuple[str, ...]

    @property
    def num_queries(self) -> int:
        return len(self.queries)

    @classmethod
    def build(cls, domain: Domain, cells: Sequence[Cell], block_attr: str | None = "BLOCK",
              areas: dict[str, Sequence[tuple[str, Sequence[int]]]] | None = None) -> "CensusWorkload":
        """Block-level cells become one query per block when ``block_attr`` is in the domain;
        cells of a level in ``areas`` (per level, each area's name and its blocks' codes: the
        tracts of a county) one query per area; other cells stay single queries over the whole
        unit. Without ``block_attr`` every cell is summed to the unit.

        Units whose domains differ only in their blocks' names (the tracts of a state padded to one size) share
        everything but the labels: that is built once (:func:`_workload_template`) and relabelled per unit."""
        has_block = block_attr is not None and block_attr in domain
        names = tuple(a.name for a in domain.attributes)
        shape = tuple(a.values if a.name != block_attr else len(a.values) for a in domain.attributes)
        areas_key = None if not areas else tuple((lv, tuple((nm, tuple(int(i) for i in m)) for nm, m in v))
                                                 for lv, v in sorted(areas.items()))
        cells = tuple(c if all(isinstance(v, frozenset) for _, v in c.sets)  # a cell made with plain sets: hashable
                      else Cell(c.table, c.number, c.label, tuple((a, frozenset(v)) for a, v in c.sets), c.level)
                      for c in cells)
        t = _workload_template(names, shape, cells, block_attr if has_block else None, areas_key)
        block_names = domain.attribute(block_attr).values if has_block else ()
        labels = tuple(name if b < 0 else f"{name}@{block_names[b]}" for name, b in zip(t.label_names, t.label_blocks))
        return cls(domain, t.value_sets, t.queries, labels, t.cells_per_table, t.query_levels)

    @classmethod
    def _build(cls, domain: Domain, cells: Sequence[Cell], block_attr: str | None = "BLOCK",
               areas: dict[str, Sequence[tuple[str, Sequence[int]]]] | None = None) -> "CensusWorkload":
        """:meth:`build` without the template: every cell placed and deduplicated."""
        seen: dict[tuple, int] = {}
        labels: list[str] = []
        levels: list[str] = []
        products: list[tuple[frozenset[int], ...]] = []
        counts: dict[str, int] = {}
        for c, place, level, key in placed_cells(domain, cells, block_attr, areas):
            counts[c.table] = counts.get(c.table, 0) + 1
            if key in seen:
                continue
            seen[key] = len(products)
            products.append(key)
            labels.append(c.name if place is None else f"{c.name}@{place}")
            levels.append(level)
        value_sets = []
        index = []
        for j in range(len(domain)):
            distinct = sorted({p[j] for p in products}, key=lambda s: (len(s), sorted(s)))
            value_sets.append(tuple(distinct))
            pos = {s: i for i, s in enumerate(distinct)}
            index.append([pos[p[j]] for p in products])
        queries = tuple(zip(*index))
        return cls(domain, tuple(value_sets), queries, tuple(labels), tuple(counts.items()), tuple(levels))

    def membership(self, attr: int) -> np.ndarray:
        """(|attr| × #sets) 0/1 matrix: value v is in set s."""
        return membership_matrix(self.domain.sizes[attr], self.value_sets[attr])

    def counts(self, data: Dataset, weights: np.ndarray | None = None, chunk: int = 20_000) -> np.ndarray:
        """Exact int64 cell counts, or with ``weights`` the float64 sums of the rows' weights in each
        cell (a weighted histogram's answers). The queries are grouped by their set of the attribute
        with the most distinct sets (BLOCK, where there is one: a block's cells), and each group is
        evaluated on the rows in that set only, ``chunk`` rows at a time."""
        if data.domain != self.domain:
            raise CensusReconError("data domain differs from the workload's")
        d = len(self.domain)
        q = np.array(self.queries, dtype=np.int64).reshape(len(self.queries), d)
        member = [self.membership(j).astype(bool) for j in range(d)]
        out = np.zeros(len(q), dtype=np.int64 if weights is None else np.float64)
        if not len(q) or not len(data):
            return out
        key = int(np.argmax([len(v) for v in self.value_sets]))
        codes_all = np.asarray(data.codes)
        order = np.argsort(q[:, key], kind="stable")
        starts = np.flatnonzero(np.r_[True, np.diff(q[order, key]) != 0])
        for g, lo in enumerate(starts):
            idx = order[lo:starts[g + 1] if g + 1 < len(starts) else len(order)]
            rows = np.flatnonzero(member[key][codes_all[:, key], q[idx[0], key]])
            if not len(rows):
                continue
            qi = q[idx]
            for start in range(0, len(rows), chunk):
                r = rows[start:start + chunk]
                codes = codes_all[r]
                hit = np.ones((len(r), len(idx)), dtype=bool)
                for j in range(d):
                    if j != key:
                        hit &= member[j][codes[:, j]][:, qi[:, j]]
                out[idx] += hit.sum(axis=0) if weights is None else weights[r] @ hit
        return out

    def answer(self, data: Dataset) -> np.ndarray:
        """Exact answers as fractions of rows."""
        return self.counts(data) / len(data)

    def tables(self) -> np.ndarray:
        """The table each query belongs to (its first cell's table; a label is TABLE_NNN[@block])."""
        return np.array([label.split("@")[0].rsplit("_", 1)[0] for label in self.labels])

    def everyone_queries(self) -> np.ndarray:
        """Indices of the queries that restrict no person attribute (BLOCK aside): totals."""
        full = [frozenset(range(n)) for n in self.domain.sizes]
        names = self.domain.names
        return np.array([i for i, q in enumerate(self.queries)
                         if all(self.value_sets[j][q[j]] == full[j] for j in range(len(names)) if names[j] != "BLOCK")],
                        dtype=np.int64)

    def levels(self) -> np.ndarray:
        """Where each query is published: "block" (one per block), "unit" (the whole target unit) or
        an area level inside the unit ("tract" in a county)."""
        return np.array(self.query_levels)

    def level_order(self) -> list[str]:
        """The levels the queries are published at, finest first: block, areas, unit."""
        present = list(dict.fromkeys(self.levels().tolist()))
        return sorted(present, key=lambda lv: (lv != "block", lv == "unit"))

    def cells_per_person(self, chunk_cells: int = 1 << 26) -> np.ndarray:
        """For every person type (a value of each attribute but BLOCK, row-major over the domain
        without BLOCK), how many released queries one person of that type lies in, summed over
        every table at once: the tables of one block (a person lives in one) and the unit's.

        Every block is published with the same tables, so block 0 stands for all of them when
        the BLOCK sets are single blocks or the whole unit; with other BLOCK sets (the tracts of
        a county) a person's count depends on their block, and the most is taken over one block
        of each class of blocks that lie in the same multiset of queries (BLOCK aside)."""
        names = [a for a in self.domain.names if a != "BLOCK"]
        sub = [self.domain.index(a) for a in names]
        q = np.array(self.queries, dtype=np.int64).reshape(len(self.queries), len(self.domain))
        member = {j: self.membership(j).astype(bool) for j in range(len(self.domain))}
        if "BLOCK" in self.domain:
            jb = self.domain.index("BLOCK")
            in_block = member[jb][:, q[:, jb]]  # (blocks, queries): the queries a person of block b lies in
            sizes = in_block.sum(axis=0)
            symmetric = bool(np.all((sizes == 1) | (sizes == in_block.shape[0])))
            blocks = [0] if symmetric else self._block_classes(in_block, q[:, sub])
        else:
            in_block, blocks = None, [None]
        shape = tuple(self.domain.sizes[j] for j in sub)
        n_types = int(np.prod(shape)) if shape else 1
        best = np.zeros(n_types, dtype=np.int64)
        for b in blocks:
            qs = q if b is None else q[in_block[b]]
            step = max(1, chunk_cells // max(len(qs), 1))
            for start in range(0, n_types, step):
                types = np.stack(np.unravel_index(np.arange(start, min(start + step, n_types)), shape), axis=1) \
                    if shape else np.zeros((1, 0), np.int64)
                hit = np.ones((len(types), len(qs)), dtype=bool)
                for col, j in enumerate(sub):
                    hit &= member[j][types[:, col]][:, qs[:, j]]
                best[start:start + len(types)] = np.maximum(best[start:start + len(types)], hit.sum(axis=1))
        return best

    @staticmethod
    def _block_classes(in_block: np.ndarray, person_part: np.ndarray) -> list[int]:
        """One block per class of blocks whose queries have the same person parts, with
        multiplicity (a person of a given type lies in as many of them in either block)."""
        seen: dict[bytes, int] = {}
        for b in range(in_block.shape[0]):
            rows = person_part[in_block[b]]
            key = rows[np.lexsort(rows.T[::-1])].tobytes() if len(rows) else b""
            seen.setdefault(key, b)
        return sorted(seen.values())

    def max_cells_per_person(self) -> int:
        """The most released queries one person lies in: the L1 sensitivity of the census
        counts under add/remove. Exact (the maximum of the summed counts over every person
        type), not the sum of each table's own maximum, which takes maxima from different
        persons (99 cells for the full SF1 set where the true figure is 42). Computed once per
        workload (it is a pure function of the frozen workload)."""
        if "_max_cells_per_person" not in self.__dict__:
            self.__dict__["_max_cells_per_person"] = int(self.cells_per_person().max())
        return self.__dict__["_max_cells_per_person"]
