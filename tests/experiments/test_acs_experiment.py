"""The folktables path end to end: generated files -> ACSDataSource -> RAP-Rank 2-way and 3-way -> Parquet."""

import pandas as pd
import pytest

from censusrecon.experiments.config import ConfigError, parse_config
from censusrecon.experiments.problem import load_population
from censusrecon.experiments.runner import run_experiment
from tests.acs_fixture import make_acs_root


def _cfg(root, **over):
    raw = {
        "name": "acs_fixture",
        "data": {"source": "folktables", "path": str(root), "task": "employment", "states": ["CA", "TX"]},
        "attributes": ["AGEP", "SEX", "MAR", "DIS", "RAC1P", "ESR"],
        "target": {"level": "puma", "units": 2, "require_siblings": True, "min_rows": 50},
        "queries": [{"k": 2}, {"k": 3}],
        "attack": {"runs": 2, "rows": 60, "steps": 40},
        "baselines": ["holdout", "state", "national"],
        "grid_points": 10,
    }
    raw.update(over)
    return parse_config(raw)


def test_folktables_experiment_end_to_end(tmp_path):
    root = make_acs_root(tmp_path / "acs")
    run_dir = run_experiment(_cfg(root), tmp_path / "results", progress=False)
    df = pd.read_parquet(run_dir / "match_rate.parquet")
    assert set(df.method) == {"rap_rank_2way", "rap_rank_3way", "one_way_margins_2way", "one_way_margins_3way",
                             "holdout", "state", "national"}
    assert df.unit.nunique() == 2 and df.unit.str.fullmatch(r"\d{2}-\d{5}").all()
    q = df.groupby("method").num_queries.first()
    assert q["rap_rank_3way"] > q["rap_rank_2way"] > 0
    assert (run_dir / "match_rate.png").exists()


def test_a_missing_state_file_is_a_clear_config_time_error(tmp_path):
    root = make_acs_root(tmp_path / "acs", states=("CA",))
    with pytest.raises(Exception, match="psam_p48.csv"):
        load_population(_cfg(root))
    with pytest.raises(ConfigError, match="data.(task|states) is required"):
        parse_config({"name": "x", "data": {"source": "folktables", "path": "x"}})


def test_nist_national_config_runs_on_the_shipped_excerpt(tmp_path, root):
    """The config as shipped, its data inside the project (microdata/data/acs_nist_2018), at a few seconds' strength."""
    from censusrecon.experiments.config import load_config

    cfg = load_config(root / "configs" / "acs" / "nist_national_2018.yaml",
                      ["attack.runs=2", "attack.steps=20",
                       "attack.rows=50", "target.units=2", "grid_points=10"])
    run_dir = run_experiment(cfg, tmp_path, progress=False)
    df = pd.read_parquet(run_dir / "match_rate.parquet")
    assert set(df.method) == {"rap_rank_2way", "rap_rank_3way", "one_way_margins_2way", "one_way_margins_3way",
                             "holdout", "state", "national", "chance"}
    units = df.unit.unique().tolist()
    assert len(units) == 2 and len({u[:2] for u in units}) == 2  # one PUMA per state
