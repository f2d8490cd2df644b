"""Attacks are values in one registry: a new one is one function and one registration, run by `run`, `sweep` and
`evaluate-release` through the same per-unit call, scored as an attack whatever its name."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from censusrecon.reconstruct import attacks
from censusrecon.reconstruct.attacks import AttackInputs, AttackKind
from censusrecon.experiments.config import ConfigError, load_config
from censusrecon.experiments.release.evaluate import evaluate_release
from censusrecon.experiments.runner import run_experiment
from censusrecon.experiments.sweep import sweep
from censusrecon.microdata.ranking import rank_by_score

ROOT = Path(__file__).resolve().parents[2]


# ---- an attack a newcomer adds: the rows of the first published cells' values, most published first ---------

def guess_rows(x: AttackInputs):
    """Every row of the domain scored by the published answer of the first marginal's cell it falls in (a
    deliberately weak attack: it reads one table of the release)."""
    dom = x.workload.domain
    keys = np.arange(dom.total_size)
    first = x.workload.marginals[0]
    codes = dom.decode(keys)[:, [dom.index(a) for a in first]]
    cell = np.ravel_multi_index(codes.T, [dom.size(a) for a in first])
    return rank_by_score(keys, x.answers[: np.prod([dom.size(a) for a in first])][cell], rng=x.rng,
                         limit=x.limit), dom.total_size


GUESS = AttackKind("guess", guess_rows, reads="the first published table")


@pytest.fixture
def guess():
    attacks.register(GUESS, replace=True)
    yield GUESS
    attacks.unregister(GUESS.name)


def test_an_attack_added_in_one_registration_runs_everywhere_and_is_scored_as_an_attack(guess, tmp_path):
    assert attacks.is_attack("guess") and not attacks.is_attack("county")  # named unlike the others, still one
    cfg = load_config(ROOT / "configs" / "tiny.yaml", ["attack.methods=[one_way_margins, guess]",
                                                       "target.with_block=[false]", "attack.init=[random]"])
    run = run_experiment(cfg, tmp_path / "run", progress=False)
    curves = pd.read_parquet(run / "match_rate.parquet")
    assert {"rap_rank", "one_way_margins", "guess"} <= set(curves["method"])
    persons = pd.read_parquet(run / "persons.parquet")
    assert "guess" in set(persons.loc[persons["method"].map(attacks.is_attack), "method"])

    summary = sweep(cfg, tmp_path / "sweep", "local", progress=False)  # a task per (unit, method): the same curves
    swept = pd.read_parquet(Path(summary["run_dir"]) / "sweep_match_rate.parquet")
    for method in ("guess", "one_way_margins"):
        a = curves[curves["method"] == method].sort_values(["unit", "k"])["match_rate"].to_numpy()
        b = swept[swept["method"] == method].sort_values(["unit", "k"])["match_rate"].to_numpy()
        np.testing.assert_array_equal(a, b)

    rel = load_config(ROOT / "configs" / "release_tiny.yaml",
                      ["attack.methods=[guess]", "release.mechanisms=[laplace_tables]", "release.epsilons=[1.0]",
                       "release.audit.runs=2000", "release.audit.seed=1", "release.risks=false"])
    out = evaluate_release(rel, tmp_path / "rel", progress=False)
    ev = pd.read_parquet(out / "release_eval.parquet")
    assert set(ev.loc[ev["mechanism"] == "laplace_tables", "method"]) == {"rap_rank", "guess"}


def test_an_unregistered_attack_is_a_config_error():
    with pytest.raises(ConfigError, match="attack.methods: 'guess'.*one_way_margins"):
        load_config(ROOT / "configs" / "tiny.yaml", ["attack.methods=[guess]"])


def test_an_attack_whose_results_could_not_be_told_apart_is_refused():
    with pytest.raises(ValueError, match="could not be told from 'rap_rank'"):
        attacks.register(AttackKind("rap", guess_rows))
    with pytest.raises(ValueError, match="built in"):
        attacks.unregister("rap_rank")


def test_no_code_outside_the_registries_compares_an_attack_or_mechanism_name():
    """The exact attack runs through the registry like every other (its ``on_tables``, ``facts`` and ``pool``):
    no module but the registries writes an attack's or a mechanism's name to compare it with (==, !=, in)."""
    from censusrecon.synth import registry
    from tests.experiments.test_registry import ROOT as root, _names_compared

    names = set(attacks.names()) | set(registry.names())
    found = [hit for pkg in ("experiments", "synth", "reconstruct", "baselines", "microdata")
             for path in sorted((root / pkg).rglob("*.py")) if path.name not in ("attacks.py", "registry.py")
             for hit in _names_compared(path, names)]
    assert found == []
    bad = root / "bad.py"
    try:  # the scan finds the dispatch the exact attack had
        bad.write_text('def f(task):\n    return task.method == "exact"\n')
        assert _names_compared(bad, names)
    finally:
        bad.unlink()


def test_an_attack_on_the_tables_is_a_value_with_its_hook_and_when_it_runs():
    import censusrecon.experiments.runner  # noqa: F401  (they give the exact attack its run and its pooling)
    import censusrecon.experiments.sweep  # noqa: F401

    exact = attacks.attack(attacks.EXACT_ATTACK)
    assert exact.reads_tables and exact.on_tables is not None and exact.facts[0] == "exact" and exact.pool is not None
    cfg = load_config(ROOT / "configs" / "demo.yaml")
    assert [k.name for k in attacks.on_tables(cfg)] == (["exact"] if cfg.attack.exact else [])
    assert attacks.on_tables(cfg, only={"baselines"}) == []
    with pytest.raises(ValueError, match="say when a config runs it"):
        AttackKind("tables_only", reads_tables=True)
    with pytest.raises(ValueError, match="one of them"):
        AttackKind("both", rank=lambda x: x, reads_tables=True, runs_when=lambda cfg: True)
    with pytest.raises(ValueError, match="belong to an attack that reads the tables"):
        AttackKind("ranked", rank=lambda x: x, on_tables=lambda *a: {})
    with pytest.raises(ValueError, match="reads the integer tables"):
        attacks.attack_units(exact, [])
