"""`censusrecon report`: a short Markdown summary of a finished run (data, queries, methods, lift, plots)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import yaml

from experiments.config import ConfigError, parse_config
from experiments.metrics import average_curves, lift_by_baseline
from experiments.results import atomic_write_text


def write_run_report(run_dir: str | Path) -> Path:
    run_dir = Path(run_dir)
    if not (run_dir / "match_rate.parquet").exists():
        raise ConfigError(f"{run_dir} has no match_rate.parquet; is it a finished run directory?")
    cfg = parse_config(yaml.safe_load((run_dir / "config.yaml").read_text()), str(run_dir / "config.yaml"))
    manifest = json.loads((run_dir / "manifest.json").read_text())
    df = pd.read_parquet(run_dir / "match_rate.parquet")
    units = manifest["units"]
    lines = [f"# {cfg.name}", "",
             f"Config hash `{manifest['config_hash']}`, code `{manifest.get('code_fingerprint', '?')}`, "
             f"JAX {manifest['versions'].get('jax')} on {manifest['jax']['backend']}; "
             f"{manifest['seconds_total']:.0f} s.", "",
             "## Data", "",
             f"Source: {cfg.data.source}{' (' + cfg.data.path + ')' if cfg.data.path else ''}; "
             f"{len({u['unit'] for u in units})} {cfg.target.level} units; attributes "
             f"{', '.join(next(iter(units))['domain'])}.", "",
             "| unit | BLOCK | rows of D | u | distinct/total | entropy (bits) | queries |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for u in units:
        c = u.get("concentration", {})
        nq = ", ".join(str(w["num_queries"]) for w in u["workloads"].values())
        lines.append(f"| {u['unit']} | {'yes' if u['with_block'] else 'no'} | {u['rows']} | {u['u']} | "
                     f"{c.get('distinct_over_total', float('nan')):.2f} | {c.get('entropy_bits', float('nan')):.1f} | {nq} |")
    lines += ["", "## Queries and methods", ""]
    for q in cfg.queries:
        what = f"census tables `{q.tables}`" if q.kind == "census" else f"all {q.k}-way marginals"
        lines.append(f"- workload `{q.label}`: {what}")
    lines += [f"- attack: RAP-Rank, K = {cfg.attack.runs}, T = {cfg.attack.steps}, n' = {cfg.attack.rows}, "
              f"init {', '.join(cfg.attack.init)}", f"- baselines (never see the statistics): {', '.join(cfg.baselines)}",
              "", "## Match rate (mean over units)", ""]
    curves = average_curves(df, 10, by=["variant", "method"])
    pick = curves[curves["k_over_u"].round(2).isin([0.1, 0.5, 1.0])]
    table = pick.pivot_table(index=["variant", "method"], columns="k_over_u", values="match_rate")
    lines += ["| BLOCK | method | k/u = 0.1 | 0.5 | 1.0 |", "|---|---|---:|---:|---:|"]
    for (v, m), row in table.iterrows():
        lines.append(f"| {'yes' if v else 'no'} | {m} | " + " | ".join(f"{x:.3f}" for x in row.to_numpy()) + " |")
    lift = lift_by_baseline(df).groupby(["method", "baseline"])["lift"].agg(["mean", "std"]).reset_index()
    lines += ["", "## Lift over each baseline", "",
              "Area between RAP-Rank's match-rate curve and the baseline's over k/u in (0, 1]; mean (std) over units.", "",
              "| method | baseline | lift |", "|---|---|---:|"]
    for _, r in lift.iterrows():
        lines.append(f"| {r['method']} | {r['baseline']} | {r['mean']:+.3f} ({0 if pd.isna(r['std']) else r['std']:.3f}) |")
    lines += ["", "![match rate](match_rate.png)", ""]
    if (run_dir / "metrics.png").exists():
        lines += ["![lift, unique versus common matches, calibration](metrics.png)", ""]
    path = run_dir / "report.md"
    atomic_write_text(path, "\n".join(lines) + "\n")
    return path
