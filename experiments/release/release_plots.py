"""A release evaluation's pictures: match rate and persons by ε, the decision's excess with its limits."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg", force=False)
import matplotlib.pyplot as plt  # noqa: E402  (after choosing the backend: no display needed)
import numpy as np
import pandas as pd

from censusrecon.experiments.metrics import CONFIDENCE, average_curves, t_half_width, variant_label
from censusrecon.experiments.plots import save_figure
from censusrecon.experiments.release.release_report import (BEST_ATTACK, release_persons, summarise_release_persons,
                                                             utility_summary)
from censusrecon.experiments.release.words import setting_label
from censusrecon.synth import registry
from censusrecon.synth.registry import BASELINE, EXACT


def plot_release(df: pd.DataFrame, util: pd.DataFrame, run_dir: Path, cfg) -> None:
    """release_match_rate.png (RAP-Rank's curve on each release, per mechanism, beside the exact
    tables and the best baseline) and persons_error.png (persons reconstructed against table
    error, one point per ε, the best baseline as a band)."""
    run_dir = Path(run_dir)
    variant = df["variant"].iloc[0]
    per_unit = release_persons(df[df["variant"] == variant])
    persons = summarise_release_persons(per_unit, cfg.release.tolerance)
    d = df[df["variant"] == variant]
    d = d[d["method"].isin(["rap_rank"]) | (d["mechanism"] == BASELINE)]  # RAP-Rank's curves and the baselines
    key = [f"{e}|{m}" for e, m in zip(d["setting"].tolist(), d["mechanism"].tolist())]  # nan|baseline, inf|exact
    curves = average_curves(d.assign(key=key), cfg.grid_points, by=["key", "method"])
    mechanisms = [m for m in dict.fromkeys(d["mechanism"]) if m not in (EXACT, BASELINE)]
    best = per_unit["best_baseline"].value_counts().idxmax()
    cmap = plt.get_cmap("viridis")
    fig, axes = plt.subplots(1, len(mechanisms), figsize=(4.6 * len(mechanisms), 4.2), squeeze=False, sharey=True)
    for ax, mech in zip(axes[0], mechanisms):
        values = sorted(v for v in d.loc[d["mechanism"] == mech, "setting"].unique() if np.isfinite(v))
        for i, eps in enumerate(values):
            c = curves[curves["key"] == f"{eps}|{mech}"]
            ax.plot(c["k_over_u"], c["match_rate"], color=cmap(i / max(len(values) - 1, 1)), lw=1.8,
                    label=setting_label(mech, eps))
        c = curves[curves["key"] == "inf|exact"]
        ax.plot(c["k_over_u"], c["match_rate"], color="black", lw=2.4, label="exact tables")
        b = curves[(curves["key"] == "nan|baseline") & (curves["method"] == best)]
        ax.plot(b["k_over_u"], b["match_rate"], "--", color="#d95f02", lw=1.8, label=f"{best} (baseline)")
        ax.set_title(mech.replace("_", " "))
        ax.set_xlabel("k / u")
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("RAP-Rank top-k match rate on the release")
    axes[0][-1].legend(loc="center left", bbox_to_anchor=(1.02, 0.5), frameon=False, fontsize=9)
    fig.suptitle(f"{cfg.name}: attacking each release ({variant_label(variant, [variant])})")
    save_figure(fig, run_dir / "release_match_rate")

    p = persons[persons["attack"] == BEST_ATTACK]
    u = utility_summary(util[util["variant"] == variant])
    units = per_unit["unit"].nunique()
    base = per_unit.groupby("unit")["baseline_persons"].first()
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    half = float(t_half_width([units], [base.std(ddof=1)])[1][0]) if units > 1 else 0.0
    ax.axhspan(base.mean() - half, base.mean() + half, color="#d95f02", alpha=0.15, lw=0)
    ax.axhline(base.mean(), color="#d95f02", ls="--", lw=1.5,
               label=f"best guess without the release ({CONFIDENCE:.0%} t interval across units)")
    tol = float(p["tolerance"].mean()) if "tolerance" in p and len(p) else None
    if tol is not None and len(p) and p["scale"].iloc[0] == "share":  # a share of each unit's unique persons
        tol *= float(p["unique_in_d"].iloc[0]) / float(p["units"].iloc[0])  # at the units' mean size
    if tol is not None and np.isfinite(tol):
        ax.axhline(base.mean() + tol, color="#1b9e77", ls=":", lw=1.5,
                   label=f"tolerated: best guess + {tol:.1f} ({cfg.release.tolerance.words()})")
    for i, mech in enumerate(mechanisms):
        pts = p[p["mechanism"] == mech].merge(u[u["mechanism"] == mech], on=["variant", "mechanism", "setting"])
        pts = pts.sort_values("setting")
        y = pts["persons"] / pts["units"]
        ax.plot(pts["mae_per_cell"], y, "o-", color=plt.get_cmap("tab10")(i), label=mech.replace("_", " "))
        for x_, y_, e in zip(pts["mae_per_cell"], y, pts["setting"]):
            label = registry.mechanism(mech).short(e) if registry.is_mechanism(mech) else f"ε={e:g}"
            ax.annotate(label, (x_, y_), textcoords="offset points", xytext=(4, 3), fontsize=7)
    ex = p[p["mechanism"] == EXACT]
    if len(ex):
        ax.plot([0], [ex["persons"].iloc[0] / ex["units"].iloc[0]], "*", ms=14, color="black", label="exact tables")
    ax.set_xscale("symlog", linthresh=0.1)
    ax.set_xlabel("table error: mean absolute error per published cell of the declared tables (persons)")
    ax.set_ylabel("persons reconstructed per unit by the best attack")
    ax.set_title("who is reconstructed, against what the tables lose")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    save_figure(fig, run_dir / "persons_error")
    plot_decision(persons, run_dir, cfg)


def plot_decision(persons: pd.DataFrame, run_dir: Path, cfg) -> list[Path]:
    """decision.png, the report's one picture: per DP mechanism, the persons the best attack reconstructs
    beyond the best guess without the release (the verdict's measure: a share of each unit's persons unique
    in D, or persons per unit), mean over units with the one-sided 95% limits the rule compares, against ε;
    the tolerance, the best guess (0) and the exact tables beside them. Everything is a mean over units,
    so 3 units and 300 draw the same picture: one point per mechanism and ε."""
    p = persons[persons["attack"] == BEST_ATTACK]
    share = bool(len(p)) and p["scale"].iloc[0] == "share"
    k = 100.0 if share else 1.0
    mechs = [m for m in dict.fromkeys(p["mechanism"]) if m not in (EXACT, BASELINE)
             and registry.is_mechanism(m) and registry.mechanism(m).dp]
    units = int(p["units"].max()) if len(p) else 0
    fig, ax = plt.subplots(figsize=(6.6, 2.9))
    ax.axhline(0, color="#d95f02", ls="--", lw=1.3, label="the best guess without the release")
    tol = float(p["tolerance"].iloc[0]) * k if len(p) else np.nan
    if np.isfinite(tol):
        ax.axhline(tol, color="#1b9e77", ls=":", lw=1.6, label=f"tolerance ({cfg.release.tolerance.words()})")
    ex = p[p["mechanism"] == EXACT]
    if len(ex):
        e = ex.iloc[0]
        if np.isfinite(e["excess_lower"]) and np.isfinite(e["excess_upper"]):
            ax.axhspan(e["excess_lower"] * k, e["excess_upper"] * k, color="black", alpha=0.08, lw=0)
        ax.axhline(e["excess_mean"] * k, color="black", lw=1.6, label="the exact tables")
    for i, mech in enumerate(mechs):
        q = p[p["mechanism"] == mech].sort_values("setting")
        q = q[np.isfinite(q["setting"].astype(float))]
        mean = q["excess_mean"] * k
        low, up = (q["excess_lower"] * k).fillna(mean), (q["excess_upper"] * k).fillna(mean)  # one unit: no interval
        dodge = 1.05 ** (i - (len(mechs) - 1) / 2)  # side by side at a shared ε, not on top of each other
        ax.errorbar(q["setting"] * dodge, mean, yerr=[mean - low, up - mean], fmt="o-", ms=4, lw=1.4, capsize=3,
                    color=plt.get_cmap("tab10")(i), label=mech.replace("_", " "))
    ax.set_xscale("log")
    ax.set_xlabel("ε")
    ax.set_ylabel("% of unique persons" if share else "persons per unit")
    ax.set_title(f"Reconstructed beyond the best guess ({units} units: mean, one-sided 95% limits)", fontsize=9.5)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    return save_figure(fig, Path(run_dir) / "decision")


def replot_release(run_dir: Path, cfg) -> list[Path]:
    run_dir = Path(run_dir)
    df = pd.read_parquet(run_dir / "release_eval.parquet")
    util = pd.read_parquet(run_dir / "utility.parquet")
    plot_release(df, util, run_dir, cfg)
    return [run_dir / f"{s}.{x}" for s in ("decision", "release_match_rate", "persons_error") for x in ("png", "pdf")]
