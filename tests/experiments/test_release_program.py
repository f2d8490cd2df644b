"""Release programs made outside censusrecon: the contract, the OpenDP adapter, and the black-box audit
that fails a copy of it with half the noise."""

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from experiments.config import ConfigError, load_config
from experiments.problem import load_population, resolve
from experiments.release.audit import audit_release
from synth.adapters import opendp_tables
from synth.adapters.contract import most_cells_per_person, true_counts

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "configs" / "agency" / "own_release.yaml"


@pytest.fixture(scope="module")
def agency(program_agency):
    d, over = program_agency
    return d, over + ["attack.runs=2", "attack.steps=20", "attack.rows=60", "grid_points=10", "release.programs=[]"]


def halved(persons, cells, domain, epsilon, runs, seed, relation, **params):
    """The OpenDP adapter with its noise scale halved (an ε-DP claim at twice the ε it spends)."""
    return opendp_tables.release(persons, cells, domain, 2 * epsilon, runs, seed, relation)


def wrong_shape(persons, cells, domain, epsilon, runs, seed, relation, **params):
    return np.zeros((runs, len(cells) - 1))


def test_true_counts_and_the_most_cells_one_person_is_in_on_a_hand_made_case():
    persons = pd.DataFrame({"SEX": ["M", "F", "F"], "AGE": ["1", "1", "2"], "unit": "u", "block": ["b1", "b1", "b2"]})
    cells = pd.DataFrame({"table": ["T", "S", "S", "A"], "cell": [1, 1, 2, 1], "label": "", "level": ["block", "block",
                          "block", "unit"], "geography": ["b1", "b1", "b1", "u"], "SEX": [None, ["M"], ["F"], None],
                          "AGE": [None, None, None, ["2"]]})
    domain = {"attributes": {"SEX": ["M", "F"], "AGE": ["1", "2"]},
              "places": [{"block": "b1", "unit": "u"}, {"block": "b2", "unit": "u"}]}
    assert true_counts(persons, cells, ["SEX", "AGE"]).tolist() == [2, 1, 1, 1]
    # a person of b1 aged 2 is in T, one of S's cells and A: 3 cells; of b2 in A alone
    assert most_cells_per_person(cells, domain) == 3


def test_a_copy_of_the_opendp_adapter_with_half_its_noise_fails_its_black_box_audit(agency):
    """The adapter as shipped passes the same audit: the command test below (as a command, the same file)."""
    d, over = agency
    bad = load_config(CONFIG, over + ["release.audit.runs=1000", "release.programs=[{name: halved, function: "
                                      f"'{Path(__file__)}:halved', noise: laplace}}]"])
    [caught] = audit_release(resolve(bad, load_population(bad)), seed=3)
    assert not caught.passed and caught.checks["noise_scale"].startswith("fail"), caught.checks_summary()


def test_a_program_is_run_over_the_grid_attacked_and_audited_end_to_end_as_a_command(agency, capsys):
    from experiments.cli import main

    d, over = agency
    command = f"{{name: opendp_cmd, command: [{sys.executable}, {ROOT / 'synth' / 'adapters' / 'opendp_tables.py'}], " \
              "noise: laplace}"
    sets = [x for o in over + ["release.audit.runs=1000", f"release.programs=[{command}]"] for x in ("--set", o)]
    status = main(["evaluate-release", str(CONFIG), "--out", str(d / "results"), "--no-progress", *sets])
    capsys.readouterr()
    assert status in (0, 3)  # one unit decides little: the verdict's logic is tested on hand-made figures
    rel = next((d / "results" / "agency_own_release").iterdir()) / "release"
    persons = pd.read_parquet(rel / "persons.parquet")
    assert {"program:opendp_cmd", "exact"} <= set(persons["mechanism"])
    assert "program:opendp_cmd" in (rel / "report.md").read_text()
    audits = json.loads((rel / "audit.json").read_text())
    assert [a["mechanism"] for a in audits] == ["program:opendp_cmd"] and audits[0]["passed"]
    assert audits[0]["checks"]["noise_scale"] == "pass"  # the shipped adapter's noise, as its halved copy's is not
    ledger = json.loads((rel / "ledger.json").read_text())["entries"]
    assert any(e["mechanism"] == "program:opendp_cmd" and e["declared_epsilon"] == 2.0 for e in ledger)
    util = pd.read_parquet(rel / "utility.parquet")
    assert (util["mechanism"] == "program:opendp_cmd").any()


def test_a_program_that_breaks_the_contract_is_a_one_line_error(agency, tmp_path, monkeypatch):
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where a command's log is kept while it runs
    d, over = agency
    cfg = load_config(CONFIG, over + ["release.programs=[{name: w, function: "
                                      f"'{Path(__file__)}:wrong_shape'}}]"])
    with pytest.raises(ConfigError, match=r"returned an array of shape \(\d+, \d+\); the contract is"):
        audit_release(resolve(cfg, load_population(cfg)), seed=1)
    with pytest.raises(ConfigError, match="give exactly one of function and command"):
        load_config(CONFIG, over + ["release.programs=[{name: n}]"])
    cfg = load_config(CONFIG, over + ["release.programs=[{name: m, command: [/no/such/python, x.py]}]"])
    with pytest.raises(ConfigError, match="cannot run /no/such/python"):
        audit_release(resolve(cfg, load_population(cfg)), seed=1)
    assert not list(tmp_path.glob("censusrecon-program-*")), "a command that never ran left its log behind"
