import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from censusrecon.experiments import runner
from censusrecon.experiments.cli import main
from censusrecon.experiments.config import load_config
from censusrecon.experiments.problem import resolve

ROOT = Path(__file__).resolve().parents[2]
REQUIRED = {"unit", "method", "k", "k_over_u", "num_candidates", "num_matched", "match_rate"}


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("results")
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run(
        [sys.executable, "-m", "censusrecon.experiments.cli", "run", str(root / "configs" / "tiny.yaml"),
         "--out", str(out), "--no-progress"],
        capture_output=True, text=True, cwd=root, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    run_dirs = list((out / "tiny").iterdir())
    assert len(run_dirs) == 1
    return run_dirs[0], proc.stdout


def test_cli_end_to_end_writes_a_self_describing_run_directory(tiny_run, root):
    run_dir, stdout = tiny_run
    cfg = load_config(root / "configs" / "tiny.yaml")
    assert run_dir.name == cfg.digest()
    for name in ("config.yaml", "manifest.json", "match_rate.parquet", "match_rate.png", "match_rate.pdf"):
        assert (run_dir / name).stat().st_size > 0, name
    df = pd.read_parquet(run_dir / "match_rate.parquet")
    assert REQUIRED <= set(df.columns)
    assert set(df.method) == {"rap_rank", "rap_rank_init_holdout", "one_way_margins", "holdout", "county", "state", "national",
                             "chance"}
    assert not df.duplicated(["variant", "unit", "method", "k"]).any()  # one row per (unit, method, k)
    m = json.loads((run_dir / "manifest.json").read_text())
    assert m["jax"]["backend"] and m["versions"]["jax"] and m["seeds"]["experiment"] == 0
    for u in m["units"]:
        assert u["u"] == min(u["distinct_rows"], u["holdout_distinct_rows"])
        assert u["workloads"]["2way"]["num_queries"] > 0 and u["rows"] > 0 and "rap_rank" in u["seconds"]
    assert "mean match rate" in stdout
    # on the tiny config RAP-Rank already beats every baseline that never saw Q(D)
    mean = df.groupby("method").match_rate.mean()
    assert mean["rap_rank"] > mean[["county", "state", "national"]].max()


def test_plot_regenerates_from_parquet(tiny_run, capsys):
    run_dir, _ = tiny_run
    (run_dir / "match_rate.png").unlink()
    assert main(["plot", str(run_dir)]) == 0
    assert (run_dir / "match_rate.png").stat().st_size > 0
    # the config that wrote a run finds it, as the README types it
    (run_dir / "match_rate.png").unlink()
    root = run_dir.parents[1]
    assert main(["plot", str(ROOT / "configs" / "tiny.yaml"), "--out", str(root)]) == 0
    assert (run_dir / "match_rate.png").stat().st_size > 0
    assert main(["report", str(ROOT / "configs" / "tiny.yaml"), "--out", str(root)]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[-2:] == [str(run_dir / "report.html"), str(run_dir / "report.md")]  # the page to open first


def test_cli_reports_config_errors_without_a_traceback(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nattack: {rnus: 3}\n")
    assert main(["run", str(bad), "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "unknown key 'attack.rnus'" in err and "Traceback" not in err
    assert main(["plot", str(tmp_path)]) == 2


def test_cli_help_lists_commands():
    proc = subprocess.run([sys.executable, "-m", "censusrecon.experiments.cli", "--help"], capture_output=True, text=True)
    assert proc.returncode == 0 and "run" in proc.stdout and "plot" in proc.stdout


def test_interrupted_run_leaves_no_half_written_file_and_resumes(tmp_path, root, monkeypatch):
    cfg = load_config(root / "configs" / "tiny.yaml",
                      ["attack.init=[random]", "attack.runs=2", "attack.steps=20", "target.with_block=[false]"])
    real = runner.run_units
    calls = {"n": 0}

    def crash_on_second(study, tasks, *a, **k):
        calls["n"] += len(tasks)
        if calls["n"] == 2:
            raise KeyboardInterrupt
        return real(study, tasks, *a, **k)

    monkeypatch.setattr(runner, "units_per_call", lambda study: 1)  # one unit per call: crash between units
    monkeypatch.setattr(runner, "run_units", crash_on_second)
    with pytest.raises(KeyboardInterrupt):
        runner.run_experiment(cfg, tmp_path, progress=False)
    run_dir = tmp_path / "tiny" / cfg.digest()
    assert not (run_dir / "match_rate.parquet").exists()
    assert not [p for p in run_dir.rglob("*") if p.name.startswith(".")]  # no temp files left
    assert len(list((run_dir / "units").glob("*.parquet"))) == 1
    # rerun: the finished unit is reused, only the missing one is computed
    first = json.loads(next((run_dir / "units").glob("*.json")).read_text())["seconds_unit"]
    calls["n"] = 10
    runner.run_experiment(cfg, tmp_path, progress=False)
    assert calls["n"] == 11
    assert pd.read_parquet(run_dir / "match_rate.parquet").unit.nunique() == 2
    # the run's time is the units' time, the resumed one's included, and the report says how it splits
    m = json.loads((run_dir / "manifest.json").read_text())
    assert m["units_resumed"] == 1 and m["seconds_total"] == pytest.approx(m["seconds_this_call"] + first, abs=0.02)
    from censusrecon.experiments.report import write_run_report

    assert "in this call; 1 unit finished by earlier calls" in write_run_report(run_dir).read_text()


def test_resume_does_not_reuse_units_computed_by_other_code(tmp_path, root, monkeypatch):
    cfg = load_config(root / "configs" / "tiny.yaml",
                      ["attack.init=[random]", "attack.runs=2", "attack.steps=10", "target.with_block=[false]",
                       "target.units=1"])
    run_dir = runner.run_experiment(cfg, tmp_path, progress=False)
    calls = {"n": 0}
    real = runner.run_units

    def counting(study, tasks, *a, **k):
        calls["n"] += len(tasks)
        return real(study, tasks, *a, **k)

    monkeypatch.setattr(runner, "run_units", counting)
    runner.run_experiment(cfg, tmp_path, progress=False)
    assert calls["n"] == 0  # same code: reused
    monkeypatch.setattr(runner, "code_fingerprint", lambda: "other-code")
    runner.run_experiment(cfg, tmp_path, progress=False)
    assert calls["n"] == 1  # other code: recomputed
    assert json.loads((run_dir / "manifest.json").read_text())["code_fingerprint"] == "other-code"


def test_units_attacked_together_get_exactly_the_results_they_get_alone(tmp_path, root, monkeypatch):
    cfg = load_config(root / "configs" / "tiny.yaml",
                      ["attack.init=[random, holdout]", "attack.runs=3", "attack.steps=20", "attack.batch=4"])
    calls = []
    real = runner.run_units

    def recording(study, tasks, *a, **k):
        calls.append(len(tasks))
        return real(study, tasks, *a, **k)

    monkeypatch.setattr(runner, "run_units", recording)
    monkeypatch.setattr(runner, "units_per_call", lambda study: 3)
    together = pd.read_parquet(runner.run_experiment(cfg, tmp_path / "a", progress=False) / "match_rate.parquet")
    assert max(calls) > 1  # several units really shared calls
    calls.clear()
    monkeypatch.setattr(runner, "units_per_call", lambda study: 1)
    alone = pd.read_parquet(runner.run_experiment(cfg, tmp_path / "b", progress=False) / "match_rate.parquet")
    assert max(calls) == 1
    pd.testing.assert_frame_equal(together, alone)


SHARED_PPMF = __import__("pathlib").Path(__file__).resolve().parents[2] / "microdata" / "data" / "ppmf_perry_al"


def test_census_config_on_the_redistricting_ppmf_fails_clearly_and_the_supported_one_runs(root, tmp_path, capsys):
    path = str(SHARED_PPMF / "ppmf_perry_county_al.csv")
    assert main(["run", str(root / "configs" / "census" / "tracts.yaml"), "--out", str(tmp_path),
                 "--set", "data.source=ppmf", "--set", f"data.path={path}"]) == 2
    err = capsys.readouterr().err
    assert "cannot build census tables" in err and "'P12'" in err and "PCT12" in err and "'AGE', 'SEX'" in err
    assert main(["run", str(root / "configs" / "census" / "ppmf_perry_race.yaml"), "--out", str(tmp_path),
                 "--no-progress", "--set", "attack.runs=2",  # the shipped config as it is: its data ships too
                 "--set", "attack.steps=30", "--set", "target.units=2"]) == 0
    run = next((tmp_path / "ppmf_perry_race").iterdir())
    df = pd.read_parquet(run / "match_rate.parquet")
    assert {"rap_rank", "rap_rank_init_holdout", "holdout", "tract", "county"} <= set(df.method)


def test_queries_command_prints_one_json_line_per_unit(root, capsys):
    assert main(["queries", str(root / "configs" / "census" / "tracts_reference.yaml"), "--json",
                 "--set", "target.units=2"]) == 0
    rows = [json.loads(x) for x in capsys.readouterr().out.strip().splitlines()]
    assert len(rows) == 2
    for r in rows:
        assert r["num_queries"] == 417 * r["num_blocks"] + 208
        assert r["cells_per_table"]["PCT12"] == 208 and r["cells_per_table"]["P1"] == r["num_blocks"]
        assert r["occupied_blocks"] <= r["num_blocks"] and "empty ones included" in r["block_list"]
    assert any(r["occupied_blocks"] < r["num_blocks"] for r in rows)  # empty blocks are published too


def test_metrics_files_and_report(tiny_run):
    run_dir, _ = tiny_run
    df = pd.read_parquet(run_dir / "match_rate.parquet")
    # the match rate is over k on every row; the candidate list is recorded before any cut
    np.testing.assert_array_equal(df.match_rate, df.num_matched / df.k)
    assert (df.num_candidates <= np.minimum(df.k, df.union_size)).all() and (df.union_size > 0).all()
    assert (df.num_matched_unique + df.num_matched_common == df.num_matched).all()
    outside = df[[c for c in df.columns if c.startswith("num_matched_outside_")]]
    assert outside.shape[1] == 4 and (outside.sum(axis=1) == df.num_matched).all()
    # the county pool is the county outside the tract: its guesses all occur outside, by construction
    assert (df[df.method == "county"].num_matched_outside_0 == 0).all()
    assert df[df.method == "holdout"].num_matched_outside_0.max() > 0  # the holdout is inside the tract
    # calibration over the whole union: the bins of each RAP-Rank add up to its union size
    calib = pd.read_parquet(run_dir / "calibration.parquet")
    assert (calib.num_matched <= calib.num_candidates).all()
    per = calib.groupby(["variant", "unit", "method"]).num_candidates.sum()
    union = df[df.method.str.startswith("rap_rank")].groupby(["variant", "unit", "method"]).union_size.first()
    pd.testing.assert_series_equal(per.sort_index(), union.sort_index(), check_names=False, check_dtype=False)
    m = json.loads((run_dir / "manifest.json").read_text())
    for u in m["units"]:
        for name, facts in u["rap"].items():
            assert facts["distinct_candidates"] == union[(u["with_block"], u["unit"], name)]
            assert facts["kernel"] == "xla"  # what kernel auto (the default) ran: XLA's ops on a CPU
    # lift is per variant: never pooled across with and without BLOCK
    lift = pd.read_parquet(run_dir / "lift.parquet")
    assert {"variant", "method", "baseline", "lift"} <= set(lift.columns)
    assert set(lift.variant) == {True, False}
    persons = pd.read_parquet(run_dir / "persons.parquet")
    assert {"persons_reconstructed", "best_baseline", "baseline_persons", "difference"} <= set(persons.columns)
    units = pd.read_parquet(run_dir / "units.parquet")
    assert units.distinct_over_total.between(0, 1).all() and (units.entropy_bits > 0).all()
    assert (run_dir / "metrics.png").exists()
    assert main(["report", str(run_dir)]) == 0
    text = (run_dir / "report.md").read_text()
    assert text.index("## Who is reconstructed") < text.index("## Data") < text.index("## Match rate")
    assert "### with BLOCK" in text and "### without BLOCK" in text and "variant True" not in text
    assert "no prior built from outside the unit could have guessed" in text and "match_rate.png" in text


def test_every_shipped_config_loads_and_runs_the_chance_baseline(root):
    configs = sorted((root / "configs").rglob("*.yaml"))
    assert len(configs) > 20
    for path in configs:
        cfg = load_config(path)
        assert "chance" in cfg.baselines.methods, path
        assert path.read_text().count("censusrecon ") >= 1, f"{path} names no command that runs it"


def test_tracts_with_block_are_padded_to_a_bucket_and_share_one_program(root, monkeypatch):
    cfg = load_config(root / "configs" / "census" / "tracts.yaml",
                      ["target.units=4", "attack.runs=2", "attack.steps=5", "attack.rows=20",
                       "attack.init=[random]", "target.block_bucket=64"])
    study = resolve(cfg)
    units = study.units
    real = [study.prepare(u, True, pad_blocks=False).private.domain.size("BLOCK") for u in units]
    padded = [study.prepare(u, True) for u in units]
    assert len(set(real)) > 1  # the tracts really have different block counts
    assert {p.private.domain.size("BLOCK") for p in padded} == {64}
    for p, n in zip(padded, real):  # nobody lives in a padding block, and nothing is guessed there
        assert p.private.column("BLOCK").max() < n and p.holdout.column("BLOCK").max() < n
        assert np.all(p.block_weights[n:] == 0)
    calls = []
    import censusrecon.reconstruct.rap as rap

    real_units = rap.rap_rank_units

    def recording(plan, targets, *a, **k):
        calls.append(len(targets))
        return real_units(plan, targets, *a, **k)

    monkeypatch.setattr(rap, "rap_rank_units", recording)  # what RAP-Rank's registered attack calls
    out = runner.run_units(study, [(u, True) for u in units])
    assert calls == [len(units)]  # one plan for all four tracts: one stream of calls, through attack_units
    assert all(len(df) for df, _ in out)


def test_a_block_ladder_pads_each_tract_to_its_rung_so_tracts_of_near_sizes_share_a_program(root):
    cfg = load_config(root / "configs" / "census" / "tracts.yaml", ["target.units=6", "target.block_ladder=1.5"])
    study = resolve(cfg)
    real = [len(study.blocks(u)[0]) for u in study.units]
    padded = [study.prepare(u, True).private.domain.size("BLOCK") for u in study.units]
    rungs = [8]
    while rungs[-1] < max(padded):
        rungs.append(-(-int(np.ceil(rungs[-1] * 1.5)) // 8) * 8)  # 8, 16, 24, 40, 64, ...
    for n, p in zip(real, padded):  # the least rung that holds the tract's listed blocks
        assert p == min(r for r in rungs if r >= n) == cfg.target.padded_blocks(n), (n, p)


def test_the_docs_list_every_command_and_notebook_and_every_command_explains_its_arguments(root, capsys):
    from censusrecon.experiments.cli import build_parser

    readme = "\n".join(p.read_text() for p in [root / "README.md", *sorted((root / "docs" / "pages").glob("*.md"))])
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    for name, parser in sub.choices.items():
        assert f"censusrecon {name}" in readme, name
        for action in parser._actions:
            if action.dest != "help":
                assert action.help, f"censusrecon {name}: argument {action.dest} has no help"
    for nb in (root / "notebooks").glob("*.py"):
        assert nb.name in readme, nb.name
