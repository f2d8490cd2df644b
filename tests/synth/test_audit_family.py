"""Audit families are values: a new noise law brings its family in one file, registered by name, and a mechanism
that names it is audited end to end by it (this file is that one file: a toy family for a toy mechanism)."""

from pathlib import Path

import numpy as np
import pytest

from censusrecon.experiments.config import load_config
from censusrecon.experiments.problem import resolve
from censusrecon.experiments.release.audit import audit_release
from censusrecon.microdata.seeds import stable_seed
from censusrecon.synth import registry
from censusrecon.synth.audit.checks import combine_units
from censusrecon.synth.audit.families import AuditFamily, FamilyCall, family, family_names, register_family
from censusrecon.synth.audit.jobs import audit_level
from censusrecon.synth.audit.source import AuditSpec
from censusrecon.synth.audit.neighbours import drop_row
from censusrecon.synth.audit.statistics import AuditResult, audit_outputs, laplace_scale_upper
from censusrecon.synth.publishing import Published
from censusrecon.synth.publishing import Draw

ROOT = Path(__file__).resolve().parents[2]

# ---- the toy noise law: a unit's head count with two-sided geometric noise (discrete Laplace of scale 1/ε) -------

#: the share of ε the toy's noise is drawn for: 1 is honest, 3 a bug (noise for 3ε, spending three times ε)
SPENT = {"share": 1.0}


def publish_noisy_total(x):
    """The unit's number of persons plus discrete Laplace noise at ε = the setting (sensitivity 1 under
    add/remove): one published count."""
    p = 1 - np.exp(-x.setting * SPENT["share"])
    y = len(x.data) + int(x.rng.geometric(p) - x.rng.geometric(p))
    return Published("noisy_total", None, np.array([y]), None, ("total",), False, "a toy", counts=np.array([float(y)]))


NOISY_TOTAL = registry.MechanismKind("noisy_total", "A noisy head count", publish_noisy_total,
                                     relations=("add_remove",), audit="total_count")


def audit_total(call: FamilyCall) -> AuditResult:
    """The toy family: each unit's D and D less one person, ``release.audit.runs`` releases of each through the
    mechanism's own publishing function; the statistical bound on ε, and the noise's scale bounded above from
    its draws (ε spent = 1 / scale, which must not exceed the declared ε)."""
    src, mech, eps = call.src, call.mechanism, call.epsilon
    a = src.spec.audit
    results = []
    for unit in call.units:
        D = src.prepare(unit, call.with_block).private
        workload = src.workload(src.spec.published, D.domain)
        rng = np.random.default_rng(stable_seed("toy-total", call.seed, unit, eps))
        ys = [np.array([src.publish(mech, eps, data, workload, Draw(None, rng)).counts for _ in range(a.runs)])
              for data in (D, drop_row(D, 0))]
        res = audit_outputs(ys[0], ys[1], np.array([len(D)]), np.array([-1]), eps, mech, a.confidence)
        spent = 1 / laplace_scale_upper(ys[0][:, 0] - len(D), a.confidence)
        check = "pass" if spent <= eps else f"fail: its noise spends ε ≥ {spent:.3g}, over the declared {eps:g}"
        results.append(AuditResult(mech, eps, res.epsilon_lower_bound, a.runs, a.confidence, res.event,
                                   {"noise_scale": check}, {"unit": unit}))
    return combine_units(mech, eps, results)


TOTAL_COUNT = register_family(AuditFamily("total_count", (0, 2), audit_total,
                                          "a noisy head count: its bound and its noise's scale"))


# ---- the tests -----------------------------------------------------------------------------------------------------

@pytest.fixture
def noisy_total():
    registry.register(NOISY_TOTAL, replace=True)
    SPENT["share"] = 1.0
    yield
    SPENT["share"] = 1.0
    registry.unregister(NOISY_TOTAL.name)


def _cfg(*extra):
    return load_config(ROOT / "configs" / "release_tiny.yaml",
                       ["release.mechanisms=[noisy_total]", "release.relation=add_remove", "release.epsilons=[1.0]",
                        "release.audit.runs=3000", "release.audit.seed=3", "target.units=1", *extra])


def test_a_family_registered_in_one_file_audits_its_mechanism_end_to_end(noisy_total):
    assert "total_count" in family_names() and family("total_count") is TOTAL_COUNT
    assert set(family_names()[:6]) == {"tables", "fitted_tables", "histogram", "smoothed", "tree", "program"}
    cfg = _cfg()
    [res] = audit_release(resolve(cfg))
    assert res.mechanism == "noisy_total" and res.outcome == "passed", res.checks_summary()
    assert res.checks["noise_scale"] == "pass" and 0 <= res.epsilon_lower_bound <= 1.0
    assert res.details["published_through"] == "noisy_total" and res.details["audit_seed"] == 3
    # the audit's level counts the family's own tests: 2 per unit, one result, false_alarm / 2
    assert audit_level(AuditSpec.of(cfg), 1).audit.confidence == pytest.approx(1 - cfg.release.audit.false_alarm / 2)


def test_the_toy_family_fails_a_mechanism_that_spends_more_than_it_declares(noisy_total):
    SPENT["share"] = 3.0  # noise drawn for 3ε: the check must see it
    [res] = audit_release(resolve(_cfg()))
    assert res.outcome == "failed" and res.checks["noise_scale"].startswith("fail: its noise spends ε ≥ "), \
        res.checks_summary()


def test_a_mechanism_naming_no_registered_family_is_refused_when_registered():
    odd = registry.MechanismKind("odd_total", "An odd head count", publish_noisy_total, relations=("add_remove",),
                                 audit="no_such_family")
    with pytest.raises(ValueError, match="'odd_total' is DP: no audit family is named 'no_such_family'; the "
                                         "registered ones: .*fitted_tables"):
        registry.register(odd)
    assert "odd_total" not in registry.names()


def test_a_family_value_is_checked_when_built_and_a_name_is_not_taken_twice():
    with pytest.raises(ValueError, match="at least one test"):
        AuditFamily("empty", (0, 0), audit_total, "")
    with pytest.raises(ValueError, match="letters, digits"):
        AuditFamily("a family", (0, 1), audit_total, "")
    with pytest.raises(ValueError, match="an audit family named 'tables' is already registered"):
        register_family(AuditFamily("tables", (0, 6), audit_total, "another"))
    with pytest.raises(ValueError, match="'tables' is built in"):
        __import__("censusrecon.synth.audit.families", fromlist=["FAMILIES"]).FAMILIES.unregister("tables")
    assert register_family(TOTAL_COUNT) is TOTAL_COUNT  # the same value again is no change


def test_every_registered_dp_mechanism_names_a_registered_family():
    names = set(family_names())
    assert {registry.mechanism(m).audit for m in registry.names() if registry.mechanism(m).dp} <= names
