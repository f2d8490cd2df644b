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

from microdata.dataset import Dataset
from microdata.errors import CensusReconError

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
}


def _bin_of(sizes: np.ndarray) -> np.ndarray:
    edges = np.array([lo for lo, _ in SIZE_BINS[1:]])
    return np.searchsorted(edges, sizes, side="right")


def block_modes(block: np.ndarray, tract: np.ndarray, cell: np.ndarray, fallback: int) -> np.ndarray:
    """Each person's block mode of ``cell`` by the Bureau's rule (``findModalRE``): the block's most
    common value; if its count is 1 or several values tie, the tract's mode (the embedded geography
    has no block groups); if that also fails, ``fallback``."""
    df = pd.DataFrame({"b": block, "t": tract, "c": cell})

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


def describe(data: Dataset, tract_level: str = "tract", block_level: str = "block") -> list[Statistic]:
    """Every statistic of this module measured on ``data`` (census geography with blocks; AGE,
    SEX, HISP and CENRACE or RACE), beside its 2010 figure and tolerance."""
    from microdata.census import AGE_BIN38_OF_AGE
    from microdata.population import race_group

    geo = data.geography
    for lv in (tract_level, block_level):
        if lv not in geo.levels:
            raise CensusReconError(f"describe-population needs {lv} geography; this data has {list(geo.levels)}")
    for a in ("AGE", "SEX", "HISP"):
        if a not in data.domain:
            raise CensusReconError(f"describe-population needs the attribute {a}; this data has {data.domain.names}")
    race_attr = "CENRACE" if "CENRACE" in data.domain else "RACE"
    _, block = np.unique(geo.units(block_level), return_inverse=True)
    tract_ids, tract = np.unique(geo.units(tract_level), return_inverse=True)
    age = data.column("AGE")
    sex = data.column("SEX")
    hisp = data.column("HISP")
    race = data.column(race_attr)
    n_race = data.domain.size(race_attr)
    cell = hisp * n_race + race
    n = len(data)

    size = np.bincount(block)
    b_bin = _bin_of(size)
    p_bin = b_bin[block]

    # race × ethnicity: the block's mode and Σp² (person-weighted)
    mode = block_modes(block, tract, cell, fallback=0)
    modal = cell == mode
    bc = pd.DataFrame({"b": block, "c": cell}).groupby(["b", "c"]).size()
    p2_block = (bc / size[bc.index.get_level_values("b")]).pow(2).groupby(level="b").sum().to_numpy()
    p2 = p2_block[block]

    def unique_on(*cols):
        key = pd.DataFrame({f"k{i}": c for i, c in enumerate(cols)})
        return key.groupby(list(key.columns))["k0"].transform("size").to_numpy() == 1

    u_age = unique_on(block, sex, age)
    u_bin = unique_on(block, sex, AGE_BIN38_OF_AGE[age])

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

    listed = geo.catalogue.ids[block_level] if geo.catalogue is not None and block_level in geo.catalogue.ids else None
    empty = 100 * (1 - len(size) / len(listed)) if listed is not None else np.nan
    group = race if race_attr == "RACE" else race_group(race)  # the 7 RACE groups
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
    for name, v in values.items():
        t, tol, src = TARGETS[name]
        stats.append(Statistic(name, float(v), t, tol, src))
    stats.append(Statistic("persons", float(n), None, None, "this population"))
    stats.append(Statistic("tracts", float(len(tract_ids)), None, None, "this population"))
    stats.append(Statistic("largest_block", float(size.max()), None, None, "this population"))
    return stats


def format_table(stats: list[Statistic]) -> str:
    """A plain-text table: statistic, this population, 2010, tolerance, within?, source."""
    rows = [("statistic", "here", "2010", "± tol", "ok", "source")]
    for s in stats:
        ok = "" if s.within is None else ("yes" if s.within else "NO")
        value = "—" if not np.isfinite(s.value) else (f"{s.value:,.1f}" if abs(s.value) >= 100 else f"{s.value:.2f}")
        rows.append((s.name, value,
                     "" if s.target is None else f"{s.target:g}", "" if s.tolerance is None else f"{s.tolerance:g}",
                     ok, s.source))
    w = [max(len(r[i]) for r in rows) for i in range(6)]
    return "\n".join("  ".join(c.ljust(w[i]) if i in (0, 5) else c.rjust(w[i]) for i, c in enumerate(r)).rstrip()
                     for r in rows)
