"""Plots and the report of a release evaluation (Markdown and self-contained HTML), regenerated from its files."""

from __future__ import annotations

import json
import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg", force=False)
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from experiments.doc import Doc  # noqa: E402
from experiments.metrics import average_curves, best_baselines, variant_label  # noqa: E402
from experiments.plots import save_figure  # noqa: E402

#: A release "does no better than the best baseline beyond its spread" when the mean difference in
#: persons reconstructed across units is at most this many standard errors above zero.
SPREAD_SE = 2.0


def lift_summary(lift: pd.DataFrame) -> pd.DataFrame:
    """Mean and spread (std) across units of the lift, and the mean utility error, per (variant, mechanism, ε)."""
    g = lift.groupby(["variant", "mechanism", "setting"])
    out = g.agg(lift_mean=("lift", "mean"), lift_std=("lift", "std"), utility_error=("utility_error", "mean"),
                units=("unit", "nunique")).reset_index()
    out["lift_std"] = out["lift_std"].fillna(0.0)
    return out


def release_persons(df: pd.DataFrame) -> pd.DataFrame:
    """Per variant, unit, ε and mechanism (the exact tables as ε = inf): persons of D whose row is
    unique in D and among RAP-Rank's top u on the release, next to the best baseline on that unit
    (the baseline that finds the most such persons) and the difference."""
    top = df[df["k"] == df["u"]]
    best = best_baselines(top, top["mechanism"] == "baseline", ["variant", "unit"])[
        ["variant", "unit", "method", "num_matched_unique"]]
    best = best.rename(columns={"method": "best_baseline", "num_matched_unique": "baseline_persons"})
    rel = top[top["mechanism"] != "baseline"][["variant", "unit", "setting", "mechanism", "method", "num_matched_unique",
                                               "n_rows"]].rename(columns={"method": "attack"})
    out = rel.rename(columns={"num_matched_unique": "persons_reconstructed"}).merge(best, on=["variant", "unit"])
    out["difference"] = out["persons_reconstructed"] - out["baseline_persons"]
    return out.reset_index(drop=True)


def summarise_release_persons(per_unit: pd.DataFrame) -> pd.DataFrame:
    g = per_unit.groupby(["variant", "mechanism", "attack", "setting"], sort=False)
    out = g.agg(units=("unit", "nunique"), persons=("persons_reconstructed", "sum"),
                baseline_persons=("baseline_persons", "sum"), difference_mean=("difference", "mean"),
                difference_std=("difference", "std")).reset_index()
    out["difference_sem"] = out["difference_std"].fillna(0.0) / np.sqrt(out["units"])
    out["beyond_spread"] = out["difference_mean"] > SPREAD_SE * out["difference_sem"]
    return out.drop(columns="difference_std")


def utility_summary(util: pd.DataFrame) -> pd.DataFrame:
    """Per variant, mechanism and ε: mean absolute error per cell and share of cells off by more than
    10%, averaged over tables and units (each table weighs the same)."""
    return util.groupby(["variant", "mechanism", "setting"], sort=False).agg(
        mae_per_cell=("mae_per_cell", "mean"), share_off_10pct=("share_off_10pct", "mean")).reset_index()


def setting_label(mechanism: str, value: float) -> str:
    if mechanism == "exact" or value == math.inf:
        return "exact tables"
    return f"swap rate {100 * value:g}%" if mechanism == "swapping" else f"ε = {value:g}"


def verdicts(persons: pd.DataFrame, util: pd.DataFrame, variant) -> list[str]:
    """One paragraph per mechanism: the most revealing setting (the largest ε; for swapping, the
    smallest swap rate) at which the attack does no better than the best baseline beyond its
    spread, and the table error there."""
    p = persons[(persons["variant"] == variant) & np.isfinite(persons["setting"]) & (persons["attack"] == "rap_rank")]
    u = utility_summary(util[util["variant"] == variant]) if len(util) else pd.DataFrame()
    exact = persons[(persons["variant"] == variant) & (persons["setting"] == math.inf) & (persons["attack"] == "rap_rank")]
    out = []
    for mech in dict.fromkeys(p["mechanism"]):
        swap = mech == "swapping"
        rows = p[p["mechanism"] == mech].sort_values("setting", ascending=not swap)  # least protective last
        safe = rows[~rows["beyond_spread"]]
        tail = ""
        if len(exact):
            e = exact.iloc[0]
            tail = (f" For comparison, the exact tables give {e['difference_mean']:+.1f} ± {e['difference_sem']:.1f} "
                    "persons per unit beyond the best baseline.")
        what = "the smallest swap rate" if swap else "the largest ε"
        if len(safe):
            x = safe.iloc[-1]
            err = u[(u["mechanism"] == mech) & (u["setting"] == x["setting"])]
            err_text = (f"; there, each published cell is off by {err['mae_per_cell'].iloc[0]:.2f} persons on "
                        f"average and {100 * err['share_off_10pct'].iloc[0]:.0f}% of cells are off by more than "
                        "10%" if len(err) else "")
            later = rows.iloc[list(rows.index).index(x.name) + 1:]
            warn = (f" At {', '.join(setting_label(mech, v) for v in later['setting'])} the attack reconstructs more "
                    "persons than the baseline beyond the spread." if len(later) else "")
            note = (" Swapping is not differentially private: no ε bounds what other attacks could learn."
                    if swap else "")
            out.append(f"**{mech}**: {what} evaluated at which the attack does no better than the best baseline "
                       f"beyond its spread is **{setting_label(mech, x['setting'])}** ({x['difference_mean']:+.1f} ± "
                       f"{x['difference_sem']:.1f} persons per unit){err_text}.{warn}{note}{tail}")
        else:
            out.append(f"**{mech}**: at every setting evaluated ({', '.join(setting_label(mech, v) for v in rows['setting'])})"
                       " the attack reconstructs more persons than the best baseline beyond its spread: none of them "
                       f"protects them.{tail}")
    return out


# ---- plots -------------------------------------------------------------------------------------


def plot_release(df: pd.DataFrame, util: pd.DataFrame, run_dir: Path, cfg) -> None:
    """release_match_rate.png (RAP-Rank's curve on each release, per mechanism, beside the exact
    tables and the best baseline) and persons_error.png (persons reconstructed against table
    error, one point per ε, the best baseline as a band)."""
    run_dir = Path(run_dir)
    persons = summarise_release_persons(release_persons(df))
    variant = df["variant"].iloc[0]
    d = df[df["variant"] == variant]
    d = d[d["method"] != "exact"]  # RAP-Rank's curves (and the baselines'); the exact attack is in the tables
    key = [f"{e}|{m}" for e, m in zip(d["setting"].tolist(), d["mechanism"].tolist())]  # nan|baseline, inf|exact
    curves = average_curves(d.assign(key=key), cfg.grid_points, by=["key", "method"])
    mechanisms = [m for m in dict.fromkeys(d["mechanism"]) if m not in ("exact", "baseline")]
    best = release_persons(d)["best_baseline"].value_counts().idxmax()
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

    p = persons[(persons["variant"] == variant) & (persons["attack"] == "rap_rank")]
    u = utility_summary(util[util["variant"] == variant])
    per_unit = release_persons(d)
    units = per_unit["unit"].nunique()
    base = per_unit.groupby("unit")["baseline_persons"].first()
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    lo, hi = base.mean() - base.std(ddof=1) / np.sqrt(units) if units > 1 else base.mean(), None
    hi = base.mean() + (base.std(ddof=1) / np.sqrt(units) if units > 1 else 0)
    ax.axhspan(lo, hi, color="#d95f02", alpha=0.15, lw=0)
    ax.axhline(base.mean(), color="#d95f02", ls="--", lw=1.5, label="best baseline (± 1 s.e. across units)")
    for i, mech in enumerate(mechanisms):
        pts = p[p["mechanism"] == mech].merge(u[u["mechanism"] == mech], on=["variant", "mechanism", "setting"])
        pts = pts.sort_values("setting")
        y = pts["persons"] / pts["units"]
        ax.plot(pts["mae_per_cell"], y, "o-", color=plt.get_cmap("tab10")(i), label=mech.replace("_", " "))
        for x_, y_, e in zip(pts["mae_per_cell"], y, pts["setting"]):
            label = f"{100 * e:g}%" if mech == "swapping" else f"ε={e:g}"
            ax.annotate(label, (x_, y_), textcoords="offset points", xytext=(4, 3), fontsize=7)
    ex = p[p["mechanism"] == "exact"]
    if len(ex):
        ax.plot([0], [ex["persons"].iloc[0] / ex["units"].iloc[0]], "*", ms=14, color="black", label="exact tables")
    ax.set_xscale("symlog", linthresh=0.1)
    ax.set_xlabel("table error: mean absolute error per published cell (persons)")
    ax.set_ylabel("persons reconstructed per unit (unique in D, top u)")
    ax.set_title("who is reconstructed, against what the tables lose")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    save_figure(fig, run_dir / "persons_error")


def replot_release(run_dir: Path, cfg) -> list[Path]:
    run_dir = Path(run_dir)
    df = pd.read_parquet(run_dir / "release_eval.parquet")
    util = pd.read_parquet(run_dir / "utility.parquet")
    plot_release(df, util, run_dir, cfg)
    return [run_dir / f"{s}.{x}" for s in ("release_match_rate", "persons_error") for x in ("png", "pdf")]


# ---- the report ---------------------------------------------------------------------------------


def _data_words(cfg, facts: dict) -> str:
    d = cfg.data
    src = {"embedded": "the embedded census-style population (generated by our own code)",
           "table": f"the person file {d.path}", "ppmf": f"the PPMF file {d.path}",
           "acs_nist": f"the NIST ACS excerpt {d.path}", "folktables": f"ACS PUMS files under {d.path}"}[d.source]
    levels = " ⊃ ".join(facts["levels"])
    return (f"Data: {src}; geography {levels}. {len(facts['units'])} {cfg.target.level} units, chosen "
            f"{cfg.target.selection.replace('_', ' ')}; attributes {', '.join(facts['attributes'])}.")


def write_report(cfg, run_dir: Path, df: pd.DataFrame, util: pd.DataFrame, audits, ledger, facts: dict) -> Path:
    """report.md and report.html of a release evaluation: what ran (generated from the config and the
    data, never hard-coded), who is reconstructed per mechanism and ε against the best baseline,
    the table errors, a verdict per mechanism, the audit and the ledger."""
    r = cfg.release
    run_dir = Path(run_dir)
    entries = ledger["entries"] if isinstance(ledger, dict) else ledger.entries
    persons = summarise_release_persons(release_persons(df))
    variants = list(dict.fromkeys(df["variant"].tolist()))
    doc = Doc().h(1, f"Release evaluation: {cfg.name}")
    doc.p(f"Config hash `{cfg.digest()}`. " + _data_words(cfg, facts))
    doc.p(f"Published workload: {cfg.queries[0].describe()}. Privacy unit: one person. Neighbouring relation: "
          f"**{r.relation}** ({'n is fixed and public' if r.relation == 'replace_one' else 'one person added or removed'}). "
          f"Noise backend: **{r.backend}**" + (" — seeded simulation noise, **not for publication**; use "
                                                 "`release.backend: opendp` for a real release."
                                                 if r.backend == "simulation" else "."))
    doc.p("The attack sees the released tables of **D, a random half of each unit's persons**, and tries to "
          "reconstruct D's rows. The other half, D_holdout, is kept out of every release: it is the strongest prior "
          "an outsider could have (persons of the same unit), and the holdout baseline guesses from it. Without the "
          "split there would be no honest prior from the same population to measure the attack against. "
          f"Attack: RAP-Rank, K = {cfg.attack.runs} runs, T = {cfg.attack.steps} steps, n' = {cfg.attack.rows}. "
          f"Baselines (never see any release): {', '.join(cfg.baselines.methods)}.")
    for v in variants:
        p = persons[persons["variant"] == v]
        title = "How many persons are reconstructed?" + (f" ({variant_label(v, variants)})" if len(variants) > 1 else "")
        doc.h(2, title)
        doc.p("A person is reconstructed when their row is unique in D and RAP-Rank ranks it among its top u "
              "candidates from the release; the best baseline of a unit is the baseline that finds the most such "
              f"persons there. Difference: mean ± one standard error across units; *beyond spread* when the mean is "
              f"more than {SPREAD_SE:g} standard errors above zero.")
        rows = []
        order = {m: i for i, m in enumerate(["exact", *cfg.release.mechanisms])}
        for _, x in p.assign(o=p["mechanism"].map(order)).sort_values(["o", "setting"]).iterrows():
            rows.append([x["mechanism"], setting_label(x["mechanism"], x["setting"]), x["attack"], int(x["persons"]),
                         int(x["baseline_persons"]),
                         f"{x['difference_mean']:+.1f} ± {x['difference_sem']:.1f}",
                         "yes" if x["beyond_spread"] else "no"])
        doc.table(["mechanism", "setting", "attack", "persons reconstructed", "by the best baselines",
                   "difference per unit", "beyond spread"], rows, numeric={3, 4, 5})
        if (run_dir / "exact_attack.parquet").exists():
            st = pd.read_parquet(run_dir / "exact_attack.parquet")
            st = st[st["variant"] == v].groupby(["mechanism", "setting", "status"], sort=False).size().reset_index()
            doc.p("The exact attack (integer programming) needs tables consistent with some dataset: noisy tables "
                  "usually are not, and then it has nothing to solve (status per release, units counted):")
            doc.table(["mechanism", "setting", "status", "units"],
                      [[x["mechanism"], setting_label(x["mechanism"], x["setting"]), x["status"], int(x[0])]
                       for _, x in st.iterrows()], numeric={3})
        doc.h(3, "Verdict")
        for para in verdicts(persons, util, v):
            doc.p(para)
        u = util[util["variant"] == v]
        doc.h(3, "Error of each published table")
        doc.p("Mean absolute error per cell, in persons, and the share of cells off by more than 10% of their true "
              "count (an empty cell is off as soon as anything but 0 is published there), per table and level, "
              "averaged over units.")
        g = u.groupby(["mechanism", "setting", "table", "level"], sort=False).agg(
            mae=("mae_per_cell", "mean"), off=("share_off_10pct", "mean"), cells=("cells", "mean")).reset_index()
        doc.table(["mechanism", "setting", "table", "level", "cells per unit", "mean abs. error per cell",
                   "cells off > 10%"],
                  [[x["mechanism"], setting_label(x["mechanism"], x["setting"]), x["table"], x["level"],
                    f"{x['cells']:.0f}", f"{x['mae']:.2f}", f"{100 * x['off']:.0f}%"] for _, x in g.iterrows()],
                  numeric={4, 5, 6})
        if "share_off_5_persons" in u and u["share_off_5_persons"].notna().any():
            bt = u[u["table"] == "block totals"].groupby(["mechanism", "setting"], sort=False).agg(
                mae=("mae_per_cell", "mean"), off5=("share_off_5_persons", "mean")).reset_index()
            doc.p("Block totals as an agency checks them: mean absolute error of a block's total, and the share of "
                  "blocks whose total is off by more than 5 persons.")
            doc.table(["mechanism", "setting", "block total: mean abs. error", "blocks off by > 5 persons"],
                      [[x["mechanism"], setting_label(x["mechanism"], x["setting"]), f"{x['mae']:.2f}",
                        f"{100 * x['off5']:.0f}%"] for _, x in bt.iterrows()], numeric={2, 3})
    doc.img(run_dir / "persons_error.png", "persons reconstructed against table error")
    doc.img(run_dir / "release_match_rate.png", "match rate per release")
    doc.h(2, "Fit for publication?")
    doc.table(["mechanism", "fit for publication", "why"],
              [[m, "yes" if e["for_publication"] else "no", e.get("not_dp") or e.get("publication_note", "")]
               for m in r.mechanisms for e in [next((x for x in entries if x["mechanism"] == m), None)] if e],
              numeric=set())
    n_note = next((x.get("total") or x.get("rows_are") for x in entries if x.get("total") or x.get("rows_are")), None)
    blocks = next((x.get("block_list") for x in entries if x.get("block_list")), None)
    doc.ul([f"The total n of each unit: {n_note or 'not used'}."]
           + ([f"The published block list: {blocks}."] if blocks else [])
           + [f"Declared invariants (published exactly): {', '.join(r.invariants) if r.invariants else 'none'}."])
    doc.h(2, "Audit of the publishing code")
    doc.p("Each mechanism is released through the same function this evaluation attacks, on worst-case neighbouring "
          "datasets under the declared relation, at each audited ε; the audited ε is a "
          f"{audits[0].confidence:.0%} Clopper–Pearson lower bound and must not exceed the declared ε. Checks: "
          "`block_list` (a block whose only resident is replaced stays published), `structure` (the release's shape is "
          "the same for both neighbours), `post_processing` (given the same noisy counts both neighbours publish the "
          "same: no n or other fact leaks past the noise), `noise_scale` (the noise really added is as large as the "
          "declared ε needs; assumes discrete Laplace).")
    doc.table(["mechanism", "declared ε", "audited ε lower bound", "runs", "checks"],
              [[a.mechanism, f"{a.declared_epsilon:g}",
                f"{a.epsilon_lower_bound:.3f}" + ("" if a.epsilon_lower_bound <= a.declared_epsilon else " **EXCEEDS**"),
                a.runs, "all pass" if all(v == "pass" or v.startswith(("declared", "not run")) for v in a.checks.values())
                else "; ".join(f"{k}: {v}" for k, v in a.checks.items() if v != "pass")] for a in audits],
              numeric={1, 2, 3})
    doc.h(2, "Ledger")
    doc.p(f"{len(entries)} releases recorded in `ledger.json` (relation, sensitivity, ε, scale, backend, where n and "
          "the block list come from). Every ε above is per release; releasing several of them about the same persons "
          "adds their ε (the ledger never adds ε across different relations).")
    md, _ = doc.write(run_dir, "report", f"Release evaluation: {cfg.name}")
    return md


def write_release_report_from_dir(run_dir: Path) -> Path:
    """Regenerate report.md/.html of a finished release run from its files."""
    import yaml

    from experiments.config import parse_config
    from synth.audit import AuditResult

    run_dir = Path(run_dir)
    cfg = parse_config(yaml.safe_load((run_dir / "config.yaml").read_text()), str(run_dir / "config.yaml"))
    df = pd.read_parquet(run_dir / "release_eval.parquet")
    util = pd.read_parquet(run_dir / "utility.parquet")
    ledger = json.loads((run_dir / "ledger.json").read_text())
    audits = []
    for a in json.loads((run_dir / "audit.json").read_text()):
        known = {"mechanism", "declared_epsilon", "epsilon_lower_bound", "runs", "confidence", "event", "checks"}
        audits.append(AuditResult(a["mechanism"], a["declared_epsilon"], a["epsilon_lower_bound"], a["runs"],
                                  a["confidence"], a["event"], a.get("checks", {}),
                                  {k: v for k, v in a.items() if k not in known | {"passed"}}))
    facts = json.loads((run_dir / "manifest.json").read_text()).get("facts", {})
    return write_report(cfg, run_dir, df, util, audits, ledger, facts)
