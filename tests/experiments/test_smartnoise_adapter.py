"""The SmartNoise Synth adapter (MST and AIM), run as a command in its own environment (make
smartnoise-env): synthetic persons over the public domain, tabulated into the declared tables; and
(slow) its black-box audit, which says how little a few releases can certify."""

from pathlib import Path

import numpy as np
import pytest

from censusrecon.experiments.config import load_config
from censusrecon.experiments.problem import load_population, resolve, select_units
from censusrecon.experiments.release.audit import audit_release
from censusrecon.experiments.release.files import unit_layout
from censusrecon.experiments.release.program import program_inputs, run_program
from censusrecon.synth.release import workload_counts
from tests.conftest import environment

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "configs" / "agency" / "own_release.yaml"
PYTHON = ROOT / ".venv-smartnoise" / "bin" / "python"
ADAPTER = ROOT / "synth" / "adapters" / "smartnoise_synth.py"
@pytest.fixture(autouse=True)
def _environment():
    environment(PYTHON.parents[1] / ".installed", "make smartnoise-env")


def _program(over, synthesizer, runs=None):
    spec = f"{{name: {synthesizer}, command: [{PYTHON}, {ADAPTER}], params: {{synthesizer: {synthesizer}}}" + (
        f", audit_runs: {runs}" if runs else "") + "}"
    return load_config(CONFIG, over + [f"release.programs=[{spec}]"])


@pytest.mark.parametrize("synthesizer",  # one adapter, two fits
                         ["mst", pytest.param("aim", marks=pytest.mark.slow(seconds=120))])
def test_the_smartnoise_adapter_tabulates_a_synthetic_file_over_the_public_domain(program_agency, synthesizer):
    d, over = program_agency
    cfg = _program(over, synthesizer)
    pop = load_population(cfg)
    unit = select_units(pop, cfg)[0]
    prob = resolve(cfg, pop).prepare(unit, True, pad_blocks=False)
    lay = unit_layout(resolve(cfg, pop), unit, True)
    inputs = program_inputs(prob.private, unit, lay, resolve(cfg, pop).blocks(unit)[0], prob.areas)
    y = run_program(cfg, cfg.release.programs[0], inputs, 2.0, 1, 0)[0]
    exact = workload_counts(prob.private, lay.workload)[lay.rows["query"].to_numpy()]
    total = lay.rows["table"].eq("TOTAL").to_numpy()
    # a tabulation: non-negative integers, every table adding up to one total (the rows sampled: a noisy count)
    assert np.all(y >= 0) and np.array_equal(y, np.rint(y))
    sums = {t: y[lay.rows["table"].eq(t).to_numpy() & lay.rows["level"].eq("block").to_numpy()].sum()
            for t in ("TOTAL", "SEX_BY_AGE", "RACE_HISP")}
    assert len(set(sums.values())) == 1 and abs(sums["TOTAL"] - exact[total].sum()) < 0.2 * exact[total].sum()
    assert not np.array_equal(y, exact)


@pytest.mark.slow(seconds=300)
def test_the_smartnoise_audit_is_inconclusive_and_says_how_far_a_few_releases_reach(program_agency):
    """Ten whole releases certify no ε and its noise is not declared: nothing fails, nothing certifies (the old audit
    said "passed"); the audit says inconclusive and how many releases per neighbour would certify ε = 2."""
    d, over = program_agency
    [res] = audit_release(resolve(_program(over, "mst", runs=10), load_population(_program(over, "mst"))), seed=4)
    assert res.outcome == "inconclusive" and not res.failed_checks(), res.checks_summary()
    assert res.checks["bound_power"].startswith("not run: with 10 releases"), res.checks_summary()
    assert res.checks["noise_repeats"] == "pass" and res.details["runs_to_certify"] > 10


def _first_measurements_audit(cfg, eps=2.0):
    from censusrecon.experiments.release.audit import _audit_first_measurements, _program_instance, _unit_instance

    pop = load_population(cfg)
    unit, cache = select_units(pop, cfg)[0], {}
    pairs = _unit_instance(resolve(cfg, pop), unit, True, cache)[4]
    _, inputs, pair_inputs = _program_instance(resolve(cfg, pop), unit, True, cache)
    return _audit_first_measurements(cfg, cfg.release.programs[0], inputs, pair_inputs, pairs, eps, (4, unit, True),
                                     0.99, "program:mst")


def _measured(over, adapter, share=1 / 3):
    spec = (f"{{name: mst, command: [{PYTHON}, {adapter}], params: {{synthesizer: mst}}, "
            f"measurements: {{runs: 100, share: {share}, delta: 1e-9}}}}")
    return load_config(CONFIG, over + [f"release.programs=[{spec}]"])


def test_the_first_measurements_audit_catches_an_adapter_that_spends_four_times_its_epsilon(program_agency, tmp_path):
    # the adapter's measurements are SmartNoise's own, recorded from a real fit: a copy that hands MST four
    # times the ε it declares has noise half as wide, and its one-way marginals spend 4·ρ/3
    d, over = program_agency
    text = ADAPTER.read_text()
    line = "    eps_synth = epsilon if relation == \"replace_one\" else epsilon * (1 - COUNT_SHARE)\n"
    assert line in text
    (tmp_path / "contract.py").write_text((ADAPTER.parent / "contract.py").read_text())
    (tmp_path / "overspent.py").write_text(text.replace(line, line + "    eps_synth *= 4\n"))
    bounds, check, info = _first_measurements_audit(_measured(over, tmp_path / "overspent.py"))
    assert check.startswith("fail: its first measurements' noise spends ρ"), check
    assert info["measurements_rho_from_noise_scale"] > 2 * info["measurements_rho_declared"]
    assert bounds and all(b[1].startswith("first measurements, ") for b in bounds)


@pytest.mark.slow(seconds=120)
def test_the_first_measurements_audit_passes_the_adapter_as_shipped(program_agency):
    d, over = program_agency
    bounds, check, info = _first_measurements_audit(_measured(over, ADAPTER))
    assert check == "pass" and max(b[0] for b in bounds) <= 2.0, (check, bounds)
    assert 0 < info["measurements_rho_from_noise_scale"] <= info["measurements_rho_declared"]
