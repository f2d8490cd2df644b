import jax
import jax.numpy as jnp
import numpy as np
import pytest

from microdata.dataset import Dataset
from microdata.domain import Domain
from microdata.marginals import Workload, answer
from reconstruct.queries import MarginalPlan, reference_answers
from reconstruct.relaxed import logits_from_codes, probabilities, round_relaxed


def _random_probs(sizes, n=37, seed=0):
    key = jax.random.key(seed)
    return [jax.nn.softmax(jax.random.normal(jax.random.fold_in(key, i), (n, s)) * 2) for i, s in enumerate(sizes)]


@pytest.mark.parametrize("k,lower", [(1, False), (2, False), (2, True), (3, False), (3, True)])
def test_plan_matches_one_einsum_per_marginal(k, lower):
    dom = Domain.from_sizes({"A": 5, "B": 2, "C": 7, "D": 3, "E": 4})
    w = Workload.all_kway(dom, k, lower=lower)
    plan = MarginalPlan.build(w)
    probs = _random_probs(dom.sizes)
    got = plan.to_workload_order(np.asarray(plan.answers(probs)))
    np.testing.assert_allclose(got, np.asarray(reference_answers(w, probs)), atol=1e-6)
    # fewer contractions than marginals once marginals share prefixes
    if k >= 2:
        assert len(plan.groups) < len(w.marginals)


def test_plan_handles_hand_picked_marginals_in_any_attribute_order():
    dom = Domain.from_sizes({"A": 5, "B": 2, "C": 7})
    w = Workload(dom, (("C", "A"), ("B",), ("C", "B", "A")))
    plan = MarginalPlan.build(w)
    probs = _random_probs(dom.sizes, seed=3)
    got = plan.to_workload_order(np.asarray(plan.answers(probs)))
    np.testing.assert_allclose(got, np.asarray(reference_answers(w, probs)), atol=1e-6)
    # targets permuted into plan order and back are unchanged
    v = np.arange(w.num_queries, dtype=np.float64)
    assert np.array_equal(plan.to_workload_order(plan.to_plan_order(v)), v)


def test_plan_gradient_matches_reference_gradient():
    dom = Domain.from_sizes({"A": 3, "B": 4, "C": 2, "D": 5})
    w = Workload.all_kway(dom, 3, lower=True)
    plan = MarginalPlan.build(w)
    target = jnp.asarray(np.random.default_rng(0).random(w.num_queries), dtype=jnp.float32)
    logits = [jax.random.normal(jax.random.key(i), (11, s)) for i, s in enumerate(dom.sizes)]
    perm = jnp.asarray(np.array(plan.perm))

    def fast(ls):
        return jnp.sum((plan.answers(probabilities(ls)) - target[perm]) ** 2)

    def ref(ls):
        return jnp.sum((reference_answers(w, probabilities(ls)) - target) ** 2)

    for g1, g2 in zip(jax.grad(fast)(logits), jax.grad(ref)(logits)):
        np.testing.assert_allclose(np.asarray(g1), np.asarray(g2), rtol=1e-4, atol=1e-6)


def test_one_hot_relaxed_dataset_rounds_to_exactly_its_own_rows_and_counts(small_data):
    w = Workload.all_kway(small_data.domain, 3, lower=True)
    plan = MarginalPlan.build(w)
    logits = logits_from_codes(jnp.asarray(small_data.codes, dtype=jnp.int32), small_data.domain.sizes, 1.0)
    relaxed = plan.to_workload_order(np.asarray(plan.answers(probabilities(logits))))
    np.testing.assert_allclose(relaxed, answer(small_data, w), atol=1e-7)
    for seed in range(3):
        rounded = np.asarray(round_relaxed(jax.random.key(seed), logits))
        assert np.array_equal(rounded, small_data.codes)
        np.testing.assert_array_equal(answer(Dataset(small_data.domain, rounded), w), answer(small_data, w))
