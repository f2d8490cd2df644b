"""Match rate (Dick et al. 2023, §2.1) and the curves averaged across units on the k/u axis."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from censusrecon.reconstruct.attacks import is_attack
from censusrecon.microdata.agreement import SIZE_CLASSES, size_class, size_label
from censusrecon.microdata.dataset import lookup  # sorted keys' values: the audit reads it too
from censusrecon.microdata.errors import CensusReconError
from censusrecon.microdata.ranking import Ranking

CURVE_COLUMNS = ["threshold", "k", "k_over_u", "num_candidates", "num_matched", "match_rate"]


def effective_u(distinct_private: int, distinct_holdout: int) -> int:
    """u, the number of distinct rows of D, capped at the holdout's (the paper's footnote 15)."""
    if distinct_private < 1:
        raise CensusReconError("the private dataset has no rows; u would be 0")
    return int(min(distinct_private, distinct_holdout)) if distinct_holdout > 0 else int(distinct_private)


def k_grid(u: int, points: int) -> np.ndarray:
    """Distinct ranks k = ceil(x·u) for x on an even grid of ``points`` values in (0, 1]."""
    x = np.arange(1, points + 1) / points
    return np.unique(np.maximum(1, np.ceil(x * u - 1e-9).astype(np.int64)))


#: How often a matched row's person attributes occur outside the target unit, in the unit one
#: level up (see :func:`outside_counts`): column suffix and inclusive count range.
OUTSIDE_BINS = (("0", 0, 0), ("1_2", 1, 2), ("3_9", 3, 9), ("10_plus", 10, None))
OUTSIDE_COLUMNS = [f"num_matched_outside_{name}" for name, _, _ in OUTSIDE_BINS]
#: Matches of persons unique in D by the size of their block in D (the Census Bureau's classes,
#: :data:`microdata.agreement.SIZE_CLASSES`), and the persons unique in D in each class.
BLOCK_SIZE_LABELS = tuple(size_label(lo, hi) for lo, hi in SIZE_CLASSES)
BLOCK_SIZE_COLUMNS = [f"num_matched_unique_block_{label}" for label in BLOCK_SIZE_LABELS]
UNIQUE_BY_BLOCK_SIZE_COLUMNS = [f"unique_in_D_block_{label}" for label in BLOCK_SIZE_LABELS]


def match_rate_curve(ranking: Ranking, truth_keys: np.ndarray, ks: np.ndarray, u: int,
                     union_size: int | None = None,
                     outside: tuple[np.ndarray, np.ndarray] | None = None,
                     block_class: tuple[np.ndarray, np.ndarray] | None = None) -> pd.DataFrame:
    """Top-k match rate of ``ranking`` against the private rows for each k in ``ks``.

    match_rate(k) = (candidates ranked 1..k that appear in D) / k (Dick et al. 2023, §2.1). A
    method that offers fewer than k candidates simply stops matching: ``num_candidates`` is
    what it offered up to k (min(k, |R|)) and ``union_size`` its whole candidate list before
    any cut (``len(ranking)`` unless given: RAP-Rank's union of the K runs, a prior's support).

    Matches are split by uniqueness in D (``num_matched_unique``: rows of exactly one person of
    D, ``num_matched_common``) and, with ``outside`` = (sorted keys, counts) giving for each of
    D's distinct rows how many persons outside the target unit share its person attributes,
    by that count (``num_matched_outside_0``, ``_1_2``, ``_3_9``, ``_10_plus``); with ``block_class`` =
    (sorted keys, class) giving for each of D's distinct rows the size class of its block
    (:func:`block_classes`), the unique matches by class (:data:`BLOCK_SIZE_COLUMNS`) beside the persons
    unique in D of each class (:data:`UNIQUE_BY_BLOCK_SIZE_COLUMNS`, the same on every row).

    >>> from censusrecon.microdata.ranking import Ranking
    >>> r = Ranking(np.array([4, 9, 1, 7]), np.array([4., 3., 2., 1.]))
    >>> c = match_rate_curve(r, np.array([1, 4, 5]), np.array([1, 2, 4, 6]), u=3)
    >>> c.match_rate.round(3).tolist(), c.num_candidates.tolist()
    ([1.0, 0.5, 0.5, 0.333], [1, 2, 4, 4])
    """
    ks = np.asarray(ks, dtype=np.int64)
    if ks.size and ks.min() < 1:
        raise CensusReconError(f"ranks k start at 1, got {ks.min()}")
    uniq, counts = np.unique(truth_keys, return_counts=True)
    hits = np.isin(ranking.keys, uniq)
    unique_rows = np.isin(ranking.keys, uniq[counts == 1])

    def cumulative(flags):
        return np.concatenate([[0], np.cumsum(flags)]).astype(np.int64)

    n_cand = np.minimum(ks, len(ranking))
    matched = cumulative(hits)[n_cand]
    size = len(ranking) if union_size is None else int(union_size)
    if size < len(ranking):
        raise CensusReconError(f"union_size {size} is smaller than the ranking it cut ({len(ranking)} rows)")
    extra = {
        "num_matched_unique": cumulative(unique_rows)[n_cand],
        "num_matched_common": matched - cumulative(unique_rows)[n_cand],
    }
    if outside is not None:
        count = lookup(*outside, ranking.keys, missing=-1)
        if (hits & (count < 0)).any():
            raise CensusReconError("outside counts must cover every distinct row of D")
        for (_, lo, hi), col in zip(OUTSIDE_BINS, OUTSIDE_COLUMNS):
            extra[col] = cumulative(hits & (count >= lo) & (count <= (hi if hi is not None else np.inf)))[n_cand]
    if block_class is not None:
        cls = lookup(*block_class, ranking.keys, missing=-1)
        if (hits & (cls < 0)).any():
            raise CensusReconError("block classes must cover every distinct row of D")
        unique_cls = lookup(*block_class, uniq[counts == 1], missing=-1)
        for c, (col, total) in enumerate(zip(BLOCK_SIZE_COLUMNS, UNIQUE_BY_BLOCK_SIZE_COLUMNS)):
            extra[col] = cumulative(unique_rows & (cls == c))[n_cand]
            extra[total] = np.full(ks.shape, int((unique_cls == c).sum()), dtype=np.int64)
    return pd.DataFrame(
        {
            "threshold": ks,
            "k": ks,
            "k_over_u": ks / float(u),
            "num_candidates": n_cand.astype(np.int64),
            "num_matched": matched,
            "match_rate": matched / ks.astype(np.float64),
            "union_size": np.full(ks.shape, size, dtype=np.int64),
            **extra,
        }
    )


def calibration(keys: np.ndarray, run_fraction: np.ndarray, truth_keys: np.ndarray, runs: int,
                bins: int = 10) -> pd.DataFrame:
    """Observed match rate of RAP-Rank's candidates against their run fraction, over the whole
    union of the K runs.

    ``keys`` are every distinct row of the union and ``run_fraction`` the fraction of the K
    runs whose rounded output contains each (in (0, 1]). Fractions are binned into
    min(``bins``, K) equal bins (lo, hi]; every bin is returned, empty ones with NaN match rate,
    so the per-bin ``num_candidates`` add up to the union size.

    >>> t = calibration(np.array([1, 2, 3, 4]), np.array([0.25, 0.5, 1.0, 1.0]), np.array([3, 4, 9]), runs=4)
    >>> t[["bin_high", "num_candidates", "num_matched"]].values.tolist()
    [[0.25, 1.0, 0.0], [0.5, 1.0, 0.0], [0.75, 0.0, 0.0], [1.0, 2.0, 2.0]]
    """
    keys = np.asarray(keys, dtype=np.int64)
    f = np.asarray(run_fraction, dtype=np.float64)
    if keys.shape != f.shape:
        raise CensusReconError(f"one run fraction per candidate: {keys.shape} keys, {f.shape} fractions")
    if f.size and (f.min() <= 0 or f.max() > 1):
        raise CensusReconError("run fractions lie in (0, 1]")
    B = int(max(1, min(bins, runs)))
    idx = np.clip(np.ceil(f * B - 1e-9).astype(np.int64) - 1, 0, B - 1)
    hits = np.isin(keys, np.unique(truth_keys))
    n = np.bincount(idx, minlength=B)
    m = np.bincount(idx, weights=hits, minlength=B).astype(np.int64)
    sums = np.bincount(idx, weights=f, minlength=B)
    with np.errstate(invalid="ignore", divide="ignore"):
        return pd.DataFrame({
            "bin_low": np.arange(B) / B, "bin_high": np.arange(1, B + 1) / B,
            "num_candidates": n.astype(np.int64), "num_matched": m,
            "mean_run_fraction": np.where(n > 0, sums / np.maximum(n, 1), np.nan),
            "match_rate": np.where(n > 0, m / np.maximum(n, 1), np.nan),
        })


def unique_persons(data) -> int:
    """Persons of ``data`` whose whole row no other person shares: the most any method can
    reconstruct (the denominator of persons reconstructed).

    >>> from censusrecon.microdata.domain import Domain
    >>> from censusrecon.microdata.dataset import Dataset
    >>> unique_persons(Dataset(Domain.from_sizes({"A": 4}), np.array([[0], [0], [1], [3]])))
    2
    """
    _, counts = np.unique(data.keys(), return_counts=True)
    return int((counts == 1).sum())


def concentration(keys: np.ndarray) -> dict:
    """How easy D is to guess: distinct/total rows, entropy (bits), and the share of rows that are unique."""
    _, counts = np.unique(keys, return_counts=True)
    p = counts / counts.sum()
    return {"distinct_over_total": float(len(counts) / counts.sum()),
            "entropy_bits": float(-(p * np.log2(p)).sum()),
            "unique_row_share": float((counts == 1).sum() / counts.sum())}


def variant_label(v, variants=None) -> str:
    """How a BLOCK variant is named in every table, plot and report; a run whose only variant
    is False (data without a BLOCK choice, such as ACS) has nothing to name: "all units"."""
    if variants is not None and list(variants) == [False]:
        return "all units"
    if isinstance(v, (bool, np.bool_)):
        return "with BLOCK" if v else "without BLOCK"
    return str(v)


def lift_by_baseline(df: pd.DataFrame) -> pd.DataFrame:
    """Area between each attack's curve and each baseline's, per variant and unit (mean match
    rate over the unit's k/u grid). Variants are never pooled: with and without BLOCK are two
    experiments."""
    area = df.groupby(["variant", "unit", "method"])["match_rate"].mean().reset_index()
    attack = area["method"].map(is_attack)
    out = area[attack].merge(area[~attack], on=["variant", "unit"], suffixes=("", "_baseline"))
    out = out.rename(columns={"method_baseline": "baseline", "match_rate": "rap_area",
                              "match_rate_baseline": "baseline_area"})
    out["lift"] = out["rap_area"] - out["baseline_area"]
    return out


def at_u(df: pd.DataFrame) -> pd.DataFrame:
    """Each (variant, unit, method)'s row at k = u (the last point of its k grid)."""
    return df[df["k"] == df["u"]].copy()


def best_baselines(top: pd.DataFrame, baseline: pd.Series, by: list[str]) -> pd.DataFrame:
    """Per group of ``by``, the row of the best baseline among ``top``'s rows at k = u where
    ``baseline`` holds: the one that finds the most persons (``num_matched_unique``), ties broken
    by name. The one definition of "the best baseline" every report uses."""
    return top[baseline].sort_values(["num_matched_unique", "method"], ascending=[False, True]).groupby(
        by, sort=False).head(1)


def block_classes(keys: np.ndarray, blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each distinct row of D (``keys``, one per person; ``blocks``, each person's block), the size
    class of its block in D: (sorted distinct keys, class index into :data:`BLOCK_SIZE_LABELS`).

    >>> block_classes(np.array([5, 5, 7, 9]), np.array([0, 0, 0, 1]))
    (array([5, 7, 9]), array([0, 0, 0]))
    """
    keys, blocks = np.asarray(keys), np.asarray(blocks)
    ids, sizes = np.unique(blocks, return_counts=True)
    per_person = size_class(sizes)[np.searchsorted(ids, blocks)]
    uniq, first = np.unique(keys, return_index=True)
    return uniq, per_person[first]


def persons_by_block_size(df: pd.DataFrame) -> pd.DataFrame | None:
    """Persons unique in D reconstructed, per block-size class: per variant, attack method and class, the
    persons unique in D of the class (all units), the attack's and the best baseline's (the unit's best at
    k = u, as :func:`persons_reconstructed`) at k = u, and the mean difference per unit with its two-sided
    Student t interval over the units that have blocks of that class. None where the curves carry no
    classes (no BLOCK)."""
    if BLOCK_SIZE_COLUMNS[0] not in df or df[BLOCK_SIZE_COLUMNS[0]].isna().all():
        return None
    top = at_u(df)
    attack = top["method"].map(is_attack)
    best = best_baselines(top, ~attack, ["variant", "unit"])[["variant", "unit", *BLOCK_SIZE_COLUMNS]]
    rows = []
    for (variant, method), g in top[attack].groupby(["variant", "method"], sort=False):
        g = g.merge(best, on=["variant", "unit"], suffixes=("", "_base"))
        for label, col, total in zip(BLOCK_SIZE_LABELS, BLOCK_SIZE_COLUMNS, UNIQUE_BY_BLOCK_SIZE_COLUMNS):
            have = g[g[total] > 0]
            diff = (have[col] - have[col + "_base"]).astype(np.float64)
            rows.append({"variant": variant, "method": method, "block_size": label, "units": len(have),
                         "unique_in_D": int(have[total].sum()), "persons_reconstructed": int(have[col].sum()),
                         "baseline_persons": int(have[col + "_base"].sum()),
                         "difference_mean": float(diff.mean()) if len(have) else np.nan,
                         "difference_std": float(diff.std(ddof=1)) if len(have) > 1 else np.nan})
    return add_interval(pd.DataFrame(rows)) if rows else None


def by_seed(df: pd.DataFrame) -> pd.DataFrame:
    """Rows with ``unit`` and ``seed`` columns, each (unit, seed) pair a unit of its own: how a
    sweep pools seeds, as a run pools units."""
    return df.assign(unit=df["unit"].astype(str) + " seed " + df["seed"].astype(str))


def persons_reconstructed(df: pd.DataFrame) -> pd.DataFrame:
    """"How many people", per variant, unit and attack method: persons of D whose exact row is
    unique in D and among the method's top-u candidates (``num_matched_unique`` at k = u), next
    to the best baseline on that unit (the baseline that finds the most such persons) and the
    difference. Summarise across units with :func:`summarise_persons`."""
    top = at_u(df)
    top = top.assign(persons_reconstructed=top["num_matched_unique"].astype(np.int64))
    attack = top["method"].map(is_attack)
    best = best_baselines(top, ~attack, ["variant", "unit"])[["variant", "unit", "method", "persons_reconstructed"]]
    best = best.rename(columns={"method": "best_baseline", "persons_reconstructed": "baseline_persons"})
    cols = ["variant", "unit", "method", "u", "n_rows", *(["n_unique"] if "n_unique" in top else []),
            "persons_reconstructed"]
    out = top.loc[attack, cols].merge(best, on=["variant", "unit"], how="left")
    out["difference"] = out["persons_reconstructed"] - out["baseline_persons"]
    return out.reset_index(drop=True)


#: Confidence of every interval over units that a verdict rests on.
CONFIDENCE = 0.95


def t_half_width(units, sd) -> tuple[np.ndarray, np.ndarray]:
    """The standard error of a mean over ``units`` with standard deviation ``sd`` (a missing sd as 0),
    and the half width of its two-sided :data:`CONFIDENCE` Student t interval (inf for one unit: no
    spread to estimate). Arrays, one entry per group.

    >>> sem, half = t_half_width([4, 1], [2.0, np.nan])
    >>> sem.tolist(), half.round(3).tolist()
    ([1.0, 0.0], [3.182, inf])
    """
    from scipy.stats import t as student

    n = np.asarray(units, dtype=np.float64)
    sem = np.nan_to_num(np.asarray(sd, dtype=np.float64)) / np.sqrt(np.maximum(n, 1))
    return sem, np.where(n > 1, student.ppf(0.5 + CONFIDENCE / 2, np.maximum(n - 1, 1)) * sem, np.inf)


def add_interval(out: pd.DataFrame, std: str = "difference_std", mean: str = "difference_mean") -> pd.DataFrame:
    """Add the standard error and a two-sided :data:`CONFIDENCE` Student t interval of a mean across
    ``units`` (``difference_sem``, ``ci_low``, ``ci_high``): honest for a handful of units, where
    a normal interval is too narrow. One unit has no spread to estimate: its interval is
    (-inf, inf) and nothing is "beyond" it.

    >>> t = add_interval(pd.DataFrame({"units": [4, 1], "difference_mean": [3.0, 5.0], "difference_std": [2.0, np.nan]}))
    >>> t["ci_low"].round(3).tolist(), t["ci_high"].round(3).tolist()
    ([-0.182, -inf], [6.182, inf])
    """
    sem, half = t_half_width(out["units"], out[std])
    out = out.assign(difference_sem=sem, ci_low=out[mean] - half, ci_high=out[mean] + half)
    out["beyond_spread"] = out["ci_low"] > 0
    return out.drop(columns=std)


#: the power a plan aims at: the chance that the suggested number of units decides, were the observed
#: mean and spread the truth
PLAN_POWER = 0.8
#: plans beyond this many units are said as "more than"
PLAN_MAX_UNITS = 100_000


def upper_limit(mean: float, sd: float, n: int, confidence: float = CONFIDENCE) -> float:
    """One-sided upper ``confidence`` Student t limit of a mean over ``n`` units with standard
    deviation ``sd`` (inf for fewer than two units: no spread to go by).

    >>> round(upper_limit(1.0, 1.0, 3), 4)  # t(0.95, 2) = 2.9200
    2.6859
    """
    from scipy.stats import t as student

    if n < 2 or not np.isfinite(sd):
        return math.inf
    return float(mean + student.ppf(confidence, n - 1) * sd / math.sqrt(n))


def units_to_decide(mean: float, sd: float, confidence: float, power: float = PLAN_POWER) -> int | None:
    """The fewest units at which a one-sided t test at ``confidence`` shows a mean of ``mean`` (> 0,
    the distance to the bound to be cleared) with ``power``, if the units' standard deviation were
    ``sd``: the smallest n whose noncentral t (n − 1 degrees, noncentrality mean·√n/sd) exceeds the
    critical value with that chance. None when no number of units can (mean ≤ 0); PLAN_MAX_UNITS + 1
    when more than PLAN_MAX_UNITS would be needed. An estimate: the observed spread is taken as the truth.

    >>> units_to_decide(1.0, 1.0, 0.95)  # a mean one sd from the bound: 8 units (normal approximation 6.2)
    8
    >>> units_to_decide(-1.0, 1.0, 0.95) is None, units_to_decide(1.0, 0.0, 0.95)
    (True, 2)
    """
    from scipy.stats import nct
    from scipy.stats import t as student

    if not mean > 0:
        return None
    if not sd > 0:
        return 2

    def powered(n: int) -> bool:
        return nct.sf(student.ppf(confidence, n - 1), n - 1, mean * math.sqrt(n) / sd) >= power

    hi = 2
    while not powered(hi):
        if hi > PLAN_MAX_UNITS:
            return PLAN_MAX_UNITS + 1
        hi *= 2
    lo = max(2, hi // 2)
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if powered(mid) else (mid + 1, hi)
    return hi


def difference_words(x) -> str:
    """'+5.2 per unit (95% interval −1.0 to +11.4, 4 units)'; with the units' unique persons known, also
    the mean of each unit's share of them with its interval (:func:`summarise_persons`).

    >>> x = {"difference_mean": 5.2, "ci_low": -1.0, "ci_high": 11.4, "units": 4, "share_mean": 0.026,
    ...      "share_low": -0.005, "share_high": 0.057}
    >>> print(difference_words(x))
    +5.2 per unit (95% interval -1.0 to +11.4, 4 units; +2.6% of each unit's persons unique in D, -0.5% to +5.7%)
    """
    if not np.isfinite(x["ci_low"]):
        return f"{x['difference_mean']:+.1f} per unit (1 unit: no interval)"
    share = x.get("share_mean", np.nan)
    share = (f"; {100 * share:+.1f}% of each unit's persons unique in D, {100 * x['share_low']:+.1f}% "
             f"to {100 * x['share_high']:+.1f}%" if pd.notna(share) else "")
    return (f"{x['difference_mean']:+.1f} per unit ({CONFIDENCE:.0%} interval {x['ci_low']:+.1f} to "
            f"{x['ci_high']:+.1f}, {int(x['units'])} units{share})")


def unit_names(values: pd.Series) -> str:
    """'holdout' when every unit agrees, else 'holdout (3 units), county (1)'."""
    counts = values.value_counts()
    if len(counts) == 1:
        return str(counts.index[0])
    return ", ".join(f"{name} ({n} unit{'s' if n > 1 else ''})" for name, n in counts.items())


def unique_share(per_unit: pd.DataFrame, value: str = "difference") -> pd.Series:
    """Each unit's ``value`` as a share of its persons unique in D (``n_unique``): what a tolerance given
    as a share of them (``release.tolerance.share_of_unique``) is measured against. A unit with no one
    unique in D has nothing to reconstruct: 0.

    >>> unique_share(pd.DataFrame({"difference": [10, 0, 3], "n_unique": [100, 0, 12]})).tolist()
    [0.1, 0.0, 0.25]
    """
    n = per_unit["n_unique"].astype(np.float64)
    return (per_unit[value].astype(np.float64) / n.where(n > 0)).fillna(0.0)


def summarise_persons(per_unit: pd.DataFrame, by=("variant", "method"), **extra) -> pd.DataFrame:
    """Across units, per group of ``by``: total persons reconstructed by each attack and by the best
    baselines (named when known), the persons of D and those unique in D (the denominators), and the
    mean difference per unit with its standard error and t interval (:func:`add_interval`).
    ``extra``: more named aggregations, as ``DataFrame.agg`` takes them.

    When each unit's persons unique in D are known (``n_unique``), also the difference as a share of
    them, unit by unit (:func:`unique_share`): ``share_mean``, the mean over units, with its
    :data:`CONFIDENCE` t interval ``share_low`` / ``share_high``. Units of different sizes differ in
    persons found partly because they differ in size; their shares do not."""
    if "n_unique" in per_unit:
        per_unit = per_unit.assign(_share=unique_share(per_unit))
        extra = {"share_mean": ("_share", "mean"), "_share_std": ("_share", "std"), **extra}
    g = per_unit.groupby(list(by), sort=False, dropna=False)
    agg = dict(units=("unit", "nunique"), persons=("persons_reconstructed", "sum"),
               baseline_persons=("baseline_persons", "sum"), persons_in_d=("n_rows", "sum"),
               difference_mean=("difference", "mean"), difference_std=("difference", "std"))
    if "n_unique" in per_unit:
        agg["unique_in_d"] = ("n_unique", "sum")
    if "best_baseline" in per_unit:
        agg["best_baselines"] = ("best_baseline", unit_names)
    out = add_interval(g.agg(**agg, **extra).reset_index())
    if "n_unique" in per_unit:  # the same interval as add_interval's, of the shares
        _, half = t_half_width(out["units"], out.pop("_share_std"))
        out = out.assign(share_low=out["share_mean"] - half, share_high=out["share_mean"] + half)
    return out


def outside_shares(df: pd.DataFrame) -> pd.DataFrame:
    """Per variant and method, the matches at k = u summed over units and split by how often
    the row occurs outside the unit (shares of all matches)."""
    top = at_u(df)
    g = top.groupby(["variant", "method"], sort=False)[["num_matched", *OUTSIDE_COLUMNS,
                                                        "num_matched_unique"]].sum().reset_index()
    for col in [*OUTSIDE_COLUMNS, "num_matched_unique"]:
        with np.errstate(invalid="ignore", divide="ignore"):
            g[col.replace("num_matched_", "share_")] = g[col] / g["num_matched"].where(g["num_matched"] > 0)
    return g


#: Fewer units than this: bands are ± one standard error across units; more: a 95% bootstrap band.
BOOTSTRAP_MIN_UNITS = 20


def band_kind(units: int) -> str:
    """"sem" below :data:`BOOTSTRAP_MIN_UNITS` units (a bootstrap over a handful of units has
    only a few distinct resamples), "bootstrap" from there on."""
    return "sem" if units < BOOTSTRAP_MIN_UNITS else "bootstrap"


def average_curves(df: pd.DataFrame, points: int, by: list[str], bootstrap: int = 0,
                   seed: int = 0) -> pd.DataFrame:
    """Mean match rate across units at each grid point x of k/u, with its standard error and,
    with ``bootstrap`` > 0, a 95% percentile band from resampling the units (``ci_low``,
    ``ci_high``). ``band_low``/``band_high`` is the band to draw, of the kind
    :func:`band_kind` names in ``band`` (± one standard error below 20 units; the bootstrap
    band, when computed, from 20 on).

    Each unit's curve is read at k = ceil(x·u) (the step function the curve is), so units
    of different sizes share one x axis.
    """
    xs = np.arange(1, points + 1) / points
    rows = []
    for keys, g in df.groupby(by + ["unit"], sort=True):
        u = int(g["u"].iloc[0])
        g = g.sort_values("k")
        kk = np.maximum(1, np.ceil(xs * u - 1e-9)).astype(np.int64)
        idx = np.searchsorted(g["k"].to_numpy(), kk)
        idx = np.minimum(idx, len(g) - 1)
        vals = g["match_rate"].to_numpy()[idx]
        for x, v in zip(xs, vals):
            rows.append((*keys, x, v))
    per_unit = pd.DataFrame(rows, columns=by + ["unit", "k_over_u", "match_rate"])
    agg = per_unit.groupby(by + ["k_over_u"], sort=True)["match_rate"].agg(["mean", "std", "count"]).reset_index()
    agg["sem"] = agg["std"].fillna(0.0) / np.sqrt(agg["count"])
    agg = agg.rename(columns={"mean": "match_rate", "count": "units"})
    if bootstrap > 0:
        rng = np.random.default_rng(seed)
        wide = per_unit.pivot_table(index=by + ["k_over_u"], columns="unit", values="match_rate")
        vals = wide.to_numpy()
        n_units = vals.shape[1]
        idx = rng.integers(0, n_units, size=(bootstrap, n_units))
        means = np.stack([np.nanmean(vals[:, i], axis=1) for i in idx])  # (bootstrap, rows)
        band = pd.DataFrame({"ci_low": np.nanpercentile(means, 2.5, axis=0),
                             "ci_high": np.nanpercentile(means, 97.5, axis=0)}, index=wide.index).reset_index()
        agg = agg.merge(band, on=by + ["k_over_u"], how="left")
    agg["band"] = [band_kind(int(n)) if bootstrap > 0 else "sem" for n in agg["units"]]
    use_boot = agg["band"] == "bootstrap"
    agg["band_low"] = np.where(use_boot, agg.get("ci_low", np.nan), agg["match_rate"] - agg["sem"])
    agg["band_high"] = np.where(use_boot, agg.get("ci_high", np.nan), agg["match_rate"] + agg["sem"])
    return agg


def strength_prefixes(runs: int) -> list[int]:
    """The numbers of runs a strength table reads: K, K/2, K/4, K/8 (at least 1, distinct).
    Run k is the same whatever K is (its key is ``fold_in(key, k)``), so the first k runs of a
    RAP-Rank are exactly the RAP-Rank of K = k: a weaker attack, at no extra cost."""
    return sorted({max(1, int(round(runs / 2 ** i))) for i in range(4)})


def strength_by_runs(codes: np.ndarray, encode, truth_keys: np.ndarray, u: int, seed: int = 0,
                     ranking: Ranking | None = None) -> list[dict]:
    """Persons reconstructed (D's unique rows among the top u) and rows matched among the top u by
    RAP-Rank on the first k of its K runs, for each k of :func:`strength_prefixes`. ``codes`` is
    (K, rows, d), ``encode`` maps (m, d) codes to row keys; ties are broken by ``seed``, the same
    for every k. ``ranking``: the attack's own ranking of all K runs, used for k = K so that the
    last column is the figure reported for the attack."""
    from censusrecon.microdata.ranking import rank_by_frequency

    out = []
    for k in strength_prefixes(len(codes)):
        keys = encode(codes[:k].reshape(-1, codes.shape[-1]))
        ranking_k = ranking if (ranking is not None and k == len(codes)) else \
            rank_by_frequency(keys, rng=np.random.default_rng(seed), limit=u)
        row = match_rate_curve(ranking_k, truth_keys, np.array([u]), u, int(np.unique(keys).size)).iloc[0]
        out.append({"runs": k, "persons": int(row["num_matched_unique"]), "matched": int(row["num_matched"])})
    return out


#: a doubling of K that adds at most this share of persons (and at most one per unit) is saturation
SATURATION_SHARE = 0.02


def unit_saturated(rows: list[dict]) -> bool:
    """Whether one unit's RAP-Rank had saturated (:func:`strength_by_runs`'s rows): its last doubling of K added at
    most one person, or at most :data:`SATURATION_SHARE` of those found before it.

    >>> unit_saturated([{"runs": 12, "persons": 50}, {"runs": 24, "persons": 51}])
    True
    >>> unit_saturated([{"runs": 12, "persons": 50}, {"runs": 24, "persons": 60}])
    False
    """
    by = {int(r["runs"]): int(r["persons"]) for r in rows}
    k = max(by)
    if k // 2 not in by or k < 2:
        return False
    return by[k] - by[k // 2] <= max(1, SATURATION_SHARE * by[k // 2])


def saturation(strength: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """Per group of ``by`` (method, variant, ...): persons reconstructed summed over units at each
    K of the strength table, the gain of every unit's last doubling, and whether the attack had saturated
    (those doublings added at most :data:`SATURATION_SHARE` of the persons, and at most one per unit). Where K was
    raised on some units (``attack.max_runs``), each unit's own last doubling counts; ``runs`` is the largest K."""
    rows = []
    for key, g in strength.groupby(by, sort=False):
        units = g["unit"].nunique() if "unit" in g else 1
        last_k = g.groupby("unit")["runs"].transform("max") if "unit" in g else pd.Series(g["runs"].max(), g.index)
        last, half = g[g["runs"] == last_k], g[2 * g["runs"] == last_k]
        shared = g.groupby("runs")["unit"].nunique() if "unit" in g else g.groupby("runs").size()
        per_k = g.groupby("runs")["persons"].sum().sort_index()[shared == units]
        k = int(last["runs"].max())
        prev = k // 2 if len(half) else None
        gain = int(last["persons"].sum() - half["persons"].sum()) if prev is not None else None
        saturated = prev is not None and gain <= max(units, SATURATION_SHARE * int(half["persons"].sum()))
        rows.append(dict(zip(by, key if isinstance(key, tuple) else (key,)), runs=k, half=prev,
                         persons=int(last["persons"].sum()),
                         persons_half=None if prev is None else int(half["persons"].sum()),
                         gain=gain, units=units, saturated=bool(saturated),
                         by_runs={int(r): int(p) for r, p in per_k.items()}))
    return pd.DataFrame(rows)


def strength_sequence(row) -> str:
    """Persons at each K of a :func:`saturation` row: "K=3: 10, K=6: 40, ..."."""
    return ", ".join(f"K={k}: {p}" for k, p in row["by_runs"].items())


def strength_table(table: pd.DataFrame, lead: list[tuple[str, object]]) -> tuple[list, list, set]:
    """A :func:`saturation` table as (headers, rows, numeric columns) for a report: the ``lead``
    columns ((header, row -> cell) pairs), persons at each K, and whether the attack saturated."""
    ks = sorted({k for r in table["by_runs"] for k in r})
    rows = [[cell(r) for _, cell in lead] + [r["by_runs"].get(k, "") for k in ks]
            + ["yes" if r["saturated"] else f"**no** ({r['gain']:+d} from K = {r['half']})"]
            for _, r in table.iterrows()]
    return ([h for h, _ in lead] + [f"K = {k}" for k in ks] + ["saturated"], rows,
            set(range(len(lead), len(lead) + len(ks))))


def saturation_words(row) -> str:
    """One line: persons at each K and whether the attack had saturated."""
    seq = strength_sequence(row)
    if row["half"] is None:
        return f"{seq} (one run: no strength table)"
    if row["saturated"]:
        return f"{seq}: saturated (doubling K from {row['half']} added {row['gain']:+d})"
    return (f"{seq}: NOT saturated: doubling K from {row['half']} to {row['runs']} added {row['gain']:+d} persons; "
            "a stronger attack (more runs) would likely reconstruct more")
