import jax
import jax.numpy as jnp
import numpy as np
import pytest

from censusrecon.microdata.dataset import Dataset
from censusrecon.microdata.domain import Domain
from censusrecon.microdata.marginals import Workload, answer
from censusrecon.reconstruct.queries import MarginalPlan, per_attribute, reference_answers
from censusrecon.reconstruct.relaxed import Layout, logits_from_codes, probabilities, random_logits, round_relaxed


def _random_logits(plan, n=37, seed=0):
    return random_logits(jax.random.key(seed), n, plan.layout) * 2


def _reference(w, plan, L):
    return reference_answers(w, per_attribute(probabilities(L, plan.layout), plan.layout))


@pytest.mark.parametrize("k,lower", [(1, False), (2, False), (2, True), (3, False), (3, True), (4, True)])
def test_plan_matches_one_einsum_per_marginal(k, lower):
    dom = Domain.from_sizes({"A": 5, "B": 2, "C": 7, "D": 3, "E": 4})
    w = Workload.all_kway(dom, k, lower=lower)
    plan = MarginalPlan.build(w)
    L = _random_logits(plan)
    got = np.asarray(plan.answers(probabilities(L, plan.layout)))
    np.testing.assert_allclose(got, np.asarray(_reference(w, plan, L)), atol=1e-6)
    # one matmul per middle attribute, not one per marginal; a middle is paired with whichever
    # side has fewer rows (both orientations occur on this domain: sizes 2, 3, 4, 5, 7)
    if k == 3:
        assert len(plan.middles) < len(w.marginals)
        assert {m.flip for m in plan.middles} == {True, False}
        ss = plan.layout.stacked_sizes
        assert all(m.product_rows(ss) == min(sum(ss[a] for a in m.lefts), sum(ss[c] for c in m.rights)) * ss[m.b]
                   for m in plan.middles)
    # attributes are stacked by ascending size: the largest never enters a row-wise product
    assert list(plan.layout.stacked_sizes) == sorted(dom.sizes)


def test_plan_handles_hand_picked_marginals_in_any_attribute_order():
    dom = Domain.from_sizes({"A": 5, "B": 2, "C": 7, "D": 3})
    w = Workload(dom, (("C", "A"), ("B",), ("C", "B", "A"), ("D", "A", "B"), ("A", "D", "C", "B")))
    plan = MarginalPlan.build(w)
    L = _random_logits(plan, seed=3)
    got = np.asarray(plan.answers(probabilities(L, plan.layout)))
    np.testing.assert_allclose(got, np.asarray(_reference(w, plan, L)), atol=1e-6)
    # targets scattered into the dense vector come back unchanged; the rest is masked out
    v = np.arange(1, w.num_queries + 1, dtype=np.float32)
    dense = plan.dense_targets(v)
    assert np.array_equal(dense[plan.dense_index], v)
    assert plan.dense_mask.sum() == w.num_queries and np.all(dense[plan.dense_mask == 0] == 0)


@pytest.mark.parametrize("k", [1, 2, 3])
def test_hand_written_gradients_match_autodiff_of_the_definition(k):
    # both entry points: answers of given probabilities, and the RAP step's logits -> answers
    # (softmax and answers under one gradient; for 1- and 2-way its residual is only the
    # operand-dtype copy of P)
    dom = Domain.from_sizes({"A": 3, "B": 4, "C": 2, "D": 5, "E": 2})
    w = Workload.all_kway(dom, k, lower=True)
    plan = MarginalPlan.build(w)
    target = jnp.asarray(np.random.default_rng(0).random(w.num_queries), dtype=jnp.float32)
    L = _random_logits(plan, n=11, seed=5)
    idx = jnp.asarray(plan.dense_index)

    def ref(L):
        return jnp.sum((_reference(w, plan, L) - target) ** 2)

    def of_probs(L):
        return jnp.sum((plan.answers(probabilities(L, plan.layout)) - target) ** 2)

    def of_logits(L, dtype="float32"):
        return jnp.sum((plan.dense_answers_of_logits(L, dtype)[idx] - target) ** 2)

    want = np.asarray(jax.grad(ref)(L))
    np.testing.assert_allclose(float(of_logits(L)), float(ref(L)), rtol=1e-5)
    for fn in (of_probs, of_logits):
        np.testing.assert_allclose(np.asarray(jax.grad(fn)(L)), want, rtol=1e-4, atol=1e-6)
    got16 = np.asarray(jax.grad(lambda L: of_logits(L, "bfloat16"))(L))
    assert np.abs(got16 - want).max() < 2e-2 * np.abs(want).max()  # bfloat16 operands, same gradient


@pytest.mark.parametrize("bands", [2, 3, (1,), (3, 4, 9), tuple(range(1, 16))])
def test_gram_bands_give_the_whole_gram_matrix_answers_and_gradient(bands):
    """The 2-way step in row bands of the Gram matrix's upper part (cuts inside an attribute, at its
    edges, one band a row) answers and differentiates exactly as the whole Gram matrix does."""
    dom = Domain.from_sizes({"A": 3, "B": 4, "C": 2, "D": 5, "E": 2})
    w = Workload.all_kway(dom, 2, lower=True)
    whole, plan = MarginalPlan.build(w, gram_bands=1), MarginalPlan.build(w, gram_bands=bands)
    assert len(plan.gram) > 1 and whole.gram == ((0, 16),) and plan.key != whole.key
    assert plan.dense_size < whole.dense_size
    L = _random_logits(plan, n=13, seed=7)
    np.testing.assert_allclose(np.asarray(plan.answers(probabilities(L, plan.layout))),
                               np.asarray(_reference(w, plan, L)), atol=1e-6)
    target = jnp.asarray(np.random.default_rng(1).random(w.num_queries), dtype=jnp.float32)

    def loss(p, L):
        return jnp.sum((p.dense_answers_of_logits(L)[jnp.asarray(p.dense_index)] - target) ** 2)

    np.testing.assert_allclose(np.asarray(jax.grad(lambda L: loss(plan, L))(L)),
                               np.asarray(jax.grad(lambda L: loss(whole, L))(L)), rtol=1e-4, atol=1e-6)
    with pytest.raises(ValueError, match="band starts"):
        MarginalPlan.build(w, gram_bands=(0, 5))


def test_a_tall_middle_computed_the_other_way_round_gives_the_same_answers_and_gradient():
    from censusrecon.reconstruct.queries import _swap_forward

    dom = Domain.from_sizes({"A": 2, "B": 2, "C": 6, "D": 6, "E": 2, "F": 2})
    w = Workload.all_kway(dom, 3)
    plan = MarginalPlan.build(w)
    ss = plan.layout.stacked_sizes
    assert any(_swap_forward("float32", m.product_rows(ss), m.other_rows(ss)) for m in plan.middles)
    assert not any(_swap_forward("bfloat16", m.product_rows(ss), m.other_rows(ss)) for m in plan.middles)
    L = _random_logits(plan, n=17, seed=2)
    np.testing.assert_allclose(np.asarray(plan.answers(probabilities(L, plan.layout))),
                               np.asarray(_reference(w, plan, L)), atol=1e-6)
    target = jnp.asarray(np.random.default_rng(2).random(w.num_queries), dtype=jnp.float32)
    idx = jnp.asarray(plan.dense_index)
    got = jax.grad(lambda L: jnp.sum((plan.dense_answers_of_logits(L)[idx] - target) ** 2))(L)
    want = jax.grad(lambda L: jnp.sum((_reference(w, plan, L) - target) ** 2))(L)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-4, atol=1e-6)


def test_bfloat16_operands_stay_close_to_float32():
    dom = Domain.from_sizes({"A": 3, "B": 4, "C": 2, "D": 5})
    w = Workload.all_kway(dom, 3, lower=True)
    plan = MarginalPlan.build(w)
    P = probabilities(_random_logits(plan, n=200), plan.layout)
    f32 = np.asarray(plan.answers(P, "float32"))
    bf16 = np.asarray(plan.answers(P, "bfloat16"))
    assert np.abs(bf16 - f32).max() < 5e-3  # bfloat16 keeps 8 bits of mantissa
    assert not np.array_equal(bf16, f32)  # and the operands really were rounded


def test_one_hot_relaxed_dataset_rounds_to_exactly_its_own_rows_and_counts(small_data):
    w = Workload.all_kway(small_data.domain, 3, lower=True)
    plan = MarginalPlan.build(w)
    logits = logits_from_codes(jnp.asarray(small_data.codes, dtype=jnp.int32), plan.layout, 1.0)
    relaxed = np.asarray(plan.answers(probabilities(logits, plan.layout)))
    np.testing.assert_allclose(relaxed, answer(small_data, w), atol=1e-7)
    for seed in range(3):
        rounded = np.asarray(round_relaxed(jax.random.key(seed), logits, plan.layout))
        assert np.array_equal(rounded, small_data.codes)
        np.testing.assert_array_equal(answer(Dataset(small_data.domain, rounded), w), answer(small_data, w))


def test_layout_rejects_a_non_permutation():
    with pytest.raises(ValueError, match="permutation"):
        Layout.of((2, 3), (0, 0))


@pytest.mark.parametrize("k,lower", [(1, False), (2, True), (3, False)])
def test_exact_counts_by_matmul_equal_bincounts_across_chunks(small_data, monkeypatch, k, lower):
    from censusrecon.microdata.marginals import marginal_counts
    from censusrecon.reconstruct import queries

    monkeypatch.setattr(queries, "EXACT_CHUNK", 64)  # several chunks, the last one padded
    big = Dataset(small_data.domain, np.concatenate([small_data.codes] * 9))
    assert len(big) % 64
    w = Workload.all_kway(big.domain, k, lower=lower)
    got = queries.exact_counts(MarginalPlan.build(w), big.codes)
    assert got.dtype == np.int64
    assert np.array_equal(got, np.concatenate([marginal_counts(big, m) for m in w.marginals]))


def test_flops_a_marginal_step_must_do_are_counted_by_hand():
    """Sizes 2, 3, 4, all 2-way marginals: 2·3 + 2·4 + 3·4 = 26 cells, 6n' each (the answer and two
    cotangent contractions). In one band the step computes the whole 9 × 9 Gram matrix and (R + Rᵀ)·P:
    2 · 81 · 2n'; in bands starting at rows 2 and 5 (A, then B, then C) the Gram part is 2·9 + 3·7 + 4·4
    = 55 cells. All 3-way: one marginal of 24 cells, and the middle's matmul computes exactly those,
    3 × 24 × 2n'."""
    dom = Domain.from_sizes({"A": 2, "B": 3, "C": 4})
    n = 10
    two = MarginalPlan.build(Workload.all_kway(dom, 2), gram_bands=1)
    assert two.useful_flops_per_step(n) == 26 * 6 * n
    assert two.flops_per_step(n) == 2 * 81 * 2 * n
    banded = MarginalPlan.build(Workload.all_kway(dom, 2), gram_bands=(2, 5))
    assert banded.gram == ((0, 2), (2, 5), (5, 9)) and banded.dense_size == 55
    assert banded.flops_per_step(n) == 2 * (55 + 81) * n
    three = MarginalPlan.build(Workload.all_kway(dom, 3))
    assert three.useful_flops_per_step(n) == three.flops_per_step(n) == 24 * 6 * n
