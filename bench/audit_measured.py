"""Bench: the measured ε beside every declared ε of a config's audit, and how long the audit took.

Runs ``censusrecon audit CONFIG --seed S --json`` (or reads the JSON lines of one already run, ``--from``) and writes
a record under ``bench/results/``: for each mechanism and audited ε, the declared ε, the black box (the best event's
lower bound), the white box (what the noise the code added spends: an ε, or a μ in Gaussian DP beside the declared μ),
the measured share of the declared ε, the outcome and the audit's seconds; the whole audit's seconds.

    python bench/audit_measured.py configs/release_demo.yaml --seed 1 --out bench/results/audit_measured_demo_DATE.json
    python bench/audit_measured.py configs/agency/own_release.yaml --from audit.jsonl --seconds 1400 --out ...
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import platform
import subprocess
import time
from datetime import date
from pathlib import Path


def figures(results: list[dict]) -> dict:
    """The record's figures from audit results (their ``as_dict``): one entry per mechanism and ε."""
    out = {}
    for r in results:
        m = r["measured"]
        wb = m.get("white_box")
        out[f"{r['mechanism']} {r['declared_epsilon']:g}"] = {
            "declared_epsilon": r["declared_epsilon"], "outcome": r["outcome"],
            "black_box": round(r["epsilon_lower_bound"], 4), "black_box_releases": r["runs"],
            "white_box": None if wb is None else {k: wb[k] for k in ("law", "value", "declared", "ratio", "epsilon",
                                                                     "delta", "draws")},
            "measured_epsilon": round(m["epsilon"], 4), "share": m["share"], "by": m["by"], "tight": m["tight"],
            "audit_seconds": r.get("audit_seconds")}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("config")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--from", dest="given", help="the JSON lines of an audit already run (censusrecon audit --json)")
    ap.add_argument("--seconds", type=float, help="with --from: the audit's wall-clock seconds")
    ap.add_argument("--note", default="", help="how the machine was loaded, what else ran")
    ap.add_argument("--commit", help="with --from: the commit the audit ran at (default HEAD)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    if args.given:
        lines, seconds = Path(args.given).read_text().splitlines(), args.seconds
    else:
        from censusrecon.experiments.cli import main as cli

        buf = io.StringIO()
        t0 = time.perf_counter()
        with contextlib.redirect_stdout(buf):
            cli(["audit", args.config, "--seed", str(args.seed), "--json"])
        seconds, lines = time.perf_counter() - t0, buf.getvalue().splitlines()
    results = [json.loads(x) for x in lines if x.strip().startswith("{")]
    commit = args.commit or subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                           text=True).stdout.strip()
    figs = figures(results)
    record = {
        "record": f"censusrecon audit {args.config} --seed {args.seed} --json at commit {commit}, {date.today()}",
        "machine": f"{os.cpu_count()} cores, {platform.processor() or platform.machine()}; {args.note}".strip("; "),
        "figures": {"seconds": round(seconds) if seconds is not None else None,
                    "tight_everywhere_from_epsilon_1": all(f["tight"] for f in figs.values()
                                                           if f["declared_epsilon"] >= 1 and f["outcome"] == "passed"),
                    "by_audit": figs}}
    Path(args.out).write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n")
    for k, f in figs.items():
        wb = f["white_box"]
        print(f"{k:<34} {f['outcome']:<12} black {f['black_box']:<8} white "
              f"{'–' if wb is None else (wb['value'] if wb['law'] == 'laplace' else 'μ ' + str(wb['value']))!s:<10} "
              f"share {f['share']:.0%}")
    print(json.dumps(record["figures"]["seconds"]))


if __name__ == "__main__":
    main()
