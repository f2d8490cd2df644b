import itertools

import numpy as np
import pytest
from scipy.stats import chisquare

from censusrecon.microdata.dataset import Dataset
from censusrecon.microdata.domain import Domain
from censusrecon.microdata.marginals import Workload, marginal_counts
from censusrecon.synth.audit.statistics import audit, neighbouring_counts
from censusrecon.synth.histogram import (perturbed_histogram, smoothed_delta, smoothed_epsilon, smoothed_histogram,
                             smoothed_worst_case_epsilon)
from censusrecon.synth.mechanism import (Ledger, PrivacyError, Relation, check_counts, checked_add, histogram_sensitivity,
                             marginal_sensitivity)
from censusrecon.synth.noise import OpenDPNoise, SimulationNoise, discrete_laplace_pmf
from censusrecon.synth.release import laplace_tables

DOM = Domain.from_sizes({"A": 3, "B": 2, "C": 4})


def _random_neighbours(rng, relation, n=12):
    codes = np.stack([rng.integers(0, s, n) for s in DOM.sizes], axis=1)
    other = np.array([rng.integers(0, s) for s in DOM.sizes])[None, :]
    if relation is Relation.REPLACE_ONE:
        codes2 = codes.copy()
        codes2[rng.integers(0, n)] = other
    else:
        codes2 = np.concatenate([codes, other])
    return Dataset(DOM, codes), Dataset(DOM, codes2)


@pytest.mark.parametrize("relation", list(Relation))
def test_declared_sensitivities_bound_random_neighbours_and_are_attained(relation):
    rng = np.random.default_rng(0)
    work = Workload.all_kway(DOM, 2, lower=True)
    declared_tables = marginal_sensitivity(DOM, work.marginals, relation)
    declared_hist = histogram_sensitivity(relation, DOM.total_size)
    seen_tables = seen_hist = 0
    for _ in range(400):
        a, b = _random_neighbours(rng, relation)
        ca = np.concatenate([marginal_counts(a, m) for m in work.marginals])
        cb = np.concatenate([marginal_counts(b, m) for m in work.marginals])
        seen_tables = max(seen_tables, int(np.abs(ca - cb).sum()))
        ha = np.bincount(a.keys(), minlength=DOM.total_size)
        hb = np.bincount(b.keys(), minlength=DOM.total_size)
        seen_hist = max(seen_hist, int(np.abs(ha - hb).sum()))
    assert seen_tables == declared_tables  # bounded, and tight for some pair
    assert seen_hist == declared_hist
    factor = 2 if relation is Relation.REPLACE_ONE else 1
    assert declared_tables == factor * len(work.marginals)  # the factor is computed, here checked


def test_sensitivity_composes_over_geographic_levels_and_skips_constant_tables():
    d = Domain.from_sizes({"A": 1, "B": 3})
    assert marginal_sensitivity(d, [("A",), ("B",)], "replace_one") == 2  # A never differs
    assert marginal_sensitivity(d, [("A",), ("B",)], "add_remove", levels=2) == 4
    with pytest.raises(PrivacyError, match="unknown neighbouring relation"):
        marginal_sensitivity(d, [("A",)], "swap")


@pytest.mark.parametrize("scale", [0.7, 2.0, 6.0])
def test_simulation_sampler_matches_the_discrete_laplace_pmf(scale):
    x = SimulationNoise(1).sample(scale, 200_000)
    assert x.dtype == np.int64
    _chi_square(x, scale)


@pytest.mark.parametrize("scale", [1.0, 4.0])
def test_opendp_sampler_matches_the_discrete_laplace_pmf(scale):
    pytest.importorskip("opendp")
    _chi_square(OpenDPNoise().sample(scale, 30_000), scale)


def _chi_square(x, scale):
    lim = int(np.ceil(4 * scale)) + 1
    support = np.arange(-lim, lim + 1)
    p = discrete_laplace_pmf(support, scale)
    p = np.concatenate([[1 - p.sum()], p])  # one bin for the tails beyond ±lim
    obs = np.concatenate([[np.sum(np.abs(x) > lim)], [(x == v).sum() for v in support]])
    assert chisquare(obs, p * len(x)).pvalue > 1e-3
    # and a wrong scale is rejected by the same test
    q = discrete_laplace_pmf(support, scale * 1.3)
    q = np.concatenate([[1 - q.sum()], q])
    assert chisquare(obs, q * len(x)).pvalue < 1e-6


def test_opendp_backend_refuses_a_seed_and_records_contrib():
    pytest.importorskip("opendp")
    with pytest.raises(PrivacyError, match="refuses a seed"):
        OpenDPNoise(seed=3)
    b = OpenDPNoise()
    assert b.contrib and b.for_publication


def test_release_path_is_int64_and_overflow_checked():
    with pytest.raises(PrivacyError, match="integers"):
        check_counts(np.array([1.5, 2.0]))
    with pytest.raises(PrivacyError, match="overflow"):
        checked_add(np.array([np.iinfo(np.int64).max]), np.array([1]))
    noisy = SimulationNoise(0).add(np.array([3, 0, 7]), 2.0)
    assert noisy.dtype == np.int64


def _count_release(scale, seed=0):
    noise = SimulationNoise(seed)

    def release(counts, runs):
        return counts[None, :] + noise.sample(scale, runs * counts.size).reshape(runs, counts.size)

    return release


@pytest.mark.parametrize("relation", list(Relation))
def test_auditor_passes_correct_mechanisms(relation):
    eps = 1.0
    d, d2 = neighbouring_counts(relation, 4)
    scale = histogram_sensitivity(relation, 4) / eps
    res = audit(_count_release(scale), d, d2, eps, "perturbed_histogram", runs=200_000)
    assert res.epsilon_lower_bound <= eps
    assert res.epsilon_lower_bound > 0.8 * eps  # the auditor is not vacuous: it nearly attains ε


def test_auditor_catches_add_remove_noise_under_replace_one_neighbours():
    eps = 1.0
    d, d2 = neighbouring_counts(Relation.REPLACE_ONE, 4)
    wrong = histogram_sensitivity(Relation.ADD_REMOVE, 4) / eps  # half the noise replace-one needs
    assert audit(_count_release(wrong), d, d2, eps, "broken", runs=200_000).epsilon_lower_bound > eps


def test_auditor_catches_25_percent_too_little_noise():
    eps = 1.0
    d, d2 = neighbouring_counts(Relation.REPLACE_ONE, 4)
    wrong = 0.75 * histogram_sensitivity(Relation.REPLACE_ONE, 4) / eps
    assert audit(_count_release(wrong), d, d2, eps, "broken", runs=400_000).epsilon_lower_bound > eps


def test_smoothed_histogram_condition_and_its_exact_worst_case():
    counts = np.array([3, 0, 1, 6, 2], dtype=np.int64)
    n, m = int(counts.sum()), counts.size
    for eps, k in itertools.product([0.1, 1.0, 3.0], [1, 5, 20]):
        delta = smoothed_delta(eps, n, m, k)
        assert smoothed_epsilon(delta, n, m, k) == pytest.approx(eps)
        assert smoothed_worst_case_epsilon(counts, delta, k) <= eps + 1e-9
    # a smaller δ than the condition allows is caught by the exact computation
    assert smoothed_worst_case_epsilon(counts, smoothed_delta(1.0, n, m, 5) / 2, 5) > 1.0


def test_perturbed_histogram_sparse_path_matches_the_dense_one_in_law():
    dom = Domain.from_sizes({"A": 50, "B": 50})  # 2500 cells
    data = Dataset(dom, np.array([[1, 2]] * 30 + [[4, 4]] * 10))
    import censusrecon.synth.histogram as h

    dense_sizes, sparse_sizes = [], []
    for s in range(60):
        hist, mech = perturbed_histogram(data, 1.0, SimulationNoise(s))
        dense_sizes.append(len(hist.keys))
        old = h.DENSE_LIMIT
        h.DENSE_LIMIT = 10
        try:
            hs, _ = perturbed_histogram(data, 1.0, SimulationNoise(1000 + s))
        finally:
            h.DENSE_LIMIT = old
        sparse_sizes.append(len(hs.keys))
        assert hs.counts.min() > 0 and np.all(np.diff(hs.keys) > 0)
    # the number of cells with positive noisy count has the same mean either way
    assert abs(np.mean(dense_sizes) - np.mean(sparse_sizes)) < 4 * np.std(dense_sizes) / np.sqrt(60) + 2
    assert mech.sensitivity == 2 and mech.scale == pytest.approx(2.0)


def test_smoothed_histogram_release_and_ledger():
    rng = np.random.default_rng(0)
    data = Dataset(DOM, np.stack([rng.integers(0, s, 30) for s in DOM.sizes], axis=1))
    rows, mech = smoothed_histogram(data, 1.0, 30, rng)
    assert rows.shape == (30,) and rows.max() < DOM.total_size
    ledger = Ledger()
    ledger.record(mech, backend="simulation", for_publication=False)
    t, m2 = laplace_tables(data, Workload.all_kway(DOM, 2), 0.5, SimulationNoise(0))
    ledger.record(m2, backend="simulation", for_publication=False)
    assert ledger.total_epsilon() == pytest.approx(1.5)
    assert ledger.entries[1]["relation"] == "replace_one" and ledger.entries[1]["sensitivity"] == 6
    assert t.counts.dtype == np.int64
    assert sum(m2.details["epsilon_per_table"].values()) == pytest.approx(0.5)


def test_laplace_tables_with_the_opendp_backend():
    pytest.importorskip("opendp")
    rng = np.random.default_rng(0)
    data = Dataset(DOM, np.stack([rng.integers(0, s, 30) for s in DOM.sizes], axis=1))
    tables, mech = laplace_tables(data, Workload.all_kway(DOM, 2), 1.0, OpenDPNoise(), "add_remove")
    assert tables.counts.dtype == np.int64 and mech.sensitivity == 3 and mech.scale == pytest.approx(3.0)
    assert tables.answers().sum() == pytest.approx(3.0)  # three tables, each normalised


@pytest.mark.parametrize("relation", list(Relation))
def test_census_table_sensitivity_bounds_random_neighbours(relation):
    from censusrecon.microdata.census import CensusWorkload, sf1_tables
    from censusrecon.microdata.domain import Attribute

    dom = Domain((Attribute.range("BLOCK", 2), Attribute.range("AGE", 116), Attribute.range("SEX", 2),
                  Attribute.range("HISP", 2), Attribute.range("CENRACE", 63)))
    t = sf1_tables()
    w = CensusWorkload.build(dom, t["P1"] + t["P8"] + t["P12"] + t["PCT12"])
    rng = np.random.default_rng(1)
    _, mech = laplace_tables(Dataset(dom, np.zeros((3, 5), dtype=np.int64)), w, 1.0, SimulationNoise(0), relation)
    seen = 0
    for _ in range(300):
        codes = np.stack([rng.integers(0, s, 10) for s in dom.sizes], axis=1)
        other = np.array([[rng.integers(0, s) for s in dom.sizes]])
        if relation is Relation.REPLACE_ONE:
            codes2 = codes.copy()
            codes2[0] = other
        else:
            codes2 = np.concatenate([codes, other])
        diff = np.abs(w.counts(Dataset(dom, codes)) - w.counts(Dataset(dom, codes2))).sum()
        seen = max(seen, int(diff))
    assert 0 < seen <= mech.sensitivity


def test_a_scale_the_sampler_cannot_represent_and_an_epsilon_below_the_floor_are_refused():
    from censusrecon.synth.mechanism import MAX_SCALE, MIN_EPSILON, laplace_scale

    noise = SimulationNoise(0)
    for scale in (1e19, 1e25, float("inf"), 0.0, -1.0):
        with pytest.raises(PrivacyError, match="noise scale"):
            noise.sample(scale, 3)
    assert np.abs(noise.sample(MAX_SCALE, 1000)).max() > 0  # the largest accepted scale still adds noise
    with pytest.raises(PrivacyError, match="epsilon must be"):
        laplace_scale(2, MIN_EPSILON / 2)
    with pytest.raises(PrivacyError, match="noise scale"):  # ε above the floor but Δ/ε too large
        laplace_scale(10**9, 1e-5)
    data = Dataset(DOM, np.zeros((3, 3), np.int64))
    with pytest.raises(PrivacyError):
        laplace_tables(data, Workload.all_kway(DOM, 2), 1e-30, noise)


def test_scales_and_deltas_are_rounded_so_epsilon_never_exceeds_the_declared_value():
    from censusrecon.synth.mechanism import laplace_scale

    for delta_l1 in range(1, 200):
        for eps in (0.01, 0.1, 0.3, 0.7, 1.0, 1.1, 3.0, 10.0):
            assert delta_l1 / laplace_scale(delta_l1, eps) <= eps
    worst = 0.0
    for eps in (0.05, 0.1, 0.3, 1.0, 3.0):
        for n in (1, 7, 100, 1000):
            for cells in (2, 10, 1000, 10**6):
                for rows in (1, 10, 100, 1000):
                    worst = max(worst, smoothed_epsilon(smoothed_delta(eps, n, cells, rows), n, cells, rows) / eps)
    assert worst <= 1.0


def test_with_opendp_the_scale_satisfies_opendps_own_privacy_map_and_the_ledger_records_it():
    pytest.importorskip("opendp")
    from censusrecon.synth.noise import noise_scale

    b = OpenDPNoise()
    assert b.privacy_map(12 / 0.3, 12) > 0.3  # the plain Δ/ε overshoots in OpenDP's own arithmetic
    scale, figure = noise_scale(12, 0.3, b)
    assert figure <= 0.3 and b.privacy_map(scale, 12) <= 0.3
    data = Dataset(DOM, np.zeros((3, 3), np.int64))
    _, mech = laplace_tables(data, Workload.all_kway(DOM, 2), 0.3, b)
    assert mech.details["backend_epsilon"] <= 0.3


def test_the_ledger_never_adds_epsilon_across_relations():
    from censusrecon.synth.mechanism import Mechanism

    ledger = Ledger()
    ledger.record(Mechanism("laplace_tables", "replace_one", 2, 1.0, 2.0), "x", False, unit="a")
    ledger.record(Mechanism("synthetic", "replace_one", 2, 0.5, 4.0), "x", False, unit="a")
    assert ledger.total_epsilon(unit="a") == 1.5
    ledger.record(Mechanism("laplace_tables", "add_remove", 1, 1.0, 1.0), "x", False, unit="a")
    with pytest.raises(PrivacyError, match="across neighbouring relations"):
        ledger.total_epsilon(unit="a")
    assert ledger.total_epsilon(unit="a", relation="add_remove") == 1.0


def test_table_utility_on_hand_made_tables():
    from censusrecon.synth.release import table_utility

    w = Workload(DOM, (("A",), ("B",)))  # 3 cells, then 2 cells
    exact = np.array([10, 0, 5, 7, 8])
    published = np.array([12, 1, 5, 7, 0])
    rows = {r["table"]: r for r in table_utility(published, exact, w)}
    assert rows["A"]["mae_per_cell"] == pytest.approx(1.0)  # |2| + |1| + 0 over 3 cells
    assert rows["A"]["share_off_10pct"] == pytest.approx(2 / 3)  # 12 vs 10 is 20% off; the empty cell got 1
    assert rows["B"]["mae_per_cell"] == 4.0 and rows["B"]["share_off_10pct"] == 0.5
    assert {r["level"] for r in rows.values()} == {"unit"}


def test_n_is_estimated_from_a_total_a_partition_or_refused():
    from censusrecon.microdata.census import Cell, CensusWorkload
    from censusrecon.microdata.domain import Attribute
    from censusrecon.synth.release import estimate_total, total_queries

    dom = Domain((Attribute.range("BLOCK", 2), Attribute.range("S", 2), Attribute.range("R", 3)))

    def cells(*specs):
        return [Cell(t, i + 1, "c", tuple(sorted(sets.items())), level) for t, level, cs in specs
                for i, sets in enumerate(cs)]

    by_sex = ("SEX", "block", [{"S": frozenset({0})}, {"S": frozenset({1})}])
    partial = ("R0", "block", [{"R": frozenset({0})}])
    w = CensusWorkload.build(dom, cells(by_sex, partial))
    groups = total_queries(w)
    assert len(groups) == 1 and len(groups[0]) == 4  # SEX in both blocks partitions everyone; R0 does not
    assert estimate_total(w, np.array([3, 4, 5, 6, 100, 100])[: w.num_queries]) == 3 + 4 + 5 + 6
    with_total = CensusWorkload.build(dom, cells(("TOT", "tract", [{}]), by_sex))
    noisy = np.zeros(with_total.num_queries, dtype=np.int64)
    noisy[0] = 42
    assert estimate_total(with_total, noisy) == 42  # the published total alone
    with pytest.raises(PrivacyError, match="n cannot be estimated"):
        total_queries(CensusWorkload.build(dom, cells(partial)))


def test_an_audit_says_exactly_what_was_checked():
    """A check with nothing to check, or covering a declared invariant, is neither a failure nor "all pass"; a check
    that could have failed and did not run makes the audit inconclusive, never passed."""
    from censusrecon.synth.audit.statistics import AuditResult

    ok = AuditResult("m", 1.0, 0.4, 1000, 0.95, "e", {"structure": "pass", "noise_scale": "pass",
                                                      "block_list": "declared invariant: occupied_blocks"})
    assert ok.passed and ok.checks_summary() == ("pass: structure, noise_scale; block_list declared invariant: "
                                                 "occupied_blocks")
    lone = AuditResult("m", 1.0, 0.4, 1000, 0.95, "e", {"block_list": "not applicable: one block"})
    assert lone.passed and lone.checks_summary() == "block_list not applicable: one block"
    unrun = AuditResult("m", 1.0, 0.4, 1000, 0.95, "e", {"noise_scale": "pass", "accounting": "not run: no OpenDP"})
    assert unrun.outcome == "inconclusive" and not unrun.passed and not unrun.failed_checks()
    assert unrun.checks_summary() == "pass: noise_scale; NOT RUN accounting: no OpenDP"
    assert unrun.as_dict()["outcome"] == "inconclusive" and unrun.as_dict()["passed"] is False
    both = AuditResult("m", 1.0, 0.4, 1000, 0.95, "e", {"noise_scale": "fail: ε ≥ 2", "accounting": "not run: x"})
    assert both.outcome == "failed"  # a failure outranks a check that did not run
    bad = AuditResult("m", 1.0, 0.4, 1000, 0.95, "e", {"structure": "pass", "noise_scale": "fail: ε ≥ 1.3"})
    assert not bad.passed and bad.checks_summary() == "FAILED noise_scale: fail: ε ≥ 1.3"
    assert not AuditResult("m", 1.0, 1.2, 1000, 0.95, "e", {"structure": "pass"}).passed  # the bound exceeds ε
