"""configs/paper/: the paper's own setups run end to end (small --set overrides) and differ from
our defaults exactly where the documentation says."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from censusrecon.experiments.config import load_config
from censusrecon.experiments.runner import run_experiment
from tests.acs_fixture import make_acs_root

PAPER = Path(__file__).resolve().parents[2] / "configs" / "paper"
SMALL = ["attack.runs=2", "attack.steps=10", "attack.rows=40", "grid_points=10", "target.units=2"]


def test_every_preset_is_in_the_readme_table(root):
    readme = (root / "docs" / "pages" / "methods.md").read_text()
    names = sorted(p.name for p in PAPER.glob("*.yaml"))
    assert len(names) == 5
    for name in names:
        assert f"`paper/{name}`" in readme, name


@pytest.mark.parametrize("name", ["census_tracts.yaml", "census_blocks.yaml"])
def test_census_presets_run_end_to_end(name, tmp_path):
    cfg = load_config(PAPER / name, SMALL + ["target.with_block=[true]"] * (name == "census_tracts.yaml"))
    assert cfg.baselines.include_target and cfg.attack.init_mode == "each_once" and cfg.attack.draws_per_run == "n"
    run_dir = run_experiment(cfg, tmp_path, progress=False)
    df = pd.read_parquet(run_dir / "match_rate.parquet")
    assert {"rap_rank", "rap_rank_init_holdout", "holdout", "county", "chance"} <= set(df.method)
    np.testing.assert_array_equal(df.match_rate, df.num_matched / df.k)
    import json

    for u in json.loads((run_dir / "manifest.json").read_text())["units"]:
        # each fit drew |D| rows; the holdout start has n' = |D_holdout|
        assert u["rap"]["rap_rank"]["rows_per_run"] == u["rows"]
        assert u["rap"]["rap_rank_init_holdout"]["relaxed_rows"] == u["holdout_rows"]
        assert u["rap"]["rap_rank"]["relaxed_rows"] == 40


def test_acs_presets_run_end_to_end_on_folktables_files(tmp_path):
    root = make_acs_root(tmp_path / "acs", states=("CA", "TX"), n=300)
    for task in ("employment", "coverage", "mobility"):
        cfg = load_config(PAPER / f"acs_{task}_2018.yaml",
                          SMALL + [f"data.path={root}", "data.states=[CA, TX]", "attack.draws_per_run=120"])
        assert cfg.target.level == "state" and not cfg.data.include_target
        if task != "employment":
            continue  # one end-to-end run; the other two differ only in the task
        run_dir = run_experiment(cfg, tmp_path / "results", progress=False)
        df = pd.read_parquet(run_dir / "match_rate.parquet")
        assert set(df.method) == {"rap_rank_2way", "rap_rank_3way", "one_way_margins_2way",
                                  "one_way_margins_3way", "holdout", "chance"}
        assert set(df.unit) == {"06", "48"}  # whole states are the targets
        import json

        facts = json.loads((run_dir / "manifest.json").read_text())["units"]
        assert all("ESR" not in u["domain"] for u in facts)  # the task label is not an attribute
        assert all(u["rap"]["rap_rank_2way"]["rows_per_run"] == 120 for u in facts)
