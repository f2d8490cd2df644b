"""TopDown: integer, non-negative, consistent at every level, invariants exact. Swapping: rate 0 is the
exact tables, rate r swaps a share r, and it is labelled not DP."""

import dataclasses
from fractions import Fraction

import numpy as np
import pytest
import scipy.sparse as sp

from censusrecon.microdata.dataset import Dataset
from censusrecon.microdata.domain import Attribute, Domain
from censusrecon.synth.noise import SimulationNoise
from censusrecon.synth.swapping import NOT_DP, swap_records
from censusrecon.synth.mechanism import PrivacyError
from censusrecon.synth.topdown import (Strategy, TopDownPrivacy, TreeShape, budgets, build_tree, check_consistent, estimate, level_shares, mdf_rows,
                           measure, round_keeping_sums)


def _setup(rng, n_units=3, per=4, types=12):
    """root -> 3 units -> 4 blocks each over 12 person types; two tables: a partition of the types in
    thirds and the total."""
    shape = TreeShape(["county", "tract", "block"], [np.array(["r"]), np.arange(n_units).astype(str),
                                                      np.arange(n_units * per).astype(str)],
                      [np.array([-1]), np.zeros(n_units, int), np.repeat(np.arange(n_units), per)])
    leaf = rng.integers(0, 4, size=(n_units * per, types)) * (rng.random((n_units * per, types)) < 0.4)
    rows = np.concatenate([np.arange(types) // (types // 3), np.full(types, 3)])
    tables = sp.csr_matrix((np.ones(2 * types, np.int64), (rows, np.tile(np.arange(types), 2))), shape=(4, types))
    return build_tree(shape, leaf), Strategy(tables)


@pytest.mark.parametrize("eps", [0.1, 1.0, 10.0])
def test_topdown_output_is_integer_non_negative_consistent_and_keeps_invariants(eps):
    rng = np.random.default_rng(0)
    tree, strategy = _setup(rng)
    meas, mech = measure(tree, eps, SimulationNoise(1), strategy, TopDownPrivacy("replace_one", invariants=("root_total",)))
    est = estimate(tree.shape, meas, strategy)
    check_consistent(tree.shape, est)  # every child sum equals its parent, in every cell
    for lv, e in enumerate(est):
        assert e.dtype == np.int64 and e.shape == tree.hist[lv].shape and (e >= 0).all()
    assert est[0].sum() == tree.hist[0].sum()  # the declared invariant is exact
    assert Fraction(mech.details["epsilon_spent_exact"]) <= Fraction(repr(eps))
    assert mech.details["invariants"] == ["root_total"]
    # a child is positive only where its parent is: the block's types come from the parent's support
    assert ((est[2] > 0) <= (est[1][tree.shape.parent[2]] > 0)).all()


def test_high_epsilon_recovers_the_histograms_and_the_estimate_beats_the_noise():
    rng = np.random.default_rng(1)
    tree, strategy = _setup(rng)
    meas, _ = measure(tree, 1e4, SimulationNoise(2), strategy, TopDownPrivacy("add_remove"))
    est = estimate(tree.shape, meas, strategy)
    assert all(np.array_equal(e, h) for e, h in zip(est, tree.hist))
    meas, _ = measure(tree, 2.0, SimulationNoise(3), strategy, TopDownPrivacy("add_remove"))
    est = estimate(tree.shape, meas, strategy)
    assert np.abs(est[2] - tree.hist[2]).mean() < np.abs(meas.detailed[2] - tree.hist[2]).mean()


def test_mdf_rows_tabulate_to_the_leaf_histograms():
    leaf = np.array([[0, 2, 1], [3, 0, 0]])
    node, types = mdf_rows(leaf)
    back = np.zeros_like(leaf)
    np.add.at(back, (node, types), 1)
    assert np.array_equal(back, leaf) and len(node) == 6


def test_rounding_keeps_every_column_sum_and_is_l1_optimal():
    z = np.array([[0.6, 1.5, 0.0], [0.7, 0.25, 2.0], [0.7, 0.25, 1.0]])
    total = np.array([2, 2, 3])
    r = round_keeping_sums(z, total)
    assert r.sum(axis=0).tolist() == [2, 2, 3]
    best = min(np.abs(np.array(c) - z[:, 0]).sum() for c in ([1, 1, 0], [1, 0, 1], [0, 1, 1], [2, 0, 0]))
    assert np.abs(r[:, 0] - z[:, 0]).sum() == pytest.approx(best)


def test_root_total_is_refused_under_add_remove():
    tree, strategy = _setup(np.random.default_rng(0))
    with pytest.raises(PrivacyError, match="replace_one"):
        measure(tree, 1.0, SimulationNoise(1), strategy, TopDownPrivacy("add_remove", invariants=("root_total",)))


@pytest.mark.parametrize("relation", ["add_remove", "replace_one"])
def test_the_ledger_never_spends_more_than_epsilon_in_exact_arithmetic(relation):
    """A grid of ε, shares and level sets: Σ Δ/scale over every level and query ≤ ε, exactly."""
    _, strategy = _setup(np.random.default_rng(0))
    level_sets = [["county", "tract", "block"], ["state", "county", "tract", "block_group", "block"], ["x", "y"]]
    for eps in (1e-3, 0.1, 1 / 3, 0.7, 2.0, 8.0, 17.14):
        for levels in level_sets:
            for shares in (None, {lv: 0.1 * (i + 1) for i, lv in enumerate(levels)}, {lv: 1 / 3 for lv in levels}):
                if shares is None and "x" in levels:
                    continue
                for split in (Fraction(1, 4), Fraction(1, 3), Fraction(9, 10)):
                    bud = budgets(levels, eps, dataclasses.replace(strategy, detailed_share=split), TopDownPrivacy(relation, shares))
                    assert sum(b.spent() for b in bud) <= Fraction(repr(eps))
                    assert {b.level for b in bud} == set(levels)
    s = level_shares(["county", "tract", "block"])
    assert s["tract"] / s["county"] == Fraction(687, 447) and sum(s.values()) == 1


def _block_data(rng, n=400, blocks=8):
    dom = Domain((Attribute.range("BLOCK", blocks), Attribute.range("AGE", 116), Attribute.range("SEX", 2),
                  Attribute.range("RACE", 7)))
    codes = np.stack([rng.integers(0, blocks, n), rng.integers(0, 90, n), rng.integers(0, 2, n),
                      rng.choice(7, n, p=[.6, .2, .05, .05, .02, .05, .03])], axis=1)
    return Dataset(dom, codes)


def test_swapping_at_rate_zero_publishes_the_exact_data_and_at_rate_r_swaps_a_share_r():
    rng = np.random.default_rng(3)
    data = _block_data(rng)
    same, facts = swap_records(data, 0.0, rng)
    assert np.array_equal(same.codes, data.codes) and facts["records_swapped"] == 0
    for rate in (0.05, 0.2, 0.5):
        swapped, facts = swap_records(data, rate, np.random.default_rng(4))
        moved = (swapped.codes[:, 0] != data.codes[:, 0]).mean()
        assert abs(moved - rate) <= 0.02 + 2 / len(data), (rate, moved)  # within the pairing's rounding
        assert facts["share_swapped"] == pytest.approx(moved)
        # only blocks move; every other attribute, and the block sizes' total, stays
        assert np.array_equal(swapped.codes[:, 1:], data.codes[:, 1:])
        # partners match on sex and P12 age group: the tables by sex are unchanged per block pair sums
        assert np.bincount(swapped.codes[:, 2], minlength=2).tolist() == np.bincount(data.codes[:, 2], minlength=2).tolist()
    assert "not differentially private" in NOT_DP


def test_swapping_takes_records_unique_in_their_block_first():
    rng = np.random.default_rng(5)
    data = _block_data(rng, n=600)
    codes = data.codes
    _, inv, cnt = np.unique(codes, axis=0, return_inverse=True, return_counts=True)
    unique = cnt[inv.ravel()] == 1
    swapped, _ = swap_records(data, 0.1, np.random.default_rng(6))
    moved = swapped.codes[:, 0] != codes[:, 0]
    assert moved[unique].mean() > moved[~unique].mean()


def test_the_discrete_gaussian_sampler_follows_its_pmf():
    from censusrecon.synth.noise import SimulationNoise as Sim

    for sigma in (0.5, 3.0):
        x = Sim(0).sample_gaussian(sigma, 200_000)
        support = np.arange(-60, 61)
        pmf = np.exp(-support**2 / (2 * sigma**2))
        pmf /= pmf.sum()
        emp = np.array([(x == k).mean() for k in support])
        assert np.abs(emp - pmf).max() < 0.004, sigma
        assert abs(x.mean()) < 0.03


@pytest.mark.parametrize("relation", ["add_remove", "replace_one"])
def test_zcdp_budgets_never_exceed_the_rho_of_epsilon_delta_in_exact_arithmetic(relation):
    from censusrecon.synth.topdown import epsilon_of, rho_for

    _, strategy = _setup(np.random.default_rng(0))
    for eps in (0.1, 1.0, 2.0, 8.0, 17.14):
        for delta in (1e-10, 1e-5):
            rho = rho_for(eps, delta)
            assert epsilon_of(float(rho), delta) <= eps  # the conversion back never exceeds ε
            bud = budgets(["county", "tract", "block"], eps, strategy, TopDownPrivacy(relation, accounting="zcdp", delta=delta))
            assert sum(b.spent() for b in bud) <= rho and all(b.noise == "gaussian" for b in bud)
            # σ² = Δ₂² / (2ρ_q): the tables' squared L2 sensitivity is the cells a person lies in
            tab = [b for b in bud if b.query == "tables"][0]
            assert tab.sensitivity == strategy.cells_per_person() * (2 if relation == "replace_one" else 1)


def test_zcdp_topdown_is_consistent_and_records_rho_and_its_epsilon_delta():
    tree, strategy = _setup(np.random.default_rng(2))
    meas, mech = measure(tree, 4.0, SimulationNoise(1), strategy,
                         TopDownPrivacy("replace_one", accounting="zcdp", delta=1e-10, invariants=("root_total",)))
    est = estimate(tree.shape, meas, strategy)
    check_consistent(tree.shape, est)
    assert est[0].sum() == tree.hist[0].sum()
    assert mech.details["accounting"] == "zCDP" and mech.details["epsilon_at_delta"] <= 4.0


def test_targeted_swapping_takes_the_records_at_risk_first_and_swaps_them_with_another_areas():
    from censusrecon.synth.swapping import SwapRule, targeted_swap

    _D, _Dom = Dataset, Domain
    dom = Domain((Attribute("BLOCK", ("b1", "b2")), Attribute("SEX", ("M", "F")), Attribute("RACE", ("W", "B", "A"))))
    # block b1: two white men (not at risk) and one black woman (unique in her block: at risk); b2: two white women
    unit = _D(dom, np.array([[0, 0, 0], [0, 0, 0], [0, 1, 1], [1, 1, 0], [1, 1, 0]]))
    pool_dom = _Dom(dom.attributes[1:])
    pool = _D(pool_dom, np.array([[1, 2], [0, 0]]))  # another tract: an Asian woman, a white man
    out, facts = targeted_swap(unit, pool, 0.2, np.random.default_rng(0), SwapRule(("SEX", "RACE"), ("SEX",)))
    # 20% of 5 records: one swap, the record at risk, with the woman from the other area, in her block
    assert facts["records_at_risk"] == 1 and facts["records_swapped"] == 1 and facts["at_risk_swapped"] == 1
    assert out.codes[2].tolist() == [0, 1, 2] and np.array_equal(np.delete(out.codes, 2, 0), np.delete(unit.codes, 2, 0))
    none, facts = targeted_swap(unit, _D(pool_dom, np.array([[0, 0]])), 0.2, np.random.default_rng(0),
                                SwapRule(("SEX", "RACE"), ("SEX",)))
    assert facts["at_risk_swapped"] == 0 and facts["unpaired_targets"] >= 1  # no woman outside: she stays
    assert none.codes[2].tolist() == [0, 1, 1]
