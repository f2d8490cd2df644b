"""Write the record of a measured run into bench/results/, the one place the README's and the pages' figures are
read from (tests/test_figures.py checks every marked figure against its record).

    python bench/record.py run configs/demo.yaml --seconds 231 --as demo_2026-12-05
    python bench/record.py evaluate-release configs/release_demo.yaml --seconds 812 --as release_demo_2026-12-05
    python bench/record.py make-test --seconds 700 --tests 570 --as make_test_2026-12-05
    python bench/record.py gpu results-gpu --as gpu_h100_2026-12-07   # bench/gpu.sh's $OUT, every figure it gave

For ``run`` the figures are the persons each method reconstructs over all units (unique in D, among its top u),
the best guess's and the persons unique in D, per variant, as ``censusrecon run`` prints them; for
``evaluate-release`` the decision's lines, each mechanism's action and its risk to one person per setting (the
inference attacks' figures, the attack that decided); the seconds are the
wall time you measured (with ``time``), the machine said in ``--machine``. The record names the commit, the
command line and the day; ``--out`` and ``--set`` are the run's own."""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def run_figures(config: str, out: str, overrides: list[str]) -> dict:
    import numpy as np
    import pandas as pd

    from censusrecon.experiments.metrics import persons_reconstructed, summarise_persons
    from censusrecon.experiments.results import results_dir

    run = results_dir(config, out, overrides)
    df = pd.read_parquet(run / "match_rate.parquet")
    s = summarise_persons(persons_reconstructed(df))
    figures: dict = {"units": int(df["unit"].nunique())}
    variants = list(dict.fromkeys(s["variant"].tolist()))
    for v in variants:  # one variant: its figures at the top; several: under with_block / without_block
        here = figures if len(variants) == 1 else figures.setdefault(
            ("with_block" if v else "without_block") if isinstance(v, (bool, np.bool_)) else str(v), {})
        for _, r in s[s["variant"] == v].iterrows():
            here[f"{r['method']}_persons"] = int(r["persons"])
            here["best_guess_persons"] = int(r["baseline_persons"])
            if "unique_in_d" in r:
                here["unique_persons"] = int(r["unique_in_d"])
    return figures


def release_figures(config: str, out: str, overrides: list[str]) -> dict:
    from censusrecon.experiments.release.decision import load_decision
    from censusrecon.experiments.results import results_dir

    run = results_dir(config, out, overrides)
    run = run if run.name == "release" else run / "release"
    d = load_decision(run)
    keep = ("informed_tpr", "informed_tpr_low", "informed_tpr_high", "dp_bound", "epsilon_lower_bound",
            "realistic_tpr", "realistic_advantage_upper", "attribute_accuracy", "guess_accuracy", "persons_excess",
            "atypical_informed_tpr", "atypical_realistic_tpr", "atypical_attribute_accuracy")
    risk = {m.mechanism: {"decided_by": m.decided_by, "gates": {g["attack"]: g["status"] + (
        f" up to {g['setting']:g}" if g["status"] == "safe" else "") for g in m.gates},
        "by_setting": {("exact" if r["setting"] == float("inf") else f"{r['setting']:g}"): {
            k: round(float(r[k]), 4) for k in keep if r.get(k) is not None and r[k] == r[k]} for r in m.risk}}
        for m in d.mechanisms if m.risk}
    return {"decision_lines": d.lines(), "exit_status": d.exit_status(),
            "actions": {m.mechanism: m.action for m in d.mechanisms}, **({"risk": risk} if risk else {})}


def gpu_record(path: str) -> tuple[dict, dict, str]:
    """A GPU check's figures (``bench/gpu.sh``'s ``$OUT/gpu.jsonl``, or the folder holding it): every JSON line
    merged, later lines winning; with its machine (the device, its driver line, JAX and Python as the check found
    them) and the commit it ran at. Returns (figures, machine, commit)."""
    p = Path(path)
    p = p / "gpu.jsonl" if p.is_dir() else p
    figures: dict = {}
    for line in p.read_text().splitlines():
        if line.strip():
            figures.update(json.loads(line))
    env = figures.pop("environment", {})
    machine = {"device": env.get("device_kind"), "nvidia_smi": env.get("nvidia_smi"), "devices": len(env.get("devices", [])),
               "jax": env.get("jax"), "python": env.get("python"), "backend": env.get("backend")}
    return figures, machine, str(figures.get("commit", "unknown"))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=["run", "evaluate-release", "make-test", "gpu"])
    ap.add_argument("config", nargs="?", help="the config the run ran; for gpu: the check's $OUT (or its gpu.jsonl)")
    ap.add_argument("--seconds", type=float, help="the wall time measured (gpu: the check's own)")
    ap.add_argument("--as", dest="name", required=True, help="the record's file name in bench/results/, no .json")
    ap.add_argument("--dir", default=str(ROOT / "bench" / "results"), help="where the record goes (default bench/results)")
    ap.add_argument("--out", default="results")
    ap.add_argument("--set", action="append", default=[], dest="overrides")
    ap.add_argument("--tests", type=int, help="make-test: the tests that passed")
    ap.add_argument("--machine", default="the 2-core development machine (24 GiB), shared")
    ap.add_argument("--note", default="", help="how it was measured, in words (alone, fresh clone, ...)")
    ap.add_argument("--commit", help="the commit the run was made at (default: this checkout's)")
    a = ap.parse_args(argv)
    if a.what != "make-test" and not a.config:
        ap.error(f"{a.what} needs the config it ran" if a.what != "gpu" else "gpu needs the check's $OUT")
    if a.what == "gpu":  # every figure the device gave, as it gave them: nothing measured here
        figures, machine, commit = gpu_record(a.config)
        day = str(figures.get("started", date.today().isoformat()))[:10]
        record = {"record": f"bash bench/gpu.sh on {machine['device']} ({machine['devices']} device(s)), JAX "
                            f"{machine['jax']}, {day}",
                  "provenance": f"measured on {day} at commit {commit} by bench/gpu.sh on the lent GPU machine; every "
                                f"JSON line of its gpu.jsonl, merged (written by bench/record.py gpu){'; ' + a.note if a.note else ''}",
                  "machine": machine, "figures": figures}
        path = Path(a.dir) / f"{a.name}.json"
        path.write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n")
        print(path)
        return 0
    if a.seconds is None:
        ap.error(f"{a.what} needs --seconds")
    if a.what == "run":
        figures = run_figures(a.config, a.out, a.overrides)
        command = f"censusrecon run {a.config}"
    elif a.what == "evaluate-release":
        figures = release_figures(a.config, a.out, a.overrides)
        command = f"censusrecon evaluate-release {a.config}"
    else:
        if a.tests is None:
            ap.error("make-test needs --tests")
        figures, command = {"tests_passed": a.tests}, "make test"
    command += "".join(f" --set {o}" for o in a.overrides)
    figures["seconds"] = round(a.seconds) if a.seconds >= 100 else a.seconds
    record = {"record": f"{command} on {a.machine}, {date.today().isoformat()}",
              "provenance": f"measured on {date.today().isoformat()} at commit {a.commit or _commit()} and written by "
                            f"bench/record.py from the run's own files{'; ' + a.note if a.note else ''}",
              "machine": {"cpu": a.machine, "python": platform.python_version()},
              "figures": figures}
    path = Path(a.dir) / f"{a.name}.json"
    path.write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n")
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
