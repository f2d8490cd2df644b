"""bench/compare_results.py, which records that a change of code left the results as they were: it must find a
changed cell, a changed value, a missing file, and pass trees that differ only in when and by which code."""

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from compare_results import compare_trees, VOLATILE  # noqa: E402


def _tree(d: Path, value: float = 0.5, seconds: float = 3.0, extra: bool = False) -> Path:
    (d / "units").mkdir(parents=True)
    pd.DataFrame({"k": [1, 2], "match_rate": [value, 0.25]}).to_parquet(d / "units" / "u.parquet")
    (d / "manifest.json").write_text(json.dumps({"persons": 7, "seconds": seconds, "code_fingerprint": str(seconds)}))
    (d / "history.jsonl").write_text(json.dumps({"when": str(seconds), "passed": True}) + "\n")
    if extra:
        (d / "more.json").write_text("{}")
    return d


def test_trees_that_differ_only_in_time_and_code_compare_equal(tmp_path):
    got = compare_trees(_tree(tmp_path / "a"), _tree(tmp_path / "b", seconds=9.0), VOLATILE)
    assert set(got.values()) == {"equal"} and len(got) == 3


def test_a_changed_cell_a_missing_file_are_each_found(tmp_path):
    got = compare_trees(_tree(tmp_path / "a"), _tree(tmp_path / "b", value=0.5000001, extra=True), VOLATILE)
    assert got["units/u.parquet"].startswith("DataFrame.iloc[:, 1] (column name=\"match_rate\") are different")
    assert got["more.json"] == "only after" and got["manifest.json"] == "equal"
    b = tmp_path / "b" / "manifest.json"
    b.write_text(json.dumps({"persons": 8, "seconds": 1}))
    assert compare_trees(tmp_path / "a", tmp_path / "b", VOLATILE)["manifest.json"] == ".persons: '7' vs '8'"
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "compare_results.py"), str(tmp_path / "a"),
                          str(tmp_path / "b")], capture_output=True, text=True)
    assert out.returncode == 1 and "files equal; 3 differ" in out.stdout
