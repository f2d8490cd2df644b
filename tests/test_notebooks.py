"""The notebooks run top to bottom on the tiny config (as scripts: jupytext percent format)."""

import os
import shlex
import subprocess
import sys
from pathlib import Path

import jupytext

ROOT = Path(__file__).resolve().parents[1]


def _run_notebook(name: str, config: str, tmp_path, **env_extra) -> str:
    nb = jupytext.read(ROOT / "notebooks" / name)
    assert sum(c.cell_type == "code" for c in nb.cells) >= 4
    script = tmp_path / "nb.py"
    script.write_text(jupytext.writes(nb, fmt="py:percent"))
    env = dict(os.environ, CENSUSRECON_CONFIG=str(ROOT / "configs" / config), CENSUSRECON_OUT=str(tmp_path),
               MPLBACKEND="Agg", **env_extra)
    proc = subprocess.run([sys.executable, str(script)], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_quickstart_notebook_runs_on_the_tiny_config(tmp_path):
    out = _run_notebook("01_quickstart.py", "tiny.yaml", tmp_path)
    assert "match_rate" in out and "results in" in out
    assert list(tmp_path.glob("tiny/*/match_rate.parquet"))


def test_release_notebook_runs_on_the_tiny_release_config(tmp_path):
    out = _run_notebook("03_evaluate_a_release.py", "release_tiny.yaml", tmp_path, CENSUSRECON_QUICK="1")
    assert "audited ε" in out and "report:" in out
    assert list(tmp_path.glob("release_tiny/*/release/report.md"))


def test_your_own_release_notebook_runs_on_the_agency_example(tmp_path, capsys):
    out = _run_notebook("02_your_own_release.py", "agency/example.yaml", tmp_path, CENSUSRECON_QUICK="1")
    assert "distinct queries" in out and "persons_reconstructed" in out and "DECISION (" in out
    assert "laplace_tables" in out and "noise from the simulation backend" not in out and "exit status " in out
    assert list(tmp_path.glob("agency_example/*/release/report.html"))
    # the command line it printed, typed in a terminal, reads the notebook's results: nothing runs again
    from censusrecon.experiments.cli import main

    [typed] = [x for x in out.splitlines() if x.startswith("$ censusrecon evaluate-release ")]
    files = {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*") if p.is_file()}
    assert main(shlex.split(typed)[2:]) in (0, 3, 4, 5)
    assert "already evaluated" in capsys.readouterr().err
    assert {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*") if p.is_file()} == files
