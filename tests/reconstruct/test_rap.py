import logging

import jax
import numpy as np
import pytest

from censusrecon.microdata.dataset import Dataset
from censusrecon.microdata.domain import Domain
from censusrecon.microdata.errors import CensusReconError
from censusrecon.microdata.marginals import Workload, answer
from censusrecon.reconstruct import rap as rap_mod
from censusrecon.reconstruct.queries import MarginalPlan
from censusrecon.reconstruct.rap import RAPSettings, rap_rank, run_rap


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
    _, _, max_err = run_rap(plan, targets, jax.random.key(0), np.arange(2), s)
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


def test_no_recompilation_when_fitting_twice_with_the_same_shapes(problem, caplog):
    data, w, plan, targets = problem
    s = RAPSettings(rows=16, steps=20, batch=2, steps_per_call=10)
    rap_rank(plan, targets, data.domain, jax.random.key(0), 2, s)
    before = rap_mod.TRACE_COUNT["n"]
    other_targets = answer(Dataset(data.domain, data.codes[:6]), w)  # new answers, same shapes
    with jax.log_compiles(True), caplog.at_level(logging.WARNING):
        rap_rank(plan, other_targets, data.domain, jax.random.key(1), 4, s)
    assert rap_mod.TRACE_COUNT["n"] == before
    # nothing at all is compiled again, helpers included (a jit built inside the call would be)
    compiled = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Compiling")]
    assert not compiled, compiled


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
    with pytest.raises(CensusReconError, match="precision must be"):
        RAPSettings(precision="float16")


def test_many_units_share_calls_and_each_gets_the_runs_it_gets_alone(problem):
    data, w, plan, targets = problem
    units = [targets, answer(Dataset(data.domain, data.codes[:6]), w), answer(Dataset(data.domain, data.codes[5:]), w)]
    keys = [jax.random.key(10 + u) for u in range(3)]
    pools = [data.codes, data.codes[:4], data.codes[2:9]]  # pools of different sizes share the program
    s = RAPSettings(rows=12, steps=40, batch=4, steps_per_call=20)
    together = rap_mod.rap_rank_units(plan, units, data.domain, keys, 3, s, init_pools=pools)
    before = rap_mod.TRACE_COUNT["n"]
    again = rap_mod.rap_rank_units(plan, units[::-1], data.domain, keys[::-1], 3, s, init_pools=pools[::-1])
    assert rap_mod.TRACE_COUNT["n"] == before  # 9 runs in 3 calls of 4 (one call spans two units), no retrace
    for u in range(3):
        alone = rap_rank(plan, units[u], data.domain, keys[u], 3, s, init_pool=pools[u])
        if jax.default_backend() == "cpu":  # bit for bit: XLA:CPU computes a pair the same in any batch
            assert np.array_equal(together[u].codes, alone.codes)
            assert np.array_equal(again[2 - u].codes, alone.codes)
        else:  # a GPU picks its matmul algorithm per batch shape (3 pairs alone, 4 together): float rounding
            assert (together[u].codes == alone.codes).all(axis=-1).mean() > 0.9
            assert (again[2 - u].codes == alone.codes).all(axis=-1).mean() > 0.9
    assert not np.array_equal(together[0].codes, together[1].codes)
    with pytest.raises(CensusReconError, match="one key per unit"):
        rap_mod.rap_rank_units(plan, units, data.domain, keys[:2], 3, s)


def test_bfloat16_fit_reaches_the_targets_or_falls_back(problem):
    data, w, plan, targets = problem
    s = RAPSettings(rows=48, steps=1500, batch=2, precision="bfloat16")
    assert rap_mod.matmul_dtype(s) in ("bfloat16", "float32")
    _, _, max_err = run_rap(plan, targets, jax.random.key(0), np.arange(2), s)
    assert np.all(max_err < 5e-3), max_err


def test_recentring_the_logits_changes_nothing_and_keeps_large_steps_finite(problem, monkeypatch):
    data, w, plan, targets = problem
    s = RAPSettings(rows=30, steps=200, batch=2, steps_per_call=200)
    often = rap_mod.recentre_every(s)
    assert 1 <= often < 200
    a_codes, a_loss, a_err = run_rap(plan, targets, jax.random.key(4), np.arange(2), s)
    monkeypatch.setattr(rap_mod, "_DRIFT", 1e9)  # recentre only at the block's start
    rap_mod.clear_programs()
    assert rap_mod.recentre_every(s) >= 200
    b_codes, b_loss, b_err = run_rap(plan, targets, jax.random.key(4), np.arange(2), s)
    np.testing.assert_allclose(a_loss, b_loss, rtol=1e-3, atol=1e-7)
    assert (a_codes == b_codes).mean() > 0.95  # the same fits, up to float rounding
    monkeypatch.undo()
    rap_mod.clear_programs()
    big = RAPSettings(rows=30, steps=300, batch=2, learning_rate=5.0, steps_per_call=300)
    assert rap_mod.recentre_every(big) == 1
    _, loss, err = run_rap(plan, targets, jax.random.key(5), np.arange(2), big)
    assert np.all(np.isfinite(loss)) and np.all(np.isfinite(err))


def test_draws_per_run_round_every_relaxed_row_evenly_and_share_the_fit_program(problem):
    data, w, plan, targets = problem
    import jax.numpy as jnp

    from censusrecon.reconstruct.relaxed import draw_rows

    idx = np.asarray(draw_rows(jax.random.key(0), 5, 13))  # 2 full passes and 3 distinct extra rows
    counts = np.bincount(idx, minlength=5)
    assert len(idx) == 13 and set(counts.tolist()) == {2, 3} and (counts == 3).sum() == 3
    s = RAPSettings(rows=12, steps=20, batch=2)
    plain = rap_rank(plan, targets, data.domain, jax.random.key(2), 2, s)
    before = rap_mod.TRACE_COUNT["n"]
    many = rap_rank(plan, targets, data.domain, jax.random.key(2), 2, RAPSettings(rows=12, steps=20, batch=2, draws=30))
    assert many.codes.shape == (2, 30, 3) and plain.codes.shape == (2, 12, 3)
    assert rap_mod.TRACE_COUNT["n"] == before + 1  # only the rounding is traced again, not the fit
    # a near one-hot relaxed row always rounds to its own row, however many times it is drawn
    logits = jnp.log(jnp.asarray(np.eye(3, dtype=np.float32)[:, [0, 2]] * 0.999999 + 1e-7))
    from censusrecon.reconstruct.relaxed import Layout, round_relaxed

    rows = np.asarray(round_relaxed(jax.random.key(1), logits, Layout.of([3]), draws=7))
    assert sorted(rows[:, 0].tolist()) == sorted([0, 2] * 3 + rows[6:, 0].tolist())
    assert set(rows[:, 0].tolist()) <= {0, 2}
    with pytest.raises(CensusReconError, match="draws must be"):
        RAPSettings(draws=0)


def test_union_size_and_run_fractions_cover_the_whole_union(problem):
    data, w, plan, targets = problem
    res = rap_rank(plan, targets, data.domain, jax.random.key(5), 3, RAPSettings(rows=20, steps=30, batch=1), limit=4)
    keys, frac = res.run_fractions()
    assert len(res.ranking) == 4 and res.union_size == len(keys) > 4
    assert set(res.ranking.keys) <= set(keys)
    assert (frac > 0).all() and (frac <= 1).all()
    per_run = [set(data.domain.encode(c).tolist()) for c in res.codes]
    for k, f in zip(keys[:10], frac[:10]):
        assert f == sum(k in r for r in per_run) / 3


def test_each_once_initialisation_starts_relaxed_row_i_at_pool_row_i(problem):
    data, w, plan, targets = problem
    s = RAPSettings(rows=len(data), steps=1, learning_rate=1e-6, init_confidence=0.999, batch=1, init_mode="each_once")
    res = rap_rank(plan, targets, data.domain, jax.random.key(0), 2, s, init_pool=data.codes)
    for run in res.codes:
        assert (run == data.codes).all(axis=1).mean() > 0.9  # row i is pool row i, in order
    with pytest.raises(CensusReconError, match="exactly n'"):
        rap_rank(plan, targets, data.domain, jax.random.key(0), 1, s, init_pool=data.codes[:5])


def test_kernel_pallas_fits_census_tables_on_the_fused_kernels(problem, small_census, monkeypatch):
    """attack.kernel = pallas reaches the census plan's fused kernels in the fit (its step and its end-of-block
    loss), and the fit is the XLA step's to float rounding (Pallas's interpreter here); a marginal plan ignores it."""
    from censusrecon.reconstruct import fused

    plan, census_targets, dom = small_census
    calls = {"n": 0}
    answers = fused.answers
    monkeypatch.setattr(fused, "answers", lambda *a, **k: calls.__setitem__("n", calls["n"] + 1) or answers(*a, **k))
    fits = {k: rap_rank(plan, census_targets, dom, jax.random.key(4), 2, RAPSettings(rows=24, steps=6, steps_per_call=3,
                                                                                     kernel=k))
            for k in ("xla", "pallas")}
    assert calls["n"] >= 2  # traced in the step and in the block's loss
    np.testing.assert_allclose(fits["pallas"].final_loss, fits["xla"].final_loss, rtol=1e-4)
    np.testing.assert_allclose(fits["pallas"].max_abs_error, fits["xla"].max_abs_error, rtol=1e-4, atol=1e-6)
    with pytest.raises(CensusReconError, match="kernel"):
        RAPSettings(kernel="triton")
    data, mw, mplan, targets = problem  # marginals: no product rows, the same fit whatever the kernel says
    same = [rap_rank(mplan, targets, data.domain, jax.random.key(0), 2, RAPSettings(rows=8, steps=4, kernel=k))
            for k in ("xla", "pallas")]
    np.testing.assert_array_equal(same[0].codes, same[1].codes)
