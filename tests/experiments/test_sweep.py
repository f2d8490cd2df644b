"""Sweeps: every (unit × method × seed) task once; a rerun skips finished tasks; SIGKILL loses none; the exact
attack over every tract of a state, pooled."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from censusrecon.experiments.config import ConfigError, load_config
from censusrecon.experiments.sweep import TaskProgress, plan_tasks, running_lines, sweep

OVERRIDES = ["target.units=2", "target.with_block=[false]", "attack.init=[random]", "attack.runs=2",
             "attack.steps=20", "attack.rows=40", "sweep.seeds=[0,1]", "sweep.num_cpus=2", "grid_points=10"]
TASKS = 2 * 3 * 2  # units × (rap_rank, one_way_margins, baselines) × seeds


def test_local_sweep_runs_each_task_once_and_a_rerun_skips_them(tmp_path, root, capsys):
    cfg = load_config(root / "configs" / "tiny.yaml", OVERRIDES)
    first = sweep(cfg, tmp_path, "local", progress=True)  # off a terminal (captured): a line per task, no bar
    assert first["tasks_total"] == TASKS and first["tasks_run"] == TASKS and first["tasks_skipped"] == 0
    assert capsys.readouterr().err.count(" sweep tasks] ") == TASKS
    again = sweep(cfg, tmp_path, "local", progress=True)
    assert again["tasks_run"] == 0 and again["tasks_skipped"] == TASKS
    assert f"resuming: {TASKS} of {TASKS} sweep tasks already done" in capsys.readouterr().err
    df = pd.read_parquet(Path(first["run_dir"]) / "sweep_match_rate.parquet")
    assert set(df.seed) == {0, 1} and {"rap_rank", "one_way_margins", "holdout", "county"} <= set(df.method)
    assert not list((Path(first["run_dir"]) / "tasks").glob("*.progress.json"))  # each removed with its task
    # what a run reports, pooled over the tasks: persons against the best baseline, the strength table
    persons = pd.read_parquet(Path(first["run_dir"]) / "persons.parquet")
    assert set(persons["method"]) == {"rap_rank", "one_way_margins"} and persons["unit"].nunique() == 4  # 2 × 2 seeds
    strength = pd.read_parquet(Path(first["run_dir"]) / "strength.parquet")
    assert set(strength["runs"]) == {1, 2} and strength["unit"].nunique() == 4
    report = Path(first["report"]).read_text()
    assert "## Who is reconstructed" in report and "## Attack strength" in report


def test_a_running_task_says_how_far_its_fits_are_and_the_driver_says_it_once_per_move(tmp_path):
    said = []
    p = TaskProgress(tmp_path / "t1.progress.json", "t1", say=said.append)
    p.reset(total=100)
    p.set_description("rap_rank K runs")
    seen: dict = {}
    assert "running t1: rap_rank K runs 0/100 (" in running_lines(tmp_path, seen)[0]  # started
    assert running_lines(tmp_path, seen) == []  # not moved since: said once
    p.update(2)
    p.update(2)
    lines = running_lines(tmp_path, seen)
    assert len(lines) == 1 and "4/100" in lines[0]
    p.update(2)
    assert "6/100" in running_lines(tmp_path, seen)[0]
    assert said == []  # the local driver hears at most a line a minute
    p.said -= 61
    p.update(2)
    assert len(said) == 1 and "8/100" in said[0]
    p.close()
    assert not (tmp_path / "t1.progress.json").exists() and running_lines(tmp_path, seen) == []


def _ray_stop():
    ray_cli = Path(sys.executable).parent / "ray"
    if ray_cli.exists():
        subprocess.run([str(ray_cli), "stop", "--force"], capture_output=True, timeout=60)


#: the exact attack over every tract of a small state (compact tracts of 6-10 blocks: seconds each)
EXACT_STATE = ["data.population.shape=compact", "data.population.counties_per_state=2",
               "data.population.tracts_per_county=4", "data.population.blocks_per_tract=[6,10]",
               "attack.exact_time_limit=20"]


def test_an_exact_sweep_attacks_every_tract_and_pools_them_beside_the_bureau(tmp_path, root):
    from censusrecon.experiments.report import pooled_by_size

    cfg = load_config(root / "configs" / "census" / "exact_state.yaml",  # two tracts: a pool of more than one
                      EXACT_STATE + ["data.population.counties_per_state=1", "data.population.tracts_per_county=2"])
    first = sweep(cfg, tmp_path, "local", progress=False)
    run_dir = Path(first["run_dir"])
    markers = [json.loads(p.read_text()) for p in sorted((run_dir / "tasks").glob("*.json"))]
    assert first["tasks_total"] == 2 and {m["task"]["method"] for m in markers} == {"exact"}  # a task per tract
    units = pd.read_parquet(run_dir / "exact_units.parquet")
    assert sorted(units["unit"]) == sorted(m["task"]["unit"] for m in markers) and (units["status"] == "solved").all()
    assert first["exact"]["solved"] == 2 and first["exact"]["median_seconds_per_unit"] > 0
    # the pooled table is the sum of the tracts' own rows, bin by bin
    pooled = pooled_by_size(json.loads((run_dir / "exact_units.json").read_text()))
    for key in ("blocks", "blocks_zero_variability", "blocks_solvar_zero", "persons", "agree_binned_age_persons"):
        want = sum(r[key] for m in markers for r in m["unit_facts"]["exact"]["sf1"]["by_block_size"])
        assert pooled["all"][key] == want
    assert pooled["all"]["persons"] == units["persons"].sum()
    reid = pd.read_parquet(run_dir / "reid.parquet")
    assert set(reid["unit"]) == set(units["unit"]) and set(reid["attacker_file"]) == {"perfect", "commercial"}
    report = (run_dir / "sweep_report.md").read_text()
    assert "the Bureau's (2010)" in report and "zero solution variability (solvar 0), % of blocks | all blocks" in report
    # like for like: solvar on both keys, the tables from a swapped file and the swapped file's agreement beside
    assert "solvar 0 keyed on P12's 23 age groups (the released code's key), % of blocks | all blocks" in report
    assert "tabulated from a swapped file" in report and "(HDF vs CEF), exact age" in report
    assert pooled["all"]["blocks_solvar_p12_zero"] >= pooled["all"]["blocks_solvar_zero"]  # a coarser key: more 0s
    assert "solvar at the 90th block percentile | all blocks" in report  # HDSR Table 2's rows
    assert (run_dir / "bureau.png").stat().st_size > 0 and "bureau.png" in report
    again = sweep(cfg, tmp_path, "local", progress=False)
    assert again["tasks_run"] == 0 and again["exact"] == first["exact"]
    # another seed (another generated state, another attack seed): the two side by side, with their spread
    other = sweep(load_config(root / "configs" / "census" / "exact_state.yaml", EXACT_STATE + [
        "data.population.counties_per_state=1", "data.population.tracts_per_county=2", "data.seed=1", "seed=1"]),
        tmp_path, "local", progress=False)
    from censusrecon.experiments.cli import main

    assert main(["report", str(run_dir), other["run_dir"]]) == 0
    seeds = (run_dir.parent / "seeds_report.md").read_text()
    row = next(line for line in seeds.splitlines() if line.startswith("| zero solution variability (solvar 0), % of "
                                                                       "blocks | all blocks"))
    own = [next(line for line in (Path(d) / "sweep_report.md").read_text().splitlines()
                if line.startswith("| zero solution variability (solvar 0), % of blocks | all blocks")).split(" | ")[2]
           for d in (run_dir, other["run_dir"])]
    cells = row.split(" | ")
    assert cells[2:4] == [o.split(" (")[0] for o in own] and cells[-1].strip(" |") == "69.4%"
    lo, hi = sorted(float(o.split("%")[0]) for o in own)
    assert cells[4] == f"{lo:.1f}–{hi:.1f}%" and "population seed 1, seed 1" in seeds
    with pytest.raises(ConfigError, match="not tasks of this config"):
        plan_tasks(cfg.model_copy(update={"sweep": cfg.sweep.model_copy(update={"methods": ["exact", "nope"]})}))


def test_ray_exact_sweep_killed_with_sigkill_loses_no_finished_tract_and_recomputes_none(tmp_path, root):
    pytest.importorskip("ray")
    cmd = [sys.executable, "-m", "censusrecon.experiments.cli", "sweep", str(root / "configs" / "census" / "exact_state.yaml"),
           "--backend", "ray", "--out", str(tmp_path), "--no-progress", "--set", "sweep.num_cpus=2"]
    for o in EXACT_STATE + ["data.population.tracts_per_county=2"]:
        cmd += ["--set", o]
    total = 4  # tracts, one exact task each: two Ray workers, so the kill comes with at least one still running
    proc = subprocess.Popen(cmd, cwd=root, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    tasks = None
    deadline = time.time() + 240
    try:
        while time.time() < deadline:
            found = list(tmp_path.glob("census_exact_state/*/tasks/*.json"))
            if found:
                tasks = found[0].parent
                break
            if proc.poll() is not None:
                pytest.fail(f"sweep ended before any task finished: {proc.stderr.read().decode()[-2000:]}")
            time.sleep(0.1)
        assert tasks is not None, "no task finished in time"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        _ray_stop()
    finished = {p.name: p.stat().st_mtime_ns for p in tasks.glob("*.json")}
    assert 1 <= len(finished) < total
    # the rerun on the local backend: what survives the kill is files, read by the one planner both backends
    # share (a second Ray start would add a quarter of a minute and test nothing more)
    out = subprocess.run([("local" if c == "ray" else c) for c in cmd], cwd=root, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    assert summary["tasks_total"] == total and summary["exact"]["units"] == total
    assert summary["tasks_skipped"] >= len(finished) and summary["tasks_run"] + summary["tasks_skipped"] == total
    for name, mtime in finished.items():  # finished tracts were not recomputed
        assert (tasks / name).stat().st_mtime_ns == mtime
    assert len(list(tasks.glob("*.json"))) == total
    assert not list(tasks.glob(".*"))  # temp files of tasks cut short are cleared by the rerun
    assert len(pd.read_parquet(tasks.parent / "exact_units.parquet")) == total


def test_a_sweep_task_gives_the_same_curves_as_the_full_run(tmp_path, root):
    from censusrecon.experiments.problem import load_population, resolve, select_units
    from censusrecon.experiments.runner import run_unit

    cfg = load_config(root / "configs" / "tiny.yaml", OVERRIDES)
    pop = load_population(cfg)
    unit = select_units(pop, cfg)[0]
    full, _ = run_unit(resolve(cfg, pop), unit, False)
    part, _ = run_unit(resolve(cfg, pop), unit, False, only={"baselines"})
    cols = ["method", "k", "num_matched"]
    merged = part[cols].merge(full[cols], on=["method", "k"], suffixes=("", "_full"))
    assert len(merged) == len(part) and (merged.num_matched == merged.num_matched_full).all()


def test_the_spread_between_seeds_is_the_lowest_and_highest_figure_of_each_row():
    from censusrecon.experiments.report import spread_rows

    one = [["solvar 0, % of blocks", "all blocks", "70.0% (7 of 10)", "69.4%"], ["agreement", "all blocks", "n/a", "48.5%"],
           ["only here", "x", "5.0%", "—"]]
    two = [["solvar 0, % of blocks", "all blocks", "65.5% (19 of 29)", "69.4%"], ["agreement", "all blocks", "40.0%", "48.5%"]]
    three = [["agreement", "all blocks", "44.0%", "48.5%"], ["solvar 0, % of blocks", "all blocks", "72.5% (29 of 40)",
                                                             "69.4%"]]
    rows = spread_rows([one, two, three])
    assert rows[0] == ["solvar 0, % of blocks", "all blocks", "70.0%", "65.5%", "72.5%", "65.5–72.5%", "69.4%"]
    assert rows[1] == ["agreement", "all blocks", "n/a", "40.0%", "44.0%", "40.0–44.0%", "48.5%"]  # n/a: no figure
    assert rows[2] == ["only here", "x", "5.0%", "—", "—", "—", "—"]  # one figure: no spread


def test_units_prepared_ahead_are_the_units_prepared_in_place_and_a_failed_one_fails_where_taken(root, monkeypatch):
    """run's Prefetch prepares the next chunk's units in a thread: each as _unit_work prepares it in place; a unit
    whose preparation fails raises where it is taken, and a unit not asked ahead is prepared when taken."""
    import numpy as np

    from censusrecon.experiments import runner
    from censusrecon.experiments.problem import resolve
    from censusrecon.experiments.results import UnitTask

    study = resolve(load_config(root / "configs" / "tiny.yaml", OVERRIDES))
    first, second = study.units[:2]
    real = runner._unit_work

    def failing(study, unit, wb):
        if unit == second:
            raise ValueError(f"no data for {unit}")
        return real(study, unit, wb)

    monkeypatch.setattr(runner, "_unit_work", failing)
    ahead = runner.Prefetch(study)
    try:
        ahead.start([UnitTask(first, False), UnitTask(second, False)])
        got, here = ahead.take(first, False), real(study, first, False)
        assert np.array_equal(got.truth, here.truth) and got.u == here.u and np.array_equal(got.ks, here.ks)
        for label, (_, _, _, answers) in here.workloads.items():
            assert np.array_equal(got.workloads[label][3], answers)
        with pytest.raises(ValueError, match=f"no data for {second}"):
            ahead.take(second, False)
        assert ahead.take(first, False).u == here.u  # taken again: not ahead any more, prepared now
    finally:
        ahead.close()
