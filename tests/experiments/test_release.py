"""evaluate-release and audit end to end on the tiny release config."""

import json
import math

import pandas as pd
import pytest

from experiments.cli import main
from experiments.config import ConfigError, load_config, parse_config
from experiments.release import evaluate_release, lift_table


@pytest.fixture(scope="module")
def release_run(tmp_path_factory, root=None):
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    out = tmp_path_factory.mktemp("rel")
    return evaluate_release(load_config(root / "configs" / "release_tiny.yaml"), out, progress=False)


def test_release_evaluation_writes_its_files(release_run):
    assert release_run.name == "release"  # beside the attack run of the same config, never in it
    for name in ("release_eval.parquet", "utility.parquet", "lift.parquet", "ledger.json", "audit.json", "persons.parquet",
                 "report.md", "report.html", "release_match_rate.png", "persons_error.png", "manifest.json"):
        assert (release_run / name).stat().st_size > 0, name
    df = pd.read_parquet(release_run / "release_eval.parquet")
    assert {"epsilon", "mechanism", "unit", "method", "k_over_u", "match_rate", "utility_error"} <= set(df.columns)
    assert set(df.mechanism) == {"exact", "baseline", "laplace_tables", "synthetic", "perturbed_histogram",
                                 "smoothed_histogram"}
    util = pd.read_parquet(release_run / "utility.parquet")
    assert (util.mae_per_cell >= 0).all() and util.share_off_10pct.between(0, 1).all()
    assert set(util.level) == {"unit"} and util.cells.gt(0).all()
    ledger = json.loads((release_run / "ledger.json").read_text())
    assert {e["relation"] for e in ledger["entries"]} == {"replace_one"}
    assert all(e["for_publication"] is False for e in ledger["entries"])  # simulation noise is labelled
    assert "not for publication" in (release_run / "report.md").read_text()


def test_more_noise_means_less_lift_fewer_persons_and_more_error(release_run):
    lift = pd.read_parquet(release_run / "lift.parquet")
    persons = pd.read_parquet(release_run / "persons.parquet")
    for mech in ("laplace_tables", "perturbed_histogram"):
        s = lift[lift.mechanism == mech].groupby("setting")[["lift", "utility_error"]].mean()
        assert s.loc[0.1, "lift"] < s.loc[10.0, "lift"]
        assert s.loc[0.1, "utility_error"] > s.loc[10.0, "utility_error"]
        p = persons[persons.mechanism == mech].groupby("setting").persons_reconstructed.sum()
        assert p.loc[0.1] < p.loc[10.0]
    exact = lift[lift.setting == math.inf].lift.mean()
    assert exact > lift[lift.setting == 0.1].lift.max()
    assert persons[persons.setting == math.inf].persons_reconstructed.sum() > persons[
        persons.setting == 0.1].groupby("mechanism").persons_reconstructed.sum().max()


def test_release_persons_and_verdict_on_hand_made_numbers():
    from experiments.release_report import release_persons, summarise_release_persons, verdicts

    rows = []
    for unit, base, by_eps in (("a", 10, {1.0: 9, 8.0: 30, math.inf: 40}), ("b", 12, {1.0: 12, 8.0: 33, math.inf: 45})):
        rows.append(dict(variant=False, unit=unit, setting=float("nan"), mechanism="baseline", method="holdout",
                         k=5, u=5, num_matched_unique=base, n_rows=50))
        rows.append(dict(variant=False, unit=unit, setting=float("nan"), mechanism="baseline", method="county",
                         k=5, u=5, num_matched_unique=base - 3, n_rows=50))
        for eps, n in by_eps.items():
            rows.append(dict(variant=False, unit=unit, setting=eps, mechanism="exact" if eps == math.inf else
                             "laplace_tables", method="rap_rank", k=5, u=5, num_matched_unique=n, n_rows=50))
    per = release_persons(pd.DataFrame(rows))
    assert set(per.best_baseline) == {"holdout"}
    s = summarise_release_persons(per).set_index(["mechanism", "setting"])
    assert s.loc[("laplace_tables", 1.0), "difference_mean"] == -0.5 and not s.loc[("laplace_tables", 1.0), "beyond_spread"]
    assert s.loc[("laplace_tables", 8.0), "difference_mean"] == 20.5 and s.loc[("laplace_tables", 8.0), "beyond_spread"]
    util = pd.DataFrame([dict(variant=False, mechanism="laplace_tables", setting=1.0, table="T", level="block",
                              cells=4, mae_per_cell=2.5, share_off_10pct=0.5)])
    text = verdicts(summarise_release_persons(per), util, False)[0]
    assert "**ε = 1**" in text and "2.50 persons" in text and "50% of cells" in text and "At ε = 8 the attack" in text


def test_lift_is_the_area_between_rap_rank_and_the_best_baseline():
    rows = []
    for method, mech, eps, rates in (("rap_rank", "exact", math.inf, [1.0, 0.8]),
                                     ("holdout", "baseline", float("nan"), [0.5, 0.5]),
                                     ("county", "baseline", float("nan"), [0.6, 0.2])):
        for k, r in enumerate(rates, 1):
            rows.append(dict(variant=False, unit="u", epsilon=eps, setting=eps, mechanism=mech, method=method, k=k,
                             match_rate=r, utility_error=0.0 if mech == "exact" else float("nan")))
    lift = lift_table(pd.DataFrame(rows))
    assert lift.best_baseline.tolist() == ["holdout"] and lift.lift.tolist() == [pytest.approx(0.4)]


def test_audit_cli_prints_a_table_and_json(capsys, root):
    cfg = str(root / "configs" / "release_tiny.yaml")
    assert main(["audit", cfg, "--set", "release.audit.runs=40000"]) == 0
    table = capsys.readouterr().out
    assert "declared ε" in table and "perturbed_histogram" in table and "EXCEEDS" not in table
    assert main(["audit", cfg, "--json", "--set", "release.audit.runs=40000"]) == 0
    objs = [json.loads(line) for line in capsys.readouterr().out.strip().splitlines()]
    assert {o["mechanism"] for o in objs} == {"laplace_tables", "synthetic", "perturbed_histogram", "smoothed_histogram"}
    for o in objs:
        assert 0 <= o["epsilon_lower_bound"] <= o["declared_epsilon"]


def test_census_tables_release_end_to_end(tmp_path, root):
    cfg = load_config(root / "configs" / "release_tiny.yaml",
                      ["queries={kind: census, tables: [P1, P8, P12]}", "attributes=[AGE, SEX, HISP, CENRACE]",
                       "target.units=1", "release.epsilons=[1.0]", "attack.runs=2", "attack.steps=30",
                       "release.mechanisms=[laplace_tables, synthetic, perturbed_histogram]"])
    run = evaluate_release(cfg, tmp_path, progress=False)
    util = pd.read_parquet(run / "utility.parquet")
    assert set(util.table) == {"P1", "P8", "P12", "unit total"}  # the unit total as an agency checks it
    ledger = json.loads((run / "ledger.json").read_text())
    census = [e for e in ledger["entries"] if e["mechanism"] == "laplace_tables"][0]
    # a person is in P1's cell; in up to 3 more of P8 (two or more races, the k-races subtotal,
    # the combination; P8's total is P1's cell, released once) and 2 more of P12 (sex, sex by
    # age group); replace-one doubles it
    assert census["cells_per_person"] == 1 + 3 + 2 and census["sensitivity"] == 2 * 6


def test_release_config_errors():
    with pytest.raises(ConfigError, match="smoothed histogram is DP only under replace_one"):
        parse_config({"name": "x", "release": {"relation": "add_remove"}})
    with pytest.raises(ConfigError, match="no 'release' section"):
        evaluate_release(parse_config({"name": "x"}), "/tmp/none", progress=False)
