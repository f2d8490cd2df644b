"""Sweeps: every (unit × method × seed) task once; a rerun skips finished tasks; SIGKILL loses none."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from experiments.config import load_config
from experiments.sweep import sweep

OVERRIDES = ["target.units=2", "target.with_block=[false]", "attack.init=[random]", "attack.runs=2",
             "attack.steps=20", "attack.rows=40", "sweep.seeds=[0,1]", "sweep.num_cpus=2", "grid_points=10"]
TASKS = 2 * 3 * 2  # units × (rap_rank, one_way_margins, baselines) × seeds


def test_local_sweep_runs_each_task_once_and_a_rerun_skips_them(tmp_path, root):
    cfg = load_config(root / "configs" / "tiny.yaml", OVERRIDES)
    first = sweep(cfg, tmp_path, "local", progress=False)
    assert first["tasks_total"] == TASKS and first["tasks_run"] == TASKS and first["tasks_skipped"] == 0
    again = sweep(cfg, tmp_path, "local", progress=False)
    assert again["tasks_run"] == 0 and again["tasks_skipped"] == TASKS
    df = pd.read_parquet(Path(first["run_dir"]) / "sweep_match_rate.parquet")
    assert set(df.seed) == {0, 1} and {"rap_rank", "one_way_margins", "holdout", "county"} <= set(df.method)


def _ray_stop():
    ray_cli = Path(sys.executable).parent / "ray"
    if ray_cli.exists():
        subprocess.run([str(ray_cli), "stop", "--force"], capture_output=True, timeout=60)


def test_ray_sweep_killed_with_sigkill_loses_no_finished_task_and_recomputes_none(tmp_path, root):
    pytest.importorskip("ray")
    cmd = [sys.executable, "-m", "experiments.cli", "sweep", str(root / "configs" / "tiny.yaml"),
           "--backend", "ray", "--out", str(tmp_path), "--no-progress"]
    for o in OVERRIDES + ["attack.steps=150"]:
        cmd += ["--set", o]
    proc = subprocess.Popen(cmd, cwd=root, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    tasks = None
    deadline = time.time() + 240
    try:
        while time.time() < deadline:
            found = list(tmp_path.glob("tiny/*/tasks/*.json"))
            if found:
                tasks = found[0].parent
                break
            if proc.poll() is not None:
                pytest.fail(f"sweep ended before any task finished: {proc.stderr.read().decode()[-2000:]}")
            time.sleep(0.2)
        assert tasks is not None, "no task finished in time"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        _ray_stop()
    finished = {p.name: p.stat().st_mtime_ns for p in tasks.glob("*.json")}
    assert 1 <= len(finished) < TASKS
    out = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=600)
    _ray_stop()
    assert out.returncode == 0, out.stderr[-3000:]
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    assert summary["tasks_total"] == TASKS
    assert summary["tasks_skipped"] >= len(finished) and summary["tasks_run"] + summary["tasks_skipped"] == TASKS
    for name, mtime in finished.items():  # finished tasks were not recomputed
        assert (tasks / name).stat().st_mtime_ns == mtime
    assert len(list(tasks.glob("*.json"))) == TASKS
    assert not list(tasks.glob(".*"))  # temp files of tasks cut short are cleared by the rerun


def test_a_sweep_task_gives_the_same_curves_as_the_full_run(tmp_path, root):
    from experiments.problem import load_population, select_units
    from experiments.runner import run_unit

    cfg = load_config(root / "configs" / "tiny.yaml", OVERRIDES)
    pop = load_population(cfg)
    unit = select_units(pop, cfg)[0]
    full, _ = run_unit(pop, cfg, unit, False)
    part, _ = run_unit(pop, cfg, unit, False, only={"baselines"})
    cols = ["method", "k", "num_matched"]
    merged = part[cols].merge(full[cols], on=["method", "k"], suffixes=("", "_full"))
    assert len(merged) == len(part) and (merged.num_matched == merged.num_matched_full).all()
