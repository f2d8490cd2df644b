"""Mechanisms are values in one registry: a new one is one function and one registration, evaluated end to
end with no other change; nothing outside the registry decides by a mechanism's name."""

import ast
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from censusrecon.experiments.config import ConfigError, load_config
from censusrecon.experiments.release.evaluate import evaluate_release
from censusrecon.synth import registry
from censusrecon.synth.publishing import ReleaseInputs, tables_published
from censusrecon.synth.release import workload_counts

ROOT = Path(__file__).resolve().parents[2]


# ---- a mechanism a newcomer adds: rounding every published count to a multiple of a base (not DP) ----------

def publish_rounded(x: ReleaseInputs):
    """Every cell of D's tables rounded to the nearest multiple of the base (the setting)."""
    base = int(x.setting)
    counts = np.rint(workload_counts(x.data, x.workload) / base).astype(np.int64) * base
    return tables_published("rounded", counts, x.workload, ROUNDED.not_dp, base=base)


ROUNDED = registry.MechanismKind(
    "rounded", "Rounding to a base", publish_rounded, dp=False, setting="base", settings_word="bases",
    settings_field=None, not_dp="rounding is not differentially private: small counts keep their order")


@pytest.fixture
def rounded():
    registry.register(ROUNDED, replace=True)
    yield ROUNDED
    registry.unregister(ROUNDED.name)


def test_a_mechanism_added_in_one_registration_is_evaluated_end_to_end(rounded, tmp_path):
    cfg = load_config(ROOT / "configs" / "release_tiny.yaml",
                      ["release.mechanisms=[rounded, laplace_tables]", "release.settings={rounded: [3, 10]}",
                       "release.epsilons=[1.0]", "release.audit.runs=2000", "release.audit.seed=1",
                       "release.risks=false"])
    assert cfg.release.settings_of("rounded") == [3.0, 10.0]
    run = evaluate_release(cfg, tmp_path, progress=False)
    curves = pd.read_parquet(run / "release_eval.parquet")
    mine = curves[curves["mechanism"] == "rounded"]
    assert sorted(mine["setting"].unique()) == [3.0, 10.0] and mine["epsilon"].isna().all()  # not DP: no ε
    assert set(mine["method"]) >= {"rap_rank"} and (mine["match_rate"] > 0).any()  # attacked like every release
    persons = pd.read_parquet(run / "persons.parquet")
    assert sorted(persons.loc[persons["mechanism"] == "rounded", "setting"].unique()) == [3.0, 10.0]
    ledger = [e for e in json.loads((run / "ledger.json").read_text())["entries"] if e["mechanism"] == "rounded"]
    assert ledger and all(e["differentially_private"] is False and e["not_dp"] == ROUNDED.not_dp for e in ledger)
    assert sorted({e["base"] for e in ledger}) == [3, 10]
    audits = json.loads((run / "audit.json").read_text())
    assert {a["mechanism"] for a in audits} == {"laplace_tables"}  # not DP: nothing to audit
    decision = json.loads((run / "decision.json").read_text())
    mech = next(m for m in decision["mechanisms"] if m["mechanism"] == "rounded")
    assert mech["audit"].startswith("not applicable") and mech["fit_for_publication"] is False
    report = (run / "report.md").read_text()
    assert "base 3" in report and "base 10" in report and "Rounding to a base is not differentially private" in report


def test_an_unregistered_mechanism_is_a_one_line_config_error():
    with pytest.raises(ConfigError, match="no mechanism is named 'rounded'.*laplace_tables"):
        load_config(ROOT / "configs" / "release_tiny.yaml", ["release.mechanisms=[rounded]"])


def test_a_registered_mechanism_without_settings_is_a_config_error(rounded):
    with pytest.raises(ConfigError, match="release.settings.rounded: give rounding to a base's bases"):
        load_config(ROOT / "configs" / "release_tiny.yaml", ["release.mechanisms=[rounded]"])


def test_a_mechanism_value_is_checked_when_built():
    with pytest.raises(ValueError, match="say why it is not DP"):
        registry.MechanismKind("x", "X", publish_rounded, dp=False)
    with pytest.raises(ValueError, match="no ε to audit"):
        registry.MechanismKind("x", "X", publish_rounded, dp=False, not_dp="because", audit="tables")
    with pytest.raises(ValueError, match="already registered"):
        registry.register(registry.mechanism("laplace_tables"))
    with pytest.raises(ValueError, match="built in"):
        registry.unregister("laplace_tables")


def _names_compared(path: Path, names: set[str]) -> list[str]:
    """Comparisons of a value with a mechanism's name written as a string (==, !=, in, not in)."""
    def consts(node):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return [node.value]
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return [c for e in node.elts for c in consts(e)]
        return []

    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Compare):
            hit = [v for v in consts(node.left) + [c for x in node.comparators for c in consts(x)] if v in names]
            if hit:
                out.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
    return out


def test_no_code_outside_the_registry_compares_a_mechanism_name():
    names = set(registry.names())
    found = [hit for pkg in ("experiments", "synth", "reconstruct", "baselines", "microdata")
             for path in sorted((ROOT / pkg).rglob("*.py")) if path.name != "registry.py"
             for hit in _names_compared(path, names)]
    assert found == []
    bad = ROOT / "bad.py"
    try:  # the scan finds one
        bad.write_text('def f(m):\n    return m in ("swapping", "cell_key")\n')
        assert _names_compared(bad, names)
    finally:
        bad.unlink()
