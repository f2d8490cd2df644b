"""The notebooks run top to bottom on the tiny config (as scripts: jupytext percent format)."""

import os
import subprocess
import sys
from pathlib import Path

import jupytext

ROOT = Path(__file__).resolve().parents[1]


def test_quickstart_notebook_runs_on_the_tiny_config(tmp_path):
    nb = jupytext.read(ROOT / "notebooks" / "01_quickstart.py")
    assert sum(c.cell_type == "code" for c in nb.cells) >= 4
    script = tmp_path / "quickstart.py"
    script.write_text(jupytext.writes(nb, fmt="py:percent"))
    env = dict(os.environ, CENSUSRECON_CONFIG=str(ROOT / "configs" / "tiny.yaml"), CENSUSRECON_OUT=str(tmp_path),
               MPLBACKEND="Agg")
    proc = subprocess.run([sys.executable, str(script)], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "match_rate" in proc.stdout and "results in" in proc.stdout
    assert list(tmp_path.glob("tiny/*/match_rate.parquet"))
