import jax
import numpy as np
import pytest

from microdata.dataset import Dataset
from microdata.domain import Domain
from microdata.errors import CensusReconError
from microdata.marginals import Workload, answer
from reconstruct import rap as rap_mod
from reconstruct.queries import MarginalPlan
from reconstruct.rap import RAPSettings, rap_rank, run_rap


@pytest.fixture(scope="module")
def problem():
    dom = Domain.from_sizes({"A": 2, "B": 3, "C": 3})
    rng = np.random.default_rng(1)
    codes = np.stack([rng.integers(0, s, 12) for s in dom.sizes], axis=1)
    data = Dataset(dom, codes)
    w = Workload.all_kway(dom, 2)
    return data, w, MarginalPlan.build(w), answer(data, w)


def test_exact_recovery_on_noiseless_tiny_data(problem):
    data, w, plan, targets = problem
    s = RAPSettings(rows=48, steps=1500, learning_rate=0.3, batch=2)
    _, _, max_err, _ = run_rap(plan, targets, jax.random.key(0), np.arange(2), s)
    assert np.all(max_err < 1e-3), max_err


def test_rap_rank_recovers_all_rows_of_a_tiny_dataset_from_its_full_histogram():
    # all 3-way marginals of a 3-attribute domain are the full histogram: D is determined.
    dom = Domain.from_sizes({"A": 2, "B": 3, "C": 2})
    data = Dataset(dom, np.array([[0, 0, 0], [0, 0, 0], [1, 2, 1], [0, 1, 1], [1, 2, 1], [1, 0, 0]]))
    w = Workload.all_kway(dom, 3)
    res = rap_rank(MarginalPlan.build(w), answer(data, w), dom, jax.random.key(0), 8,
                   RAPSettings(rows=60, steps=800, batch=4))
    truth = set(data.keys().tolist())
    assert set(res.ranking.keys[: len(truth)].tolist()) == truth


def test_same_seed_same_ranking_and_runs_do_not_depend_on_K(problem):
    data, w, plan, targets = problem
    s = RAPSettings(rows=20, steps=50, batch=2)
    a = rap_rank(plan, targets, data.domain, jax.random.key(7), 4, s)
    b = rap_rank(plan, targets, data.domain, jax.random.key(7), 4, s)
    assert np.array_equal(a.ranking.keys, b.ranking.keys) and np.array_equal(a.codes, b.codes)
    c = rap_rank(plan, targets, data.domain, jax.random.key(7), 6, s)
    assert np.array_equal(c.codes[:4], a.codes)  # run k is fold_in(key, k) whatever K is
    d = rap_rank(plan, targets, data.domain, jax.random.key(8), 4, s)
    assert not np.array_equal(d.codes, a.codes)


def test_batching_does_not_change_the_runs(problem):
    data, w, plan, targets = problem
    one = rap_rank(plan, targets, data.domain, jax.random.key(3), 3, RAPSettings(rows=20, steps=30, batch=1))
    many = rap_rank(plan, targets, data.domain, jax.random.key(3), 3, RAPSettings(rows=20, steps=30, batch=3))
    assert np.array_equal(one.codes, many.codes)


def test_no_recompilation_when_fitting_twice_with_the_same_shapes(problem):
    data, w, plan, targets = problem
    s = RAPSettings(rows=16, steps=20, batch=2, steps_per_call=10)
    rap_rank(plan, targets, data.domain, jax.random.key(0), 2, s)
    before = rap_mod.TRACE_COUNT["n"]
    other_targets = answer(Dataset(data.domain, data.codes[:6]), w)  # new answers, same shapes
    rap_rank(plan, other_targets, data.domain, jax.random.key(1), 4, s)
    assert rap_mod.TRACE_COUNT["n"] == before


def test_error_sampled_step_and_baseline_initialisation(problem):
    data, w, plan, targets = problem
    s = RAPSettings(rows=24, steps=400, sampling="error", queries_per_step=8, batch=2)
    res = rap_rank(plan, targets, data.domain, jax.random.key(0), 2, s, init_pool=data.codes)
    assert res.codes.shape == (2, 24, 3)
    assert res.max_abs_error.max() < 0.05
    with pytest.raises(CensusReconError, match="init_pool is empty"):
        rap_rank(plan, targets, data.domain, jax.random.key(0), 2, s, init_pool=np.zeros((0, 3), int))


def test_initialisation_from_a_pool_starts_near_its_rows(problem):
    data, w, plan, targets = problem
    pool = np.tile(data.codes[:1], (5, 1))  # a pool holding one row only
    s = RAPSettings(rows=10, steps=1, learning_rate=1e-6, init_confidence=0.99, batch=1)
    res = rap_rank(plan, targets, data.domain, jax.random.key(0), 1, s, init_pool=pool)
    assert (res.codes[0] == data.codes[0]).all(axis=1).mean() > 0.8


def test_settings_validation(problem):
    data, w, plan, targets = problem
    with pytest.raises(CensusReconError, match="sampling must be"):
        RAPSettings(sampling="adaptive")
    with pytest.raises(CensusReconError, match="init_confidence"):
        RAPSettings(init_confidence=1.0)
    with pytest.raises(CensusReconError, match="targets must have"):
        rap_rank(plan, targets[:-1], data.domain, jax.random.key(0), 1, RAPSettings(rows=4, steps=1))
