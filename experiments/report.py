"""`censusrecon report`: a Markdown summary of a finished run, leading with who is reconstructed."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from experiments.config import ConfigError, parse_config
from experiments.metrics import (OUTSIDE_COLUMNS, at_u, average_curves, band_kind, is_attack, lift_by_baseline,
                                 persons_reconstructed, summarise_persons, variant_label)
from experiments.doc import Doc


def _pct(a: float, b: float) -> str:
    return f"{100 * a / b:.0f}%" if b > 0 else "n/a"


def unguessable_sentence(df: pd.DataFrame, variant, around: str | None) -> list[str]:
    """One sentence per attack method: the share of its matches at k = u that occur nowhere
    outside the unit, against the same share for the best baseline of each unit."""
    if around is None or df[OUTSIDE_COLUMNS[0]].isna().all():
        return []
    top = at_u(df[df["variant"] == variant])
    per = persons_reconstructed(df[df["variant"] == variant])
    out = []
    for m in [m for m in dict.fromkeys(top["method"]) if is_attack(m)]:
        rows = top[top["method"] == m]
        best = per[per["method"] == m][["unit", "best_baseline"]]
        base = top.merge(best, left_on=["unit", "method"], right_on=["unit", "best_baseline"])
        names = ", ".join(f"{b} on {n}" for b, n in base["best_baseline"].value_counts().items())
        out.append(
            f"**{m}**: of its {int(rows['num_matched'].sum())} matches among the top u, "
            f"{int(rows[OUTSIDE_COLUMNS[0]].sum())} ({_pct(rows[OUTSIDE_COLUMNS[0]].sum(), rows['num_matched'].sum())}) "
            f"are rows no person outside the target unit in its {around} has — rows no prior built from outside the "
            f"unit could have guessed — against {int(base[OUTSIDE_COLUMNS[0]].sum())} of {int(base['num_matched'].sum())} "
            f"({_pct(base[OUTSIDE_COLUMNS[0]].sum(), base['num_matched'].sum())}) for the best baseline "
            f"of each unit ({names}).")
    return out


def write_run_report(run_dir: str | Path) -> Path:
    """report.md and report.html (self-contained) of a finished run directory; a release run
    directory (evaluate-release) gets the release report."""
    run_dir = Path(run_dir)
    if (run_dir / "release_eval.parquet").exists():
        from experiments.release_report import write_release_report_from_dir

        return write_release_report_from_dir(run_dir)
    if not (run_dir / "match_rate.parquet").exists():
        raise ConfigError(f"{run_dir} has neither match_rate.parquet nor release_eval.parquet; is it a finished "
                          "run directory (censusrecon run) or release directory (censusrecon evaluate-release)?")
    cfg = parse_config(yaml.safe_load((run_dir / "config.yaml").read_text()), str(run_dir / "config.yaml"))
    manifest = json.loads((run_dir / "manifest.json").read_text())
    df = pd.read_parquet(run_dir / "match_rate.parquet")
    units = manifest["units"]
    around = manifest.get("rarity_level")
    variants = list(dict.fromkeys(df["variant"].tolist()))
    doc = Doc().h(1, cfg.name)
    doc.p(f"Config hash `{manifest['config_hash']}`, code `{manifest.get('code_fingerprint', '?')}`, "
          f"JAX {manifest['versions'].get('jax')} on {manifest['jax']['backend']}; {manifest['seconds_total']:.0f} s.")

    # ---- the answer first: who is reconstructed, and could anyone have guessed them ----------
    summary = summarise_persons(persons_reconstructed(df))
    doc.h(2, "Who is reconstructed")
    doc.p("A person is *reconstructed* when their exact row is unique in D (no one else in D shares it) and the "
          "method ranks it among its top u candidates. The best baseline of a unit is the baseline that finds the "
          "most such persons there; the difference is per unit, mean ± one standard error across units.")
    for v in variants:
        s = summary[summary["variant"] == v]
        doc.h(3, variant_label(v, variants))
        doc.table(["method", "persons reconstructed", "by the best baselines", "difference per unit", "units",
                   "persons in D"],
                  [[r["method"], int(r["persons"]), int(r["baseline_persons"]),
                    f"{r['difference_mean']:+.1f} ± {r['difference_sem']:.1f}", int(r["units"]), int(r["persons_in_d"])]
                   for _, r in s.iterrows()])
        doc.ul(unguessable_sentence(df, v, around))
        if around is not None and not df[OUTSIDE_COLUMNS[0]].isna().all():
            top = at_u(df[df["variant"] == v]).groupby("method", sort=False)[
                ["num_matched", *OUTSIDE_COLUMNS, "num_matched_unique", "k"]].sum()
            doc.p(f"Matches at k = u (all units), by how many persons outside the target unit in its {around} share "
                  "the row's person attributes, and by uniqueness in D:")
            doc.table(["method", "top-u slots", "matched", "0 outside", "1–2", "3–9", "≥ 10", "unique in D"],
                      [[m, int(r["k"]), int(r["num_matched"])] + [int(r[c]) for c in [*OUTSIDE_COLUMNS,
                                                                                   "num_matched_unique"]]
                       for m, r in top.iterrows()])

    # ---- what ran ------------------------------------------------------------------------
    doc.h(2, "Data")
    doc.p(f"Source: {cfg.data.source}{' (' + cfg.data.path + ')' if cfg.data.path else ''}; "
          f"{len({u['unit'] for u in units})} {cfg.target.level} units; attributes "
          f"{', '.join(next(iter(units))['domain'])}. The attack sees the published statistics of D, a random half of "
          "each unit; the other half, D_holdout, is the holdout baseline's prior (persons of the same unit).")
    doc.table(["unit", "BLOCK", "rows of D", "u", "distinct/total", "entropy (bits)", "queries"],
              [[u["unit"], "yes" if u["with_block"] else "no", u["rows"], u["u"],
                f"{u.get('concentration', {}).get('distinct_over_total', float('nan')):.2f}",
                f"{u.get('concentration', {}).get('entropy_bits', float('nan')):.1f}",
                ", ".join(str(w["num_queries"]) for w in u["workloads"].values())] for u in units], numeric={2, 3, 4, 5})
    doc.h(2, "Queries and methods")
    a = cfg.attack
    draws = {None: "one row per relaxed row", "n": "|D| rows"}.get(a.draws_per_run, f"{a.draws_per_run} rows")
    doc.ul([f"workload `{q.label}`: {q.describe()}" for q in cfg.queries]
           + [f"attack: RAP-Rank, K = {a.runs}, T = {a.steps}, n' = {a.rows}, init {', '.join(a.init)} "
              f"({a.init_mode}), {draws} drawn per run",
              f"baselines (never see the statistics): {', '.join(cfg.baselines.methods)}"
              + ("; geographic pools include the target unit (as the paper's did)" if cfg.baselines.include_target
                 else "; geographic pools exclude the target unit")])

    # ---- curves, lift, calibration, per variant --------------------------------------------
    curves = average_curves(df, 10, by=["variant", "method"])
    lift = lift_by_baseline(df)
    for v in variants:
        n_units = df.loc[df["variant"] == v, "unit"].nunique()
        pick = curves[(curves["variant"] == v) & curves["k_over_u"].round(2).isin([0.1, 0.5, 1.0])]
        table = pick.pivot_table(index="method", columns="k_over_u", values="match_rate", sort=False)
        spread = pick.pivot_table(index="method", columns="k_over_u", values="sem", sort=False)
        sub = df[df["variant"] == v]
        ends = {m: int((g.groupby("unit")["union_size"].first() < g.groupby("unit")["u"].first()).sum())
                for m, g in sub.groupby("method", sort=False)}
        doc.h(2, f"Match rate, {variant_label(v, variants)} (mean ± s.e. over {n_units} units)")
        doc.p("Match rate at k = matched among the top k / k; a method whose list ends before k stops matching.")
        doc.table(["method", "k/u = 0.1", "0.5", "1.0", "units whose list ends before u"],
                  [[m] + [f"{x:.3f} ± {e:.3f}" for x, e in zip(row.to_numpy(), spread.loc[m].to_numpy())]
                   + [ends.get(m, 0)] for m, row in table.iterrows()])
        lv = lift[lift["variant"] == v].groupby(["method", "baseline"], sort=False)["lift"].agg(["mean", "std", "count"])
        doc.p(f"Lift over each baseline, {variant_label(v, variants)}: area between the curves over k/u in (0, 1], "
              "mean ± s.e. over units.")
        doc.table(["method", "baseline", "lift"],
                  [[m, b, f"{r['mean']:+.3f} ± {0.0 if pd.isna(r['std']) else r['std'] / np.sqrt(r['count']):.3f}"]
                   for (m, b), r in lv.iterrows()], numeric={2})
    kind = band_kind(df["unit"].nunique())
    doc.p(f"Bands in the plots: {'± one standard error' if kind == 'sem' else 'a 95% bootstrap band'} across "
          "units (standard errors below 20 units, bootstrap from 20).")
    doc.img(run_dir / "match_rate.png", "match rate")
    if (run_dir / "metrics.png").exists():
        doc.img(run_dir / "metrics.png", "who is matched, persons reconstructed, lift, calibration")
    md, _ = doc.write(run_dir, "report", cfg.name)
    return md
