"""Plots and the Markdown report of a release evaluation (regenerated from its Parquet files)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg", force=False)
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from experiments.metrics import average_curves  # noqa: E402
from experiments.plots import save_figure  # noqa: E402


def lift_summary(lift: pd.DataFrame) -> pd.DataFrame:
    """Mean and spread (std) across units of the lift, and the mean utility error, per (mechanism, ε)."""
    g = lift.groupby(["mechanism", "epsilon"])
    out = g.agg(lift_mean=("lift", "mean"), lift_std=("lift", "std"), utility_error=("utility_error", "mean"),
                units=("unit", "nunique")).reset_index()
    out["lift_std"] = out["lift_std"].fillna(0.0)
    return out


def plot_release(df: pd.DataFrame, lift: pd.DataFrame, run_dir: Path, cfg) -> None:
    run_dir = Path(run_dir)
    points = cfg.grid_points
    key = [f"{e}|{m}" for e, m in zip(df["epsilon"].tolist(), df["mechanism"].tolist())]  # nan|baseline, inf|exact
    curves = average_curves(df.assign(key=key), points, by=["key", "method"])
    mechanisms = [m for m in dict.fromkeys(df["mechanism"]) if m not in ("exact", "baseline")]
    base_area = lift.groupby("best_baseline").size().idxmax()
    eps_list = sorted(e for e in df["epsilon"].dropna().unique() if np.isfinite(e))
    cmap = plt.get_cmap("viridis")
    fig, axes = plt.subplots(1, len(mechanisms), figsize=(4.6 * len(mechanisms), 4.2), squeeze=False, sharey=True)
    for ax, mech in zip(axes[0], mechanisms):
        for i, eps in enumerate(eps_list):
            c = curves[curves["key"] == f"{eps}|{mech}"]
            ax.plot(c["k_over_u"], c["match_rate"], color=cmap(i / max(len(eps_list) - 1, 1)), lw=1.8, label=f"ε={eps:g}")
        c = curves[curves["key"] == "inf|exact"]
        ax.plot(c["k_over_u"], c["match_rate"], color="black", lw=2.4, label="exact tables")
        b = curves[(curves["key"] == "nan|baseline") & (curves["method"] == base_area)]
        ax.plot(b["k_over_u"], b["match_rate"], "--", color="#d95f02", lw=1.8, label=f"{base_area} (baseline)")
        ax.set_title(mech.replace("_", " "))
        ax.set_xlabel("k / u")
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("RAP-Rank top-k match rate on the release")
    axes[0][-1].legend(loc="center left", bbox_to_anchor=(1.02, 0.5), frameon=False, fontsize=9)
    fig.suptitle(f"{cfg.name}: attacking each release")
    save_figure(fig, run_dir / "release_match_rate")

    summ = lift_summary(lift)
    exact = summ[summ["mechanism"] == "exact"]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4.2))
    for i, mech in enumerate(mechanisms):
        s = summ[summ["mechanism"] == mech].sort_values("epsilon")
        color = plt.get_cmap("tab10")(i)
        a1.errorbar(s["epsilon"], s["lift_mean"], yerr=s["lift_std"], marker="o", capsize=3, color=color,
                    label=mech.replace("_", " "))
        a2.plot(s["epsilon"], s["utility_error"], marker="o", color=color, label=mech.replace("_", " "))
    if len(exact):
        a1.axhline(float(exact["lift_mean"].iloc[0]), color="black", lw=1.5, label="exact tables")
    a1.axhline(0, color="#999999", lw=1, ls=":")
    for a in (a1, a2):
        a.set_xscale("log")
        a.set_xlabel("ε")
        a.grid(alpha=0.3, which="both")
    a1.set_ylabel("lift over the best baseline (area between curves)")
    a1.set_title("reconstruction beyond guessing (mean ± std across units)")
    a2.set_ylabel("utility error (mean total variation per table)")
    a2.set_title("cost in accuracy")
    a1.legend(fontsize=8)
    save_figure(fig, run_dir / "lift_utility")


def write_report(cfg, run_dir: Path, lift: pd.DataFrame, util: pd.DataFrame, audits, ledger) -> Path:
    r = cfg.release
    summ = lift_summary(lift)
    exact = summ[summ["mechanism"] == "exact"]
    entries = ledger.entries
    lines = [
        f"# Release evaluation: {cfg.name}",
        "",
        f"Config hash `{cfg.digest()}`. Data: {cfg.data.source}; {lift['unit'].nunique()} {cfg.target.level} "
        f"units; published workload: all {cfg.queries[0].k}-way marginals of {', '.join(cfg.attributes or [])}.",
        f"Attack: RAP-Rank, K = {cfg.attack.runs} runs, T = {cfg.attack.steps} steps, n' = {cfg.attack.rows}. "
        f"Baselines (never see any release): {', '.join(cfg.baselines.methods)}.",
        "",
        f"Privacy unit: one person. Neighbouring relation: **{r.relation}**. Noise backend: **{r.backend}**"
        + (" — seeded simulation noise, **not for publication**; use `release.backend: opendp` for a real release."
           if r.backend == "simulation" else " (OpenDP's discrete Laplace, `contrib` enabled, for the noise mechanisms)."),
        "",
    ]
    lines += ["## Fit for publication?", "", "| mechanism | fit for publication | why |", "|---|---|---|"]
    for mech in r.mechanisms:
        e = next((x for x in entries if x["mechanism"] == mech), None)
        if e is not None:
            lines.append(f"| {mech} | {'yes' if e['for_publication'] else 'no'} | {e.get('publication_note', '')} |")
    n_note = next((x.get("total") or x.get("rows_are") for x in entries if x.get("total") or x.get("rows_are")), None)
    blocks = next((x.get("block_list") for x in entries if x.get("block_list")), None)
    lines += ["", f"- The total n of each unit: {n_note or 'not used'}."]
    if blocks:
        lines.append(f"- The published block list: {blocks}.")
    lines.append(f"- Declared invariants (published exactly): {', '.join(r.invariants) if r.invariants else 'none'}.")
    lines += [
        "",
        "## Is anyone reconstructed beyond what a guess gives?",
        "",
        "Lift = area under RAP-Rank's match-rate curve (k/u in (0, 1]) minus the best baseline's, per unit; "
        "mean ± std across units. Utility error = total variation between released and exact tables, averaged over tables.",
        "",
    ]
    if len(exact):
        lines += [f"Attack on the exact tables: lift **{exact['lift_mean'].iloc[0]:+.3f}** "
                  f"± {exact['lift_std'].iloc[0]:.3f}.", ""]
    lines += ["| mechanism | ε | lift (mean) | lift (std across units) | utility error | within the spread? |",
              "|---|---:|---:|---:|---:|---|"]
    for _, row in summ[summ["mechanism"] != "exact"].sort_values(["mechanism", "epsilon"]).iterrows():
        within = "yes" if row["lift_mean"] <= row["lift_std"] else "no"
        lines.append(f"| {row['mechanism']} | {row['epsilon']:g} | {row['lift_mean']:+.3f} | {row['lift_std']:.3f} | "
                     f"{row['utility_error']:.4f} | {within} |")
    lines += ["", "![lift and utility](lift_utility.png)", "", "![match rate per release](release_match_rate.png)", "",
              "## Audit of the publishing code", "",
              "Each mechanism is released through the same function this evaluation attacks, on worst-case "
              "neighbouring datasets under the declared relation, at each audited ε; the audited ε is a "
              f"{audits[0].confidence:.0%} Clopper–Pearson lower bound and must not exceed the declared ε. The checks: "
              "`block_list` (the published blocks do not change when a block's only resident is replaced), "
              "`structure` (the release's shape is the same for both neighbours), `post_processing` (given the "
              "same noisy counts, both neighbours publish the same thing: no n or other fact leaks past the noise), "
              "`noise_scale` (the noise really added is as large as the declared ε needs; assumes discrete Laplace).",
              "", "| mechanism | declared ε | audited ε lower bound | runs | checks |", "|---|---:|---:|---:|---|"]
    for a in audits:
        flag = "" if a.epsilon_lower_bound <= a.declared_epsilon else " **EXCEEDS**"
        failed = [f"{k}: {v}" for k, v in a.checks.items() if v != "pass"]
        lines.append(f"| {a.mechanism} | {a.declared_epsilon:g} | {a.epsilon_lower_bound:.3f}{flag} | {a.runs} | "
                     + ("all pass" if not failed else "; ".join(failed)) + " |")
    lines += ["", "## Ledger", "",
              f"{len(entries)} releases recorded in `ledger.json` (relation, sensitivity, ε, scale, backend, where n and "
              "the block list come from). Every ε above is per release; releasing several of them about the same "
              "persons adds their ε (the ledger never adds ε across different relations).", ""]
    path = Path(run_dir) / "report.md"
    from experiments.results import atomic_write_text

    atomic_write_text(path, "\n".join(lines) + "\n")
    return path
