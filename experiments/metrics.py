"""Match rate (Dick et al. 2023, §2.1) and the curves averaged across units on the k/u axis."""

from __future__ import annotations

import numpy as np
import pandas as pd

from microdata.errors import CensusReconError
from microdata.ranking import Ranking

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


def match_rate_curve(ranking: Ranking, truth_keys: np.ndarray, ks: np.ndarray, u: int,
                     rare_keys: np.ndarray | None = None) -> pd.DataFrame:
    """Top-k match rate of ``ranking`` against the private rows for each k in ``ks``.

    match_rate(k) = (rows ranked 1..k that appear in D) / num_candidates, where
    num_candidates = min(k, |R|): a method that offers fewer than k rows is judged on
    what it offers (NaN when it offers none).

    >>> from microdata.ranking import Ranking
    >>> r = Ranking(np.array([4, 9, 1, 7]), np.array([4., 3., 2., 1.]))
    >>> match_rate_curve(r, np.array([1, 4, 5]), np.array([1, 2, 4, 6]), u=3).match_rate.round(2).tolist()
    [1.0, 0.5, 0.5, 0.5]
    """
    ks = np.asarray(ks, dtype=np.int64)
    if ks.size and ks.min() < 1:
        raise CensusReconError(f"ranks k start at 1, got {ks.min()}")
    uniq, counts = np.unique(truth_keys, return_counts=True)
    hits = np.isin(ranking.keys, uniq)
    unique_rows = np.isin(ranking.keys, uniq[counts == 1])

    def cumulative(flags):
        return np.concatenate([[0], np.cumsum(flags)])

    cum = cumulative(hits)
    n_cand = np.minimum(ks, len(ranking))
    matched = cum[n_cand]
    extra = {
        # the Sánchez et al. question: are the matches rows anyone could guess (common in D)
        # or rows of one person (unique in D)?
        "num_matched_unique": cumulative(unique_rows)[n_cand].astype(np.int64),
        "num_matched_common": (matched - cumulative(unique_rows)[n_cand]).astype(np.int64),
    }
    if rare_keys is not None:
        extra["num_matched_rare_county"] = cumulative(hits & np.isin(ranking.keys, rare_keys))[n_cand].astype(np.int64)
    with np.errstate(invalid="ignore", divide="ignore"):
        rate = np.where(n_cand > 0, matched / np.maximum(n_cand, 1), np.nan)
    return pd.DataFrame(
        {
            "threshold": ks,
            "k": ks,
            "k_over_u": ks / float(u),
            "num_candidates": n_cand.astype(np.int64),
            "num_matched": matched.astype(np.int64),
            "match_rate": rate,
            **extra,
        }
    )


def calibration(ranking: Ranking, truth_keys: np.ndarray, runs: int) -> pd.DataFrame:
    """Observed match rate of RAP-Rank's candidates for each score (count over the K runs)."""
    hits = np.isin(ranking.keys, np.unique(truth_keys))
    df = pd.DataFrame({"score": ranking.scores.astype(np.int64), "hit": hits})
    out = df.groupby("score")["hit"].agg(num_candidates="size", num_matched="sum").reset_index()
    out["score_fraction"] = out["score"] / runs
    out["match_rate"] = out["num_matched"] / out["num_candidates"]
    return out


def concentration(keys: np.ndarray) -> dict:
    """How easy D is to guess: distinct/total rows, entropy (bits), and the share of rows that are unique."""
    _, counts = np.unique(keys, return_counts=True)
    p = counts / counts.sum()
    return {"distinct_over_total": float(len(counts) / counts.sum()),
            "entropy_bits": float(-(p * np.log2(p)).sum()),
            "unique_row_share": float((counts == 1).sum() / counts.sum())}


def lift_by_baseline(df: pd.DataFrame) -> pd.DataFrame:
    """Area between each RAP-Rank curve and each baseline's, per unit (mean over the k/u grid)."""
    area = df.groupby(["variant", "unit", "method"])["match_rate"].mean().reset_index()
    rap = area[area["method"].str.startswith("rap_rank")]
    base = area[~area["method"].str.startswith("rap_rank")]
    out = rap.merge(base, on=["variant", "unit"], suffixes=("", "_baseline"))
    out = out.rename(columns={"method_baseline": "baseline", "match_rate": "rap_area",
                              "match_rate_baseline": "baseline_area"})
    out["lift"] = out["rap_area"] - out["baseline_area"]
    return out


def average_curves(df: pd.DataFrame, points: int, by: list[str], bootstrap: int = 0,
                   seed: int = 0) -> pd.DataFrame:
    """Mean match rate across units at each grid point x of k/u, with its standard error and,
    with ``bootstrap`` > 0, a 95% percentile band from resampling the units.

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
    return agg
