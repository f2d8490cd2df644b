"""Match-rate plots, always regenerated from the run's Parquet."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg", force=False)
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from experiments.metrics import average_curves  # noqa: E402

_BASELINE_STYLE = {
    "holdout": ("#444444", "--"),
    "block": ("#1b9e77", ":"),
    "tract": ("#1b9e77", ":"),
    "county": ("#d95f02", ":"),
    "state": ("#7570b3", ":"),
    "national": ("#e7298a", ":"),
}
_RAP_COLORS = ["#0055cc", "#00a0e0", "#66a61e", "#a6761d", "#e6ab02"]


def _variant_title(v) -> str:
    return {True: "with BLOCK", False: "without BLOCK"}.get(v, str(v))


def plot_match_rate(df: pd.DataFrame, out_base: Path, title: str = "", points: int = 100) -> list[Path]:
    """Mean match rate against k/u per method (± one standard error across units), one panel
    per variant; writes ``out_base``.png and .pdf and returns their paths."""
    curves = average_curves(df, points, by=["variant", "method"])
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
            if units > 1:
                ax.fill_between(c["k_over_u"], c["match_rate"] - c["sem"], c["match_rate"] + c["sem"],
                                color=color, alpha=0.12, lw=0)
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
    fig.tight_layout()
    out_base = Path(out_base)
    paths = [out_base.with_suffix(".png"), out_base.with_suffix(".pdf")]
    for p in paths:
        tmp = p.with_name(f".{p.name}.tmp{p.suffix}")
        fig.savefig(tmp, dpi=130, bbox_inches="tight")
        tmp.replace(p)
    plt.close(fig)
    return paths
