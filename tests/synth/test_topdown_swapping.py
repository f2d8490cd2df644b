"""TopDown: integer, non-negative, consistent at every level, invariants exact. Swapping: rate 0 is the
exact tables, rate r swaps a share r, and it is labelled not DP."""

import numpy as np
import pytest

from microdata.dataset import Dataset
from microdata.domain import Attribute, Domain
from synth.noise import SimulationNoise
from synth.swapping import NOT_DP, swap_records
from synth.topdown import Tree, estimate, level_shares, measure


def _tree(rng, parents=(3, 4), cells=6):
    """root -> 3 units -> 4 blocks each, exact counts consistent up the tree."""
    n_units, per = parents
    blocks = rng.integers(0, 9, size=(n_units * per, cells))
    units = blocks.reshape(n_units, per, cells).sum(axis=1)
    root = units.sum(axis=0, keepdims=True)
    return Tree(["county", "tract", "block"], [np.array(["r"]), np.arange(n_units).astype(str),
                                                np.arange(n_units * per).astype(str)],
                [np.array([-1]), np.zeros(n_units, int), np.repeat(np.arange(n_units), per)],
                [root, units, blocks], total_queries=np.array([0]))


@pytest.mark.parametrize("eps", [0.1, 1.0, 10.0])
def test_topdown_output_is_integer_non_negative_consistent_and_keeps_invariants(eps):
    rng = np.random.default_rng(0)
    tree = _tree(rng)
    noisy, mech = measure(tree, eps, SimulationNoise(1), "add_remove", cells_per_person=3, invariants=("root_total",))
    est = estimate(tree, noisy)
    for lv, e in enumerate(est):
        assert e.dtype == np.int64 and e.shape == tree.counts[lv].shape and (e >= 0).all()
        if lv:
            sums = np.zeros_like(est[lv - 1])
            np.add.at(sums, tree.parent[lv], e)
            assert np.array_equal(sums, est[lv - 1])  # every child sum equals its parent, in every cell
    assert est[0][0, 0] == tree.counts[0][0, 0]  # the declared invariant is exact
    assert sum(v["epsilon"] for v in mech.details["levels"].values()) == pytest.approx(eps)
    assert mech.details["invariants"] == ["root_total"]
    # the estimates use the parents: the blocks come out no worse than their own noisy measurements
    assert np.abs(est[2] - tree.counts[2]).mean() <= np.abs(noisy[2] - tree.counts[2]).mean() + 0.25


def test_level_shares_are_the_2020_production_split_renormalised():
    s = level_shares(["county", "tract", "block"])
    assert s["tract"] / s["county"] == pytest.approx(687 / 447) and sum(s.values()) == pytest.approx(1.0)
    assert level_shares(["a", "b"], {"a": 1, "b": 3}) == {"a": 0.25, "b": 0.75}


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
