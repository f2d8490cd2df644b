"""Match-rate plots, always regenerated from the run's Parquet."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg", force=False)
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from experiments.metrics import average_curves  # noqa: E402

_BASELINE_STYLE = {
    "holdout": ("#444444", "--"),
    "block": ("#1b9e77", ":"),
    "tract": ("#1b9e77", ":"),
    "county": ("#d95f02", ":"),
    "state": ("#7570b3", ":"),
    "national": ("#e7298a", ":"),
    "chance": ("#999999", "-."),
}
_RAP_COLORS = ["#0055cc", "#00a0e0", "#66a61e", "#a6761d", "#e6ab02"]


def save_figure(fig, out_base: Path, dpi: int = 130) -> list[Path]:
    """Write ``out_base``.png and .pdf atomically (temp file, then rename) and close the figure."""
    fig.tight_layout()
    out_base = Path(out_base)
    paths = [out_base.with_suffix(".png"), out_base.with_suffix(".pdf")]
    for p in paths:
        tmp = p.with_name(f".{p.name}.tmp{p.suffix}")
        fig.savefig(tmp, dpi=dpi, bbox_inches="tight")
        tmp.replace(p)
    plt.close(fig)
    return paths


def _variant_title(v) -> str:
    return {True: "with BLOCK", False: "without BLOCK"}.get(v, str(v))


def plot_match_rate(df: pd.DataFrame, out_base: Path, title: str = "", points: int = 100) -> list[Path]:
    """Mean match rate against k/u per method (95% bootstrap band across units), one panel
    per variant; writes ``out_base``.png and .pdf and returns their paths."""
    curves = average_curves(df, points, by=["variant", "method"], bootstrap=500)
    variants = list(dict.fromkeys(df["variant"].tolist()))
    fig, axes = plt.subplots(1, len(variants), figsize=(6.2 * len(variants), 4.6), squeeze=False, sharey=True)
    for ax, v in zip(axes[0], variants):
        sub = curves[curves["variant"] == v]
        methods = list(dict.fromkeys(df.loc[df["variant"] == v, "method"].tolist()))
        rap = [m for m in methods if m.startswith("rap_rank")]
        for i, m in enumerate(rap + [m for m in methods if m not in rap]):
            c = sub[sub["method"] == m]
            if m in rap:
                color, ls, lw = _RAP_COLORS[rap.index(m) % len(_RAP_COLORS)], "-", 2.4
            else:
                color, ls = _BASELINE_STYLE.get(m, ("#999999", "-."))
                lw = 1.6
            units = int(c["units"].max()) if len(c) else 0
            ax.plot(c["k_over_u"], c["match_rate"], ls, color=color, lw=lw, label=f"{m}")
            if units > 1:  # 95% bootstrap band across units
                ax.fill_between(c["k_over_u"], c["ci_low"], c["ci_high"], color=color, alpha=0.12, lw=0)
        n_units = df.loc[df["variant"] == v, "unit"].nunique()
        plain = variants == [False]  # data without a BLOCK choice (ACS): no variant to name
        ax.set_title(f"{n_units} units" if plain else f"{_variant_title(v)} ({n_units} units)")
        ax.set_xlabel("k / u  (rank as a fraction of distinct rows in D)")
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("top-k match rate")
    axes[0][-1].legend(loc="center left", bbox_to_anchor=(1.02, 0.5), fontsize=9, frameon=False,
                       title="method")
    if title:
        fig.suptitle(title)
    return save_figure(fig, out_base)


def plot_metrics(df: pd.DataFrame, lift: pd.DataFrame, calib: pd.DataFrame, out_base: Path, title: str = "") -> list[Path]:
    """Three answers to the sceptic: lift over each baseline, whether matches are rows unique in
    D or common ones, and whether a higher RAP-Rank score really means a likelier match."""
    fig, (a1, a2, a3) = plt.subplots(1, 3, figsize=(17, 4.6))
    # 1. lift over each baseline (mean over units, error bar = std)
    g = lift.groupby(["method", "baseline"])["lift"].agg(["mean", "std"]).reset_index()
    methods = list(dict.fromkeys(g["method"]))
    baselines = list(dict.fromkeys(g["baseline"]))
    width = 0.8 / max(len(methods), 1)
    for i, m in enumerate(methods):
        s = g[g["method"] == m].set_index("baseline").reindex(baselines)
        a1.bar(np.arange(len(baselines)) + i * width, s["mean"], width, yerr=s["std"].fillna(0), capsize=2,
               color=_RAP_COLORS[i % len(_RAP_COLORS)], label=m)
    a1.axhline(0, color="black", lw=0.8)
    a1.set_xticks(np.arange(len(baselines)) + width * (len(methods) - 1) / 2, baselines, rotation=20)
    a1.set_ylabel("lift: area between RAP-Rank and baseline")
    a1.set_title("lift over each baseline")
    a1.legend(fontsize=8)
    # 2. composition of the matches among the top u candidates
    top = df.sort_values("k").groupby(["variant", "unit", "method"]).tail(1)
    comp = top.groupby("method")[["num_matched_unique", "num_matched_common", "num_candidates"]].sum()
    comp = comp.reindex([m for m in dict.fromkeys(df["method"])])
    x = np.arange(len(comp))
    uniq = comp["num_matched_unique"] / comp["num_candidates"]
    common = comp["num_matched_common"] / comp["num_candidates"]
    a2.bar(x, uniq, color="#c0392b", label="matched rows unique in D")
    a2.bar(x, common, bottom=uniq, color="#95a5a6", label="matched rows common in D")
    a2.set_xticks(x, comp.index, rotation=30, ha="right", fontsize=8)
    a2.set_ylabel("share of the top-u candidates")
    a2.set_title("who is matched: unique persons or common rows")
    a2.legend(fontsize=8)
    # 3. calibration
    if len(calib):
        for i, (m, c) in enumerate(calib.groupby("method")):
            c = c.groupby("score_fraction")[["num_matched", "num_candidates"]].sum().reset_index()
            rate = c["num_matched"] / c["num_candidates"]
            a3.plot(c["score_fraction"], rate, "o-", ms=3, color=_RAP_COLORS[i % len(_RAP_COLORS)], label=m)
        a3.set_xlabel("RAP-Rank score / K (copies of the row per run)")
        a3.set_ylabel("observed match rate")
        a3.set_ylim(0, 1.02)
        a3.set_title("calibration")
        a3.legend(fontsize=8)
    for a in (a1, a2, a3):
        a.grid(alpha=0.3)
    if title:
        fig.suptitle(title)
    return save_figure(fig, out_base, dpi=120)
