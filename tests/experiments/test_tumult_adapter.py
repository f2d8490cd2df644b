"""The Tumult Analytics adapter, run as a command in its own environment (make tumult-env): a release of
the declared tables with Tumult's integer noise; and (slow) its black-box audit, which a copy of it
with half the noise fails."""

import re
from pathlib import Path

import numpy as np
import pytest

from censusrecon.experiments.config import ConfigError, load_config
from censusrecon.experiments.problem import load_population, resolve, select_units
from censusrecon.experiments.release.audit import audit_release
from censusrecon.experiments.release.files import unit_layout
from censusrecon.synth.program_host import program_inputs, run_program
from censusrecon.synth.release import workload_counts
from tests.conftest import environment

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "configs" / "agency" / "own_release.yaml"
PYTHON = ROOT / ".venv-tumult" / "bin" / "python"
ADAPTER = ROOT / "synth" / "adapters" / "tumult_tables.py"
@pytest.fixture(autouse=True)
def _environment():
    environment(PYTHON.parents[1] / ".installed", "make tumult-env (needs Java)")


def _program(over, adapter=ADAPTER, runs=None):
    spec = f"{{name: tumult, command: [{PYTHON}, {adapter}], noise: laplace, calls: batch, single_runs: 10" + (
        f", audit_runs: {runs}" if runs else "") + "}"  # a Spark job per call: batches, and 10 one per call
    return load_config(CONFIG, over + [f"release.programs=[{spec}]"])


def test_the_tumult_adapter_releases_the_declared_tables_with_integer_noise(program_agency):
    d, over = program_agency
    cfg = _program(over)
    pop = load_population(cfg)
    unit = select_units(pop, cfg)[0]
    prob = resolve(cfg, pop).prepare(unit, True, pad_blocks=False)
    lay = unit_layout(resolve(cfg, pop), unit, True)
    inputs = program_inputs(prob.private, unit, lay, resolve(cfg, pop).blocks(unit)[0], prob.areas)
    y = run_program(cfg, cfg.release.programs[0], inputs, 2.0, 40, 0)
    exact = workload_counts(prob.private, lay.workload)[lay.rows["query"].to_numpy()]
    noise = y - exact[None, :]
    assert y.shape == (40, len(lay.rows)) and np.array_equal(noise, np.rint(noise))
    # 4 tables, ε = 2: each table gets 0.5, a count's two-sided geometric noise has mean |x| about 1.9
    assert 1.0 < np.abs(noise).mean() < 3.0 and len(np.unique(noise[:, 0])) > 2


def test_a_table_with_overlapping_cells_is_refused_with_its_name(program_agency):
    d, over = program_agency
    cfg = _program(over + ["queries={kind: tables, tables: [{name: T, level: block, partial: true, "
                           "by: [{AGE: [[0, 17], [10, 64]]}]}]}"])
    pop = load_population(cfg)
    with pytest.raises(ConfigError, match="table T has cells that overlap"):
        audit_release(resolve(cfg, pop), seed=1)


@pytest.mark.slow(seconds=300)
def test_a_copy_of_the_tumult_adapter_with_half_the_noise_fails_its_black_box_audit(program_agency, tmp_path):
    """Slow (Spark: minutes for its batches of 300 releases): the adapter passes; a copy of its file that gives each table
    twice its share of ε (half the noise) fails on noise_scale."""
    d, over = program_agency
    ok = audit_release(resolve(_program(over, runs=300), load_population(_program(over))), seed=2)
    assert ok[0].passed, ok[0].checks_summary()
    source = ADAPTER.read_text()
    halved = source.replace("share = epsilon / len(tables)", "share = 2 * epsilon / len(tables)").replace(
        "PureDPBudget(epsilon)", "PureDPBudget(2 * epsilon)")
    assert halved != source and len(re.findall("2 \\* epsilon", halved)) == 2
    copy = tmp_path / "tumult_tables.py"
    copy.write_text(halved)
    (tmp_path / "contract.py").write_text((ADAPTER.parent / "contract.py").read_text())
    bad = audit_release(resolve(_program(over, copy, runs=300), load_population(_program(over))), seed=2)
    assert not bad[0].passed and bad[0].checks["noise_scale"].startswith("fail"), bad[0].checks_summary()
