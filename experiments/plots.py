"""Match-rate plots, always regenerated from the run's Parquet."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg", force=False)
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from censusrecon.reconstruct.attacks import is_attack  # noqa: E402
from censusrecon.experiments.metrics import (BOOTSTRAP_MIN_UNITS, OUTSIDE_COLUMNS, at_u, average_curves,  # noqa: E402
                                 lift_by_baseline, variant_label)

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
    return variant_label(v)


def _method_style(m: str, attack_methods: list[str]) -> tuple[str, str, float]:
    if m in attack_methods:
        return _RAP_COLORS[attack_methods.index(m) % len(_RAP_COLORS)], "-", 2.4
    color, ls = _BASELINE_STYLE.get(m, ("#999999", "-."))
    return color, ls, 1.6


def _ordered_methods(methods) -> tuple[list[str], list[str]]:
    methods = list(dict.fromkeys(methods))
    attack = [m for m in methods if is_attack(m)]
    return attack, attack + [m for m in methods if m not in attack]


def plot_match_rate(df: pd.DataFrame, out_base: Path, title: str = "", points: int = 100) -> list[Path]:
    """Mean match rate against k/u per method, one panel per variant; the band is ± one
    standard error across units below 20 units and a 95% bootstrap band from 20 on (the legend
    says which, and how many units). A triangle marks, for each unit whose candidate list
    ends before k = u, the k/u where it ends (the curve falls from there: it offers nothing
    more). Writes ``out_base``.png and .pdf and returns their paths."""
    curves = average_curves(df, points, by=["variant", "method"], bootstrap=1000)
    variants = list(dict.fromkeys(df["variant"].tolist()))
    ends = df.groupby(["variant", "unit", "method"]).agg(union_size=("union_size", "first"), u=("u", "first"))
    ends = ends[ends["union_size"] < ends["u"]].reset_index()
    fig, axes = plt.subplots(1, len(variants), figsize=(6.2 * len(variants), 4.6), squeeze=False, sharey=True)
    for ax, v in zip(axes[0], variants):
        sub = curves[curves["variant"] == v]
        attack, ordered = _ordered_methods(df.loc[df["variant"] == v, "method"])
        for m in ordered:
            c = sub[sub["method"] == m]
            color, ls, lw = _method_style(m, attack)
            ax.plot(c["k_over_u"], c["match_rate"], ls, color=color, lw=lw, label=m)
            if len(c) and c["units"].max() > 1:
                ax.fill_between(c["k_over_u"], c["band_low"].clip(0, 1), c["band_high"].clip(0, 1),
                                color=color, alpha=0.12, lw=0)
            e = ends[(ends["variant"] == v) & (ends["method"] == m)]
            if len(e):
                x = (e["union_size"] / e["u"]).to_numpy()
                y = np.interp(x, c["k_over_u"], c["match_rate"])
                ax.plot(x, y, "v", color=color, ms=6, mec="black", mew=0.5, ls="none")
        n_units = df.loc[df["variant"] == v, "unit"].nunique()
        kind = "± 1 s.e." if n_units < BOOTSTRAP_MIN_UNITS else "95% bootstrap"
        plain = variants == [False]  # data without a BLOCK choice (ACS): no variant to name
        head = f"{n_units} units" if plain else f"{_variant_title(v)} ({n_units} units)"
        ax.set_title(f"{head}; band: {kind} across units" if n_units > 1 else head, fontsize=10)
        ax.set_xlabel("k / u  (rank as a fraction of distinct rows in D)")
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("top-k match rate (matched / k)")
    handles, labels = axes[0][-1].get_legend_handles_labels()
    if len(ends):
        handles.append(plt.Line2D([], [], marker="v", color="#777777", mec="black", mew=0.5, ls="none"))
        labels.append("a unit's candidate list ends")
    axes[0][-1].legend(handles, labels, loc="center left", bbox_to_anchor=(1.02, 0.5), fontsize=9, frameon=False,
                       title="method")
    if title:
        fig.suptitle(title)
    return save_figure(fig, out_base)


_OUTSIDE_COLORS = ("#b2182b", "#ef8a62", "#fddbc7", "#d1d1d1")
_OUTSIDE_LABELS = ("0 persons outside the unit", "1–2", "3–9", "10 or more")


def plot_metrics(df: pd.DataFrame, calib: pd.DataFrame, out_base: Path, title: str = "") -> list[Path]:
    """The sceptic's questions, one row of panels per variant (with / without BLOCK are never
    pooled): (1) how often each method's matches at k = u occur outside the target unit in the
    enclosing unit (a row nobody outside has is one no outsider could guess); (2) persons
    reconstructed: D's unique rows among the top u; (3) lift over each baseline; (4) whether a
    row found by more of the K runs is likelier to be in D, over the whole union."""
    variants = list(dict.fromkeys(df["variant"].tolist()))
    lift = lift_by_baseline(df)
    top = at_u(df)
    fig, axes = plt.subplots(len(variants), 4, figsize=(21, 4.4 * len(variants)), squeeze=False)
    for row, v in zip(axes, variants):
        a1, a2, a3, a4 = row
        attack, ordered = _ordered_methods(df.loc[df["variant"] == v, "method"])
        x = np.arange(len(ordered))
        # 1. rarity of the matches outside the unit
        t = top[top["variant"] == v].groupby("method")[[*OUTSIDE_COLUMNS, "k"]].sum().reindex(ordered)
        if t[OUTSIDE_COLUMNS].notna().all().all():
            bottom = np.zeros(len(ordered))
            for col, color, label in zip(OUTSIDE_COLUMNS, _OUTSIDE_COLORS, _OUTSIDE_LABELS):
                share = (t[col] / t["k"]).to_numpy(dtype=float)
                a1.bar(x, share, bottom=bottom, color=color, label=label, edgecolor="white", lw=0.5)
                bottom += share
            a1.legend(fontsize=7, title="matched row: persons sharing it\noutside the unit, one level up",
                      title_fontsize=7)
        else:
            a1.text(0.5, 0.5, "no enclosing unit below national:\nno outside counts", ha="center",
                    transform=a1.transAxes)
        a1.set_xticks(x, ordered, rotation=30, ha="right", fontsize=8)
        a1.set_ylabel("share of the top-u candidates")
        a1.set_title(f"{variant_label(v, variants)}: who is matched at k = u", fontsize=10)
        # 2. persons reconstructed
        p = top[top["variant"] == v].groupby("method")["num_matched_unique"].sum().reindex(ordered)
        n = top[top["variant"] == v].groupby("unit")["n_rows"].first().sum()
        colors = [_method_style(m, attack)[0] for m in ordered]
        a2.bar(x, p.to_numpy(dtype=float), color=colors)
        for xi, val in zip(x, p.to_numpy(dtype=float)):
            a2.text(xi, val, f"{int(val)}", ha="center", va="bottom", fontsize=7)
        a2.set_xticks(x, ordered, rotation=30, ha="right", fontsize=8)
        a2.set_ylabel(f"persons (of {int(n)} in D, all units)")
        a2.set_title("persons reconstructed: unique in D, in the top u", fontsize=10)
        # 3. lift over each baseline
        lv = lift[lift["variant"] == v]
        g = lv.groupby(["method", "baseline"])["lift"].agg(["mean", "std", "count"]).reset_index()
        baselines = [m for m in ordered if m not in attack]
        width = 0.8 / max(len(attack), 1)
        for i, m in enumerate(attack):
            s_ = g[g["method"] == m].set_index("baseline").reindex(baselines)
            sem = (s_["std"].fillna(0) / np.sqrt(s_["count"].clip(lower=1))).to_numpy(dtype=float)
            a3.bar(np.arange(len(baselines)) + i * width, s_["mean"], width, yerr=sem, capsize=2,
                   color=_RAP_COLORS[i % len(_RAP_COLORS)], label=m)
        a3.axhline(0, color="black", lw=0.8)
        a3.set_xticks(np.arange(len(baselines)) + width * (len(attack) - 1) / 2, baselines, rotation=20, fontsize=8)
        a3.set_ylabel("lift: mean match-rate difference over k/u")
        a3.set_title("lift over each baseline (± 1 s.e. across units)", fontsize=10)
        if attack:
            a3.legend(fontsize=7)
        # 4. calibration over the whole union
        c = calib[calib["variant"] == v] if len(calib) and "bin_high" in calib else pd.DataFrame()
        for i, (m, cm) in enumerate(c.groupby("method", sort=False) if len(c) else []):
            b = cm.groupby(["bin_low", "bin_high"])[["num_matched", "num_candidates"]].sum().reset_index()
            b = b[b["num_candidates"] > 0]
            mid = (b["bin_low"] + b["bin_high"]) / 2
            a4.plot(mid, b["num_matched"] / b["num_candidates"], "o-", color=_RAP_COLORS[i % len(_RAP_COLORS)],
                    ms=3, label=f"{m} ({int(b['num_candidates'].sum())} candidates)")
        a4.plot([0, 1], [0, 1], ":", color="#999999", lw=0.8)
        a4.set_xlim(0, 1)
        a4.set_ylim(0, 1.02)
        a4.set_xlabel("share of the K runs that output the row")
        a4.set_ylabel("observed match rate")
        a4.set_title("calibration over the whole union", fontsize=10)
        if len(c):
            a4.legend(fontsize=7)
        for a in row:
            a.grid(alpha=0.3)
    if title:
        fig.suptitle(title)
    return save_figure(fig, out_base, dpi=110)


def plot_population(stats, out_base: Path, title: str = "") -> list[Path]:
    """The by-block-size statistics of ``microdata.describe.describe`` beside their 2010 figures:
    share of blocks and persons per bin, modal share, Σp² and uniqueness on {block, sex, 38-bin age};
    then, in ``<out_base>_validation``, each validation statistic's distance from its 2010 figure in
    tolerances (red where outside)."""
    from censusrecon.microdata.describe import SIZE_LABELS

    by = {s.name: s for s in stats}
    panels = [("blocks_pct", "% of occupied blocks"), ("persons_pct", "% of persons"),
              ("modal_pct", "% persons of the block's modal race × ethnicity"),
              ("sum_p2_pct", "mean Σp² over 126 cells (%)"), ("unique_bin38_pct", "% unique on {block, sex, 38-bin age}")]
    fig, axes = plt.subplots(1, len(panels), figsize=(4.0 * len(panels), 3.4))
    x = np.arange(len(SIZE_LABELS))
    for ax, (name, label) in zip(axes, panels):
        here = [by[f"{name}[{b}]"].value for b in SIZE_LABELS]
        target = [by[f"{name}[{b}]"].target for b in SIZE_LABELS]
        tol = [by[f"{name}[{b}]"].tolerance for b in SIZE_LABELS]
        ax.errorbar(x, target, yerr=tol, fmt="s", color="#999999", capsize=3, label="2010 ± tolerance")
        ax.plot(x, here, "o-", color="#0055cc", label="this population")
        ax.set_xticks(x, SIZE_LABELS, rotation=45, fontsize=8)
        ax.set_xlabel("persons per block")
        ax.set_title(label, fontsize=9)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    if title:
        fig.suptitle(title, fontsize=10)
    paths = save_figure(fig, out_base)
    held = [s for s in stats if not s.tuned and s.within is not None]
    if held:  # the statistics the generator was never fitted to: how far each is from 2010, in tolerances
        out_base = Path(out_base)
        fig, ax = plt.subplots(figsize=(7.5, 0.35 * len(held) + 1.2))
        off = [(s.value - s.target) / s.tolerance for s in held]
        y = np.arange(len(held))[::-1]
        ax.axvspan(-1, 1, color="#dddddd", label="within tolerance")
        ax.barh(y, off, color=["#0055cc" if s.within else "#cc3300" for s in held])
        ax.set_yticks(y, [s.name for s in held], fontsize=8)
        ax.axvline(0, color="#555555", lw=0.8)
        ax.set_xlabel("(this population − 2010) / tolerance")
        ax.set_title("validation statistics (never tuned on): red where outside their tolerance", fontsize=9)
        ax.legend(fontsize=8, loc="lower right")
        ax.grid(alpha=0.3, axis="x")
        paths += save_figure(fig, out_base.with_name(out_base.name + "_validation"))
    return paths


def plot_bureau(pooled: dict[str, dict], bureau_by_size: dict[str, tuple], out_base: Path, title: str = "") -> list[Path]:
    """The exact attack beside the Census Bureau's 2010 figures, by its block-size bins: blocks of
    solution variability 0 (of zero variability on all the tables where solvar was not measured),
    and agreement on exact and on 38-bin age. ``pooled``: :func:`experiments.report.pooled_by_size`;
    ``bureau_by_size``: per bin (zero variability % of blocks, % of persons, agreement exact,
    agreement 38-bin)."""
    labels = [b for b in pooled if b != "all"]
    x = np.arange(len(labels))

    def pct(num, den):
        return [100 * pooled[b][num] / pooled[b][den] if pooled[b][den] else np.nan for b in labels]

    solvar = all(pooled[b]["blocks_solvar"] for b in labels)
    zero = pct("blocks_solvar_zero", "blocks_solvar") if solvar else pct("blocks_zero_variability", "blocks")
    panels = [("solution variability 0, % of blocks" if solvar else "zero variability, % of blocks", zero, 0),
              ("agreement on exact age, % of persons", pct("agree_exact_age_persons", "persons"), 2),
              ("agreement on 38-bin age, % of persons", pct("agree_binned_age_persons", "persons"), 3)]
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.4))
    for ax, (label, ours, j) in zip(axes, panels):
        theirs = [np.nan if bureau_by_size[b][j] is None else bureau_by_size[b][j] for b in labels]  # None: unpublished
        ax.plot(x, theirs, "s", color="#999999", label="Census Bureau, 2010")
        ax.plot(x, ours, "o-", color="#cc3300", label="exact attack, here")
        ax.set_xticks(x, labels, rotation=45, fontsize=8)
        ax.set_xlabel("persons per block")
        ax.set_title(label, fontsize=9)
        ax.set_ylim(0, 102)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    if title:
        fig.suptitle(title, fontsize=10)
    return save_figure(fig, out_base)
