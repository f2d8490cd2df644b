"""The statistics of a census-style population that reconstruction attacks are sensitive to, each
beside its 2010 Census figure and the tolerance the 2010-shaped population is held to.

Sources are in ``docs/pages/calibration.md``: SUPP is Abowd et al.'s HDSR 2025 supplement
(Tables 7, 12-14), BR02 and BR03 the 2010 Census briefs on race and Hispanic origin and on age and
sex. Every race × ethnicity statistic is on the 126 cells CENRACE × Hispanic, as the Bureau's.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from censusrecon.microdata.dataset import Dataset
from censusrecon.microdata.errors import CensusReconError
from censusrecon.microdata.census import AGE_BIN38_OF_AGE, CENRACE_COMBOS
from censusrecon.microdata.population import race_group

#: The Bureau's seven block-size bins (persons per block), the last open.
SIZE_BINS = ((1, 9), (10, 49), (50, 99), (100, 249), (250, 499), (500, 999), (1000, None))
SIZE_LABELS = tuple(f"{lo}+" if hi is None else f"{lo}-{hi}" for lo, hi in SIZE_BINS)


@dataclass(frozen=True)
class Statistic:
    """One measured statistic, its 2010 figure, the tolerance (absolute, in the statistic's own
    units) and the source of the figure."""

    name: str
    value: float
    target: float | None
    tolerance: float | None
    source: str
    #: False for a validation statistic: one the generator was never fitted to (see ``VALIDATION``).
    tuned: bool = True

    @property
    def within(self) -> bool | None:
        if self.target is None or self.tolerance is None or not np.isfinite(self.value):
            return None  # no 2010 figure, or nothing to measure (a bin with no blocks)
        return bool(abs(self.value - self.target) <= self.tolerance)


#: 2010 figures by block-size bin (SUPP Tables 7, 13-14, 12): % of occupied blocks, % of persons,
#: % of persons whose race × ethnicity is their block's mode, person-weighted mean Σp² over the
#: block's 126 cells (the proportional guesser's precision, %), % unique on {block, sex, 38-bin age}.
TARGETS_BY_BIN = {
    "blocks_pct": (29.38, 43.04, 16.02, 8.71, 2.04, 0.65, 0.16),
    "persons_pct": (2.61, 21.89, 22.37, 25.92, 13.90, 8.75, 4.55),
    "modal_pct": (93.5, 84.6, 78.1, 73.9, 70.9, 66.3, 60.6),
    "sum_p2_pct": (91.6, 78.9, 68.9, 62.9, 59.0, 53.6, 47.9),
    "unique_bin38_pct": (89.4, 55.0, 29.6, 13.7, 3.9, 0.9, 0.2),
}
#: SUPP Table 7's "Unique (%)" counts data-defined uniques over the *total* population; the
#: generated population is all data-defined, so its uniqueness is compared with Table 7's figure
#: divided by each bin's data-defined share (persons of Tables 13-14 over those of Table 7:
#: 91.4, 91.4, 90.9, 89.2, 87.8, 86.1, 83.1%), as above: 81.7 / 0.914 = 89.4 and so on.
UNIQUE_BIN38_PUBLISHED = (81.7, 50.3, 26.9, 12.2, 3.4, 0.8, 0.2)
#: Tolerances per bin (percentage points). The two top bins hold 0.8% of blocks, so a population of
#: a few hundred thousand has few of them: their tolerance is wider.
TOLERANCE_BY_BIN = {
    "blocks_pct": (2.5, 2.5, 2.0, 1.5, 0.7, 0.4, 0.2),
    "persons_pct": (1.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0),
    "modal_pct": (5.0, 5.0, 6.0, 6.0, 8.0, 10.0, 12.0),
    "sum_p2_pct": (5.0, 5.0, 6.0, 6.0, 8.0, 10.0, 12.0),
    "unique_bin38_pct": (6.0, 6.0, 6.0, 5.0, 3.0, 2.0, 2.0),
}
SOURCES_BY_BIN = {"blocks_pct": "SUPP Table 7", "persons_pct": "SUPP Table 7", "modal_pct": "SUPP Tables 13-14",
                  "sum_p2_pct": "SUPP Table 12 (PRG)", "unique_bin38_pct": "SUPP Table 7 / data-defined share"}

#: Whole-population 2010 figures: (value, tolerance, source).
TARGETS = {
    "persons_per_tract": (4257.0, 600.0, "TALLY: 308.7M / 72,531 populated tracts"),
    "occupied_blocks_per_tract": (85.6, 8.0, "TALLY, SUPP: 6,207,027 / 72,531"),
    "empty_blocks_pct": (44.0, 3.0, "HDSR p.4: 4,871,270 of 11,078,297 blocks"),
    "modal_pct": (76.1, 4.0, "SUPP Tables 13-14 (CEF, data-defined persons)"),
    "sum_p2_pct": (66.3, 4.0, "HDSR Table 5 (PRG, CEF attacker)"),
    "unique_age_pct": (44.0, 5.0, "HDSR p.20: persons unique on {block, sex, age}"),
    "unique_bin38_pct": (25.6, 4.0, "SUPP Table 7: 22.9% of all persons / 89.4% data-defined"),
    "male_pct": (49.2, 1.0, "BR03"),
    "age_under18_pct": (24.0, 1.0, "BR03"),
    "age_18_44_pct": (36.5, 1.0, "BR03"),
    "age_45_64_pct": (26.4, 1.0, "BR03"),
    "age_65plus_pct": (13.0, 1.0, "BR03"),
    "hispanic_pct": (16.3, 2.0, "BR02 Table 2"),
    "nh_white_pct": (63.7, 3.0, "BR02 Table 2"),
    "nh_black_pct": (12.2, 2.5, "BR02 Table 2"),
    "nh_asian_pct": (4.7, 1.5, "BR02 Table 2"),
    "two_or_more_pct": (2.9, 1.0, "BR02 Table 1"),
    "diversity_index_pct": (54.9, 4.0, "Census Bureau diversity index, 8 groups"),
    "median_persons_per_tract": (4000.0, 600.0, "Census Bureau tract criteria: optimum 4,000"),
    "tracts_in_design_range_pct": (95.0, 5.0, "Census Bureau tract criteria: 1,200-8,000 persons"),
    "persons_per_block_group": (1424.0, 250.0, "TALLY, derived: 308.7M / 216,864 populated block groups"),
    "median_age_hispanic": (27.0, 3.0, "Pew Research Center 2012 (2010 ACS)"),
    "median_age_nh_white": (42.0, 3.0, "2010, secondary (course notes citing Census figures)"),
    "group_quarters_pct": (2.6, 0.6, "C2010BR-14: 8.0M of 308.7M persons"),
    # first measured as validation statistics (4.7 and 2.8, outside), then fitted (stray_member)
    "small_cells_block_race7_pct": (8.1, 2.0, "SUPP Table 18 Panel A: block cells of 1-2 persons"),
    "small_cells_block_hisp14_pct": (5.8, 2.0, "SUPP Table 18 Panel B: Hispanic x race7, block"),
}


#: Block-group figures of SUPP Tables 18-19 (populated block groups), tuning targets since 2026-12-03 of the
#: race mixes' dispersion (``data.population.race_mix: rarity``); their tolerances were set before that fit,
#: as the tract and block figures' beside them. The default (Dirichlet) mixes were never fitted to them.
BLOCK_GROUP_TARGETS = {
    "small_cells_bg_race7_pct": (10.1, 2.0, "SUPP Table 18 Panel A: block-group cells of 1-2 persons"),
    "small_cells_bg_hisp14_pct": (14.5, 3.0, "SUPP Table 18 Panel B: Hispanic x race7, block group"),
    "bgs_small_adult_race7_pct": (95.7, 6.0, "SUPP Table 19 Panel A: block groups with an adult race7 group of 1-14"),
    "bgs_small_adult_hisp14_pct": (100.0, 6.0, "SUPP Table 19 Panel B: block groups, Hispanic x race7"),
}


#: Validation statistics: 2010 figures the 2010-shaped generator is never fitted to, with tolerances
#: set before they were first measured on it (docs/pages/calibration.md, "Validation statistics").
#: (value, tolerance, source). Adult = 18+; race7 is SF1 P8 in 1980's format (White alone; Black,
#: AIAN, Asian, NHPI, some other race, each alone or with White; all other two-or-more).
VALIDATION = {
    "small_cells_tract_race7_pct": (5.5, 2.0, "SUPP Table 18 Panel A: tract cells of 1-2 persons"),
    "small_cells_tract_hisp14_pct": (10.8, 3.0, "SUPP Table 18 Panel B: Hispanic x race7, tract"),
    "blocks_small_adult_race7_pct": (83.8, 6.0, "SUPP Table 19 Panel A: an adult race7 group of 1-14"),
    "blocks_small_adult_hisp14_pct": (87.7, 6.0, "SUPP Table 19 Panel B: an adult Hispanic x race7 group of 1-14"),
    "tracts_small_adult_race7_pct": (84.3, 10.0, "SUPP Table 19 Panel A, tracts"),
    "unique_modal_blocks_pct": (95.58, 3.0, "HDSR p.21 fn.16: blocks whose 126-cell mode is unique, count 2+"),
    "cef_self_linkage_pct": (86.1, 4.0, "SUPP Table 12 (CEF, perfect attacker): race purity of {block, sex, age}"),
    "age_under18_hispanic_pct": (33.8, 3.0, "2010, secondary (course notes citing Census figures)"),
    "age_under18_nh_white_pct": (20.1, 3.0, "2010, secondary (course notes citing Census figures)"),
}


def race7_1980(cenrace: np.ndarray) -> np.ndarray:
    """SF1 P8's race in 1980's seven categories (SUPP Tables 18-19) of CENRACE codes 0..62: White
    alone 0; Black, AIAN, Asian, NHPI, some other race alone or with White 1..5; the rest 6."""
    cat = np.full(len(CENRACE_COMBOS), 6)
    for code, combo in enumerate(CENRACE_COMBOS):
        rest = [r for r in combo if r != 0]
        cat[code] = 0 if not rest else (rest[0] if len(rest) == 1 else 6)
    return cat[np.asarray(cenrace)]


def block_groups(block_ids: np.ndarray) -> np.ndarray | None:
    """Each 15-character block GEOID's block group (its first 12 characters: the tract and the
    block number's first digit), or None where the ids are not GEOIDs."""
    ids = np.asarray(block_ids).astype(str)
    if ids.size == 0 or not (np.char.str_len(ids) == 15).all():
        return None
    return ids.astype("<U12")


def _bin_of(sizes: np.ndarray) -> np.ndarray:
    edges = np.array([lo for lo, _ in SIZE_BINS[1:]])
    return np.searchsorted(edges, sizes, side="right")


def block_modes(block: np.ndarray, group: np.ndarray, cell: np.ndarray, fallback: int) -> np.ndarray:
    """Each person's block mode of ``cell`` by the Bureau's rule (``findModalRE``): the block's most
    common value; if its count is 1 or several values tie, the mode of the block's ``group`` (the
    block group, or the tract where there are none); if that also fails, ``fallback``."""
    df = pd.DataFrame({"b": block, "t": group, "c": cell})

    def modes(key):
        cnt = df.groupby([key, "c"]).size().rename("n").reset_index()
        top = cnt.groupby(key)["n"].transform("max")
        best = cnt[cnt["n"] == top]
        nbest = best.groupby(key)["c"].transform("size")
        ok = best[(nbest == 1) & (best["n"] > 1)]
        return ok.set_index(key)["c"]

    bm, tm = modes("b"), modes("t")
    out = df["b"].map(bm)
    out = out.fillna(df["t"].map(tm)).fillna(fallback)
    return out.to_numpy(np.int64)


def describe(data: Dataset, tract_level: str = "tract", block_level: str = "block",
             group_quarters: np.ndarray | None = None) -> list[Statistic]:
    """Every statistic of this module measured on ``data`` (census geography with blocks; AGE,
    SEX, HISP and CENRACE or RACE), beside its 2010 figure and tolerance: the tuned ones, then the
    validation ones (``tuned`` False). ``group_quarters``: each person's group-quarters flag where the
    data has one (its share is not measured without it)."""
    geo = data.geography
    for lv in (tract_level, block_level):
        if lv not in geo.levels:
            raise CensusReconError(f"describe-population needs {lv} geography; this data has {list(geo.levels)}")
    for a in ("AGE", "SEX", "HISP"):
        if a not in data.domain:
            raise CensusReconError(f"describe-population needs the attribute {a}; this data has {data.domain.names}")
    m = _people(data, geo.units(block_level), geo.units(tract_level))
    stats = _by_block_size(m)
    values = _values(m, geo.catalogue.ids[block_level] if geo.catalogue is not None and block_level in
                     geo.catalogue.ids else None)
    values.update(_more_values(data, m, group_quarters))
    for name, (t, tol, src) in (TARGETS | BLOCK_GROUP_TARGETS).items():
        stats.append(Statistic(name, float(values[name]), t, tol, src))
    for name, (t, tol, src) in VALIDATION.items():
        stats.append(Statistic(name, float(values[name]), t, tol, src, tuned=False))
    stats.append(Statistic("persons", float(m.n), None, None, "this population"))
    stats.append(Statistic("tracts", float(len(m.tract_ids)), None, None, "this population"))
    stats.append(Statistic("largest_block", float(m.size.max()), None, None, "this population"))
    return stats


@dataclass(frozen=True)
class _People:
    """What :func:`describe` measures on, per person: block, tract and block group (None where blocks are not
    GEOIDs), sex, age, HISP, the race attribute (CENRACE or RACE) and its 7 groups, the race × ethnicity cell, whether
    it is the block's mode, the block's Σp², uniqueness on {block, sex, age} and on {block, sex, 38-bin age}; per
    block its size and its size class; the persons per (block, cell)."""

    block: np.ndarray
    tract: np.ndarray
    tract_ids: np.ndarray
    bgi: np.ndarray | None
    sex: np.ndarray
    age: np.ndarray
    hisp: np.ndarray
    race_attr: str
    group: np.ndarray
    cell: np.ndarray
    modal: np.ndarray
    p2: np.ndarray
    u_age: np.ndarray
    u_bin: np.ndarray
    size: np.ndarray
    b_bin: np.ndarray
    p_bin: np.ndarray
    bc: pd.Series

    @property
    def n(self) -> int:
        return len(self.block)


def _people(data: Dataset, blocks: np.ndarray, tracts: np.ndarray) -> _People:
    """The per-person and per-block quantities every statistic reads (``blocks``, ``tracts``: each person's ids)."""
    race_attr = "CENRACE" if "CENRACE" in data.domain else "RACE"
    _, block = np.unique(blocks, return_inverse=True)
    tract_ids, tract = np.unique(tracts, return_inverse=True)
    age = data.column("AGE")
    sex = data.column("SEX")
    hisp = data.column("HISP")
    race = data.column(race_attr)
    n_race = data.domain.size(race_attr)
    cell = hisp * n_race + race

    size = np.bincount(block)
    b_bin = _bin_of(size)
    p_bin = b_bin[block]

    # race × ethnicity: the block's mode and Σp² (person-weighted)
    bg = block_groups(blocks)
    bgi = None if bg is None else np.unique(bg, return_inverse=True)[1].reshape(-1)  # each person's block group
    mode = block_modes(block, tract if bgi is None else bgi, cell, fallback=0)
    modal = cell == mode
    bc = pd.DataFrame({"b": block, "c": cell}).groupby(["b", "c"]).size()
    p2_block = (bc / size[bc.index.get_level_values("b")]).pow(2).groupby(level="b").sum().to_numpy()
    p2 = p2_block[block]

    def unique_on(*cols):
        key = pd.DataFrame({f"k{i}": c for i, c in enumerate(cols)})
        return key.groupby(list(key.columns))["k0"].transform("size").to_numpy() == 1

    u_age = unique_on(block, sex, age)
    u_bin = unique_on(block, sex, AGE_BIN38_OF_AGE[age])

    group = race if race_attr == "RACE" else race_group(race)  # the 7 RACE groups
    return _People(block, tract, tract_ids, bgi, sex, age, hisp, race_attr, group, cell, modal, p2, u_age, u_bin, size,
                   b_bin, p_bin, bc)


def _by_block_size(m: _People) -> list[Statistic]:
    """The statistics by the Census Bureau's seven block-size classes."""
    b_bin, p_bin, modal, p2, u_bin = m.b_bin, m.p_bin, m.modal, m.p2, m.u_bin
    stats: list[Statistic] = []
    per_bin = {
        "blocks_pct": lambda i: 100 * np.mean(b_bin == i),
        "persons_pct": lambda i: 100 * np.mean(p_bin == i),
        "modal_pct": lambda i: 100 * modal[p_bin == i].mean() if (p_bin == i).any() else np.nan,
        "sum_p2_pct": lambda i: 100 * p2[p_bin == i].mean() if (p_bin == i).any() else np.nan,
        "unique_bin38_pct": lambda i: 100 * u_bin[p_bin == i].mean() if (p_bin == i).any() else np.nan,
    }
    for name, f in per_bin.items():
        for i, label in enumerate(SIZE_LABELS):
            stats.append(Statistic(f"{name}[{label}]", float(f(i)), TARGETS_BY_BIN[name][i],
                                   TOLERANCE_BY_BIN[name][i], SOURCES_BY_BIN[name]))

    return stats


def _values(m: _People, listed: np.ndarray | None) -> dict[str, float]:
    """The whole population's statistics (``listed``: the public block list, for the empty blocks' share)."""
    size, n, tract_ids, hisp, group, sex, age = m.size, m.n, m.tract_ids, m.hisp, m.group, m.sex, m.age
    modal, p2, u_age, u_bin = m.modal, m.p2, m.u_age, m.u_bin
    empty = 100 * (1 - len(size) / len(listed)) if listed is not None else np.nan
    grp = np.where(hisp == 1, 7, group)
    shares = np.bincount(grp, minlength=8) / max(n, 1)
    values = {
        "persons_per_tract": n / len(tract_ids),
        "occupied_blocks_per_tract": len(size) / len(tract_ids),
        "empty_blocks_pct": empty,
        "modal_pct": 100 * modal.mean(),
        "sum_p2_pct": 100 * p2.mean(),
        "unique_age_pct": 100 * u_age.mean(),
        "unique_bin38_pct": 100 * u_bin.mean(),
        "male_pct": 100 * np.mean(sex == 0),
        "age_under18_pct": 100 * np.mean(age < 18),
        "age_18_44_pct": 100 * np.mean((age >= 18) & (age <= 44)),
        "age_45_64_pct": 100 * np.mean((age >= 45) & (age <= 64)),
        "age_65plus_pct": 100 * np.mean(age >= 65),
        "hispanic_pct": 100 * shares[7],
        "nh_white_pct": 100 * shares[0],
        "nh_black_pct": 100 * shares[1],
        "nh_asian_pct": 100 * shares[3],
        "two_or_more_pct": 100 * np.mean(group == 6),
        "diversity_index_pct": 100 * (1 - np.sum(shares ** 2)),
    }
    return values


def _more_values(data: Dataset, m: _People, group_quarters: np.ndarray | None) -> dict[str, float]:
    """The values of ``VALIDATION`` and of the tract, block-group, age-by-group and group-quarters
    entries of ``TARGETS`` and of ``BLOCK_GROUP_TARGETS`` (``m``: :func:`_people`'s)."""
    block, tract, bgi, cell, bc, race_attr, group = m.block, m.tract, m.bgi, m.cell, m.bc, m.race_attr, m.group
    age, hisp, race = data.column("AGE"), data.column("HISP"), data.column(race_attr)
    n = len(data)
    r7 = race7_1980(race) if race_attr == "CENRACE" else race
    h14 = hisp * 7 + r7
    adult = age >= 18

    def small_cells(unit, cat, k, hi, rows=None):  # per unit (with persons in ``rows``) x category: 1..hi persons?
        rows = np.ones(n, bool) if rows is None else rows
        counts = np.zeros((unit.max() + 1, k), np.int64)
        np.add.at(counts, (unit[rows], cat[rows]), 1)
        counts = counts[np.unique(unit[rows])]
        return (counts >= 1) & (counts <= hi)

    def cell_share(unit, cat, k):
        small = small_cells(unit, cat, k, 2)
        return 100 * small.mean() if small.size else np.nan

    def any_small_adult(unit, cat, k):
        small = small_cells(unit, cat, k, 14, adult)
        return 100 * small.any(axis=1).mean() if small.size else np.nan

    # the block's 126-cell mode is unique and held by two or more persons (else the Bureau falls back)
    lead = bc[bc == bc.groupby(level="b").transform("max")].groupby(level="b").agg(["size", "first"])
    unique_modal = (lead["size"] == 1) & (lead["first"] >= 2)
    # the perfect attacker's self-linkage precision: within each {block, sex, age} cell a person is
    # linked to a record of the cell at random, right with probability n_cr / n_c
    key = pd.DataFrame({"b": block, "s": data.column("SEX"), "a": age, "c": cell})
    ncr = key.groupby(["b", "s", "a", "c"]).size()
    nc = ncr.groupby(level=["b", "s", "a"]).transform("sum")
    self_link = float((ncr ** 2 / nc).sum() / max(n, 1))
    hisp_rows, white_rows = hisp == 1, (hisp == 0) & (group == 0)
    tract_sizes = np.bincount(tract)
    values = {
        "small_cells_block_race7_pct": cell_share(block, r7, 7),
        "small_cells_tract_race7_pct": cell_share(tract, r7, 7),
        "small_cells_block_hisp14_pct": cell_share(block, h14, 14),
        "small_cells_tract_hisp14_pct": cell_share(tract, h14, 14),
        "blocks_small_adult_race7_pct": any_small_adult(block, r7, 7),
        "blocks_small_adult_hisp14_pct": any_small_adult(block, h14, 14),
        "tracts_small_adult_race7_pct": any_small_adult(tract, r7, 7),
        "small_cells_bg_race7_pct": cell_share(bgi, r7, 7) if bgi is not None else np.nan,
        "small_cells_bg_hisp14_pct": cell_share(bgi, h14, 14) if bgi is not None else np.nan,
        "bgs_small_adult_race7_pct": any_small_adult(bgi, r7, 7) if bgi is not None else np.nan,
        "bgs_small_adult_hisp14_pct": any_small_adult(bgi, h14, 14) if bgi is not None else np.nan,
        "unique_modal_blocks_pct": 100 * float(unique_modal.mean()),
        "cef_self_linkage_pct": 100 * self_link,
        "age_under18_hispanic_pct": 100 * float(np.mean(age[hisp_rows] < 18)) if hisp_rows.any() else np.nan,
        "age_under18_nh_white_pct": 100 * float(np.mean(age[white_rows] < 18)) if white_rows.any() else np.nan,
        "median_age_hispanic": float(np.median(age[hisp_rows])) if hisp_rows.any() else np.nan,
        "median_age_nh_white": float(np.median(age[white_rows])) if white_rows.any() else np.nan,
        "median_persons_per_tract": float(np.median(tract_sizes)),
        "tracts_in_design_range_pct": 100 * float(np.mean((tract_sizes >= 1200) & (tract_sizes <= 8000))),
        "persons_per_block_group": n / (bgi.max() + 1) if bgi is not None else np.nan,
        "group_quarters_pct": 100 * float(np.mean(group_quarters)) if group_quarters is not None else np.nan,
    }
    return values


def format_table(stats: list[Statistic]) -> str:
    """A plain-text table: statistic, this population, 2010, tolerance, within?, source; the tuned
    statistics first, then, under a heading of their own, the validation statistics."""
    head = ("statistic", "here", "2010", "± tol", "ok", "source")

    def row(s: Statistic) -> tuple[str, ...]:
        ok = "" if s.within is None else ("yes" if s.within else "NO")
        value = "—" if not np.isfinite(s.value) else (f"{s.value:,.1f}" if abs(s.value) >= 100 else f"{s.value:.2f}")
        return (s.name, value, "" if s.target is None else f"{s.target:g}",
                "" if s.tolerance is None else f"{s.tolerance:g}", ok, s.source)

    tuned = [row(s) for s in stats if s.tuned]
    held = [row(s) for s in stats if not s.tuned]
    w = [max(len(r[i]) for r in [head, *tuned, *held]) for i in range(6)]

    def fmt(rows):
        return ["  ".join(c.ljust(w[i]) if i in (0, 5) else c.rjust(w[i]) for i, c in enumerate(r)).rstrip()
                for r in rows]

    out = fmt([head, *tuned])
    if held:
        out += ["", "validation statistics: the generator was never fitted to these; tolerances set in advance "
                "(docs/pages/calibration.md)", *fmt(held)]
    return "\n".join(out)
