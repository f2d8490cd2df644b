"""The census (product-query) step's hand-written answers and gradient against the plain definition
and its autodiff gradient, on random workloads: tract-level cells, padded blocks, every split of the
attributes, float32 and bfloat16 operands."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from censusrecon.microdata.census import Cell, CensusWorkload
from censusrecon.microdata.domain import Attribute, Domain
from censusrecon.reconstruct.product_plan import ProductPlan, reference_product_answers
from censusrecon.reconstruct.kernels import usable_dtype
from censusrecon.reconstruct.relaxed import probabilities, random_logits


def _random_workload(seed: int, blocks: int = 5, pad: int = 2):
    """BLOCK (with ``pad`` padding blocks nobody uses), and three person attributes; random cells of
    random value sets, per block or for the whole unit."""
    rng = np.random.default_rng(seed)
    sizes = {"A": int(rng.integers(2, 9)), "B": int(rng.integers(2, 4)), "C": int(rng.integers(3, 12))}
    if seed == 2:  # a fourth: sides of four attributes, whose parents are three factors (see _parent_factors)
        sizes["D"] = 2
    dom = Domain((Attribute("BLOCK", tuple(f"b{i}" for i in range(blocks)) + tuple(f"pad{i}" for i in range(pad))),)
                 + tuple(Attribute.range(k, v) for k, v in sizes.items()))
    cells = []
    for n in range(int(rng.integers(6, 14))):
        sets = {}
        for name, size in sizes.items():
            if rng.random() < 0.6:
                lo = int(rng.integers(0, size))
                sets[name] = frozenset(range(lo, int(rng.integers(lo + 1, size + 1))))
        cells.append(Cell("T", n + 1, f"c{n}", tuple(sorted(sets.items())), "block" if rng.random() < 0.6 else "tract"))
    return CensusWorkload.build(dom, cells)


@pytest.mark.parametrize("broadcast", [False, True])
@pytest.mark.parametrize("seed", range(3))
def test_answers_and_gradient_equal_the_plain_definition_and_autodiff(seed, broadcast, monkeypatch):
    """Both ways a side's big level is formed (gathered, or group by group as broadcasts), on sides
    of several groups (up to 7 parents × 4 sets)."""
    from censusrecon.reconstruct import product_plan as queries
    from censusrecon.reconstruct.relaxed import recentre

    monkeypatch.setattr(queries, "BROADCAST_MAX_GROUPS", 1 << 30 if broadcast else -1)
    monkeypatch.setattr(queries, "BROADCAST_MAX_TERMS", 1 << 30)
    monkeypatch.setattr(queries, "REST_MAX_SHARE", 1.0)  # every parent of three factors or more: one times the rest
    w = _random_workload(seed)
    first = ProductPlan.build(w)  # the cheapest split and parts
    d = len(w.domain)
    logits = recentre(random_logits(jax.random.key(seed), 17, first.layout) * 3, first.layout)
    g = jax.random.normal(jax.random.key(100 + seed), (w.num_queries,))
    P = probabilities(logits, first.layout)

    @jax.jit
    def reference(P, L):
        answers, p_grad = jax.value_and_grad(lambda Q: jnp.vdot(reference_product_answers(w, Q), g))(P)
        l_grad = jax.grad(lambda M: jnp.vdot(reference_product_answers(w, probabilities(M, first.layout, centred=True)), g))(L)
        return reference_product_answers(w, P), p_grad, l_grad

    want, want_p, want_l = reference(P, logits)
    plans = [ProductPlan.build(w, split=split, by_level=by_level) for by_level in (False, True)
             for split in [((0,), tuple(range(1, d))), ((0, 2), tuple([1] + list(range(3, d))))]] + [first]
    assert {len(p.parts) for p in plans} == {1, 2}  # one part, and one per level (block cells, the unit's)
    if seed == 2:  # parents of three factors, formed as one factor times the others' few combinations
        assert any(side[0][1] is not None for plan in plans for sides in plan._sides() for side in sides)
    # every plan in float32; the chosen one in bfloat16 too (the dtype only casts the matmuls' operands)
    for dtype, chosen in (("float32", plans), (usable_dtype("bfloat16"), [first])):
        tol = 1e-5 if dtype == "float32" else 2e-2
        for plan in chosen:

            # the dense vector holds each part's whole product; its by-products carry no cotangent
            dense_g = jnp.zeros(plan.dense_size).at[plan.dense_index].set(g)

            @jax.jit
            def ours(P, L):
                p_grad = jax.grad(lambda Q: jnp.vdot(plan.dense_answers(Q, dtype), dense_g))(P)
                # the RAP step's entry point: softmax and answers, one hand-written gradient
                l_grad = jax.grad(lambda M: jnp.vdot(plan.dense_answers_of_logits(M, dtype), dense_g))(L)
                return plan.answers(P, dtype), p_grad, l_grad

            for got, ref in zip(ours(P, logits), (want, want_p, want_l)):
                np.testing.assert_allclose(got, ref, rtol=tol, atol=tol * float(jnp.abs(ref).max()))


@pytest.mark.parametrize("seed,tiles", [(0, (4, 16)), (1, (4, 16)), (2, (4, 16)), (2, (32, 64))])
def test_the_fused_kernels_give_the_plain_definition_and_autodiff(seed, tiles, monkeypatch):
    """kernel="pallas" (reconstruct.fused, in Pallas's interpreter here): answers and both gradients equal the plain
    definition's and autodiff's, for one part and for one per level, in float32 and bfloat16; with the kernels'
    tiles, and with tiles so small that every side spans several (the loops over tiles, the grid's programs). On a
    GPU (bench/gpu.sh runs these tests there) the same, compiled by Triton."""
    from censusrecon.reconstruct import fused
    from censusrecon.reconstruct.relaxed import recentre

    if not fused._interpret():  # on a GPU, Triton's: its matmul needs tiles of 16 rows at least; and one workload
        if seed != 2:  # of each tile size (every case compiles a few dozen kernels, seconds each)
            pytest.skip("on a GPU the workload of four attributes, in both tile sizes")
        tiles = tuple(max(16, t) for t in tiles)
    monkeypatch.setattr(fused, "TILE", tiles[0])
    monkeypatch.setattr(fused, "TILE_K", tiles[1])
    if tiles[0] < 32:  # small tiles everywhere: no side is one tile
        monkeypatch.setattr(fused, "TILE_MAX", tiles[0])
    ProductPlan._dense_fn.cache_clear()

    w = _random_workload(seed)
    first = ProductPlan.build(w)
    logits = recentre(random_logits(jax.random.key(seed), 40, first.layout) * 3, first.layout)
    g = jax.random.normal(jax.random.key(100 + seed), (w.num_queries,))
    P = probabilities(logits, first.layout)
    want = reference_product_answers(w, P)
    want_p = jax.grad(lambda Q: jnp.vdot(reference_product_answers(w, Q), g))(P)
    want_l = jax.grad(lambda M: jnp.vdot(reference_product_answers(w, probabilities(M, first.layout, centred=True)), g))(logits)
    plans = {len(p.parts): p for p in (first, ProductPlan.build(w, by_level=False), ProductPlan.build(w, by_level=True))}
    assert set(plans) == {1, 2}
    for dtype in ("float32", usable_dtype("bfloat16")):
        tol = 1e-5 if dtype == "float32" else 2e-2
        for plan in plans.values():
            dense_g = jnp.zeros(plan.dense_size).at[plan.dense_index].set(g)
            got = (plan.answers(P, dtype, "pallas"),
                   jax.grad(lambda Q: jnp.vdot(plan.dense_answers(Q, dtype, "pallas"), dense_g))(P),
                   jax.grad(lambda M: jnp.vdot(plan.dense_answers_of_logits(M, dtype, "pallas"), dense_g))(logits))
            for x, ref in zip(got, (want, want_p, want_l)):
                np.testing.assert_allclose(x, ref, rtol=tol, atol=tol * float(jnp.abs(ref).max()))


def test_the_fused_kernels_modelled_reads_are_every_parts():
    """ProductPlan.fused_cache_reads sums reconstruct.fused.cache_reads (its by-hand doctest) over the parts, each
    with its sides' rows and attributes."""
    from censusrecon.reconstruct import fused

    w = _random_workload(2)
    for plan in (ProductPlan.build(w, by_level=False), ProductPlan.build(w, by_level=True)):
        want = sum(sum(fused.cache_reads((len(p.left_combos), len(p.left)), (len(p.right_combos), len(p.right)),
                                         50).values()) for p in plan.parts)
        assert plan.fused_cache_reads(50) == want > 0


def test_a_wrong_split_is_refused():
    w = _random_workload(0)
    with pytest.raises(ValueError, match="no split"):
        ProductPlan.build(w, split=((1,), (0, 2, 3)))
    with pytest.raises(ValueError, match="no split"):
        ProductPlan.build(w, split=((0,), (1, 2)))


def test_flops_a_census_step_must_do_are_counted_by_hand():
    """Two attributes A (3 values) and B (2): cells A=0, A=1, A={0,1,2} each by B=0 and by B=1 (6 queries),
    and A=2 alone (B all). Forced split A | B, one part: left rows are A's 3 sets used ({0}, {1}, {0,1,2},
    {2}: 4), right rows B's ({0}, {1}, all: 3), so the matmul computes 4 × 3 = 12 cells for 7 queries. Set
    sums: A's singletons {0}, {1}, {2} and B's {0}, {1} are read as they are; A's {0,1,2} and B's "all" are
    each attribute's full set, whose sum over a softmax is a row of ones: no multiply-adds (a set of some values
    would be a small matmul forward and backward)."""
    dom = Domain((Attribute.range("A", 3), Attribute.range("B", 2)))
    cells = [Cell("T", i, f"c{i}", (("A", frozenset(a)), ("B", frozenset({b}))), "unit")
             for i, (a, b) in enumerate([((0,), 0), ((0,), 1), ((1,), 0), ((1,), 1), ((0, 1, 2), 0), ((0, 1, 2), 1)])]
    cells.append(Cell("T", 7, "c7", (("A", frozenset({2})),), "unit"))
    plan = ProductPlan.build(CensusWorkload.build(dom, cells), split=((0,), (1,)))
    n = 10
    assert plan.num_queries == 7
    assert [(len(p.left_combos), len(p.right_combos)) for p in plan.parts] == [(4, 3)]
    assert plan.flops_per_step(n) == 2 * n * (3 * 12)
    assert plan.useful_flops_per_step(n) == 2 * n * (3 * 7)


def test_a_side_is_laid_out_in_groups_of_parents_with_the_same_sets():
    """Combinations (A, B): parents 0 and 2 have B's sets (0, 1), parent 1 has (0,) alone: grouped
    order puts 0 and 2 together, then 1; the layout reads parents [0, 2, 1] and two groups."""
    from censusrecon.reconstruct.product_plan import _grouped_order, _side_layout

    combos = np.array([[0, 0], [0, 1], [1, 0], [2, 0], [2, 1]])
    grouped = combos[_grouped_order(combos)]
    assert grouped.tolist() == [[0, 0], [0, 1], [2, 0], [2, 1], [1, 0]]
    factors, last, groups = _side_layout((3, 5), grouped)
    assert [(a, v.tolist()) for a, v in factors] == [(3, [0, 2, 1])] and last == 5
    assert [(first, count, sets.tolist()) for first, count, sets in groups] == [(0, 2, [0, 1]), (2, 1, [0])]
    with pytest.raises(ValueError, match="grouped order"):
        _side_layout((3, 5), combos[[0, 2, 1]])  # parent 0's children split by parent 1's
    with pytest.raises(ValueError, match="grouped order"):
        _side_layout((3, 5), combos)  # parents 0 and 2 share a signature but parent 1 sits between
