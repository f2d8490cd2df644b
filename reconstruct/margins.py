"""The trivial attack: rows ranked by the product of one-way margins fitted to the published answers.

It reads only the release (the workload's published answers, noisy ones included) and asks: how
far does a guess that treats the attributes as independent get? It is an attack (it saw the
release), reported beside RAP-Rank and the exact attack, never a baseline. Where the release
publishes an attribute only in groups (ages 18–64), the fit cannot tell the group's values apart
and spreads the group evenly over them; where it publishes nothing about an attribute, that
attribute's margin stays uniform.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax

from censusrecon.microdata.census import CensusWorkload, membership_matrix
from censusrecon.microdata.errors import CensusReconError
from censusrecon.microdata.marginals import Workload
from censusrecon.microdata.ranking import Ranking, product_support, rank_product


def product_structure(workload) -> tuple[list[np.ndarray], np.ndarray]:
    """Every query of ``workload`` as a product of per-attribute value sets: per attribute a 0/1
    (values × sets) membership matrix, and a (queries × attributes) index of each query's set.

    >>> from censusrecon.microdata.domain import Domain
    >>> w = Workload(Domain.from_sizes({"A": 2, "B": 3}), (("A",), ("A", "B")))
    >>> member, index = product_structure(w)
    >>> [m.shape for m in member], index[:3].tolist()
    ([(2, 3), (3, 4)], [[0, 3], [1, 3], [0, 0]])
    """
    if isinstance(workload, CensusWorkload):
        member = [workload.membership(j) for j in range(len(workload.domain))]
        index = np.array(workload.queries, dtype=np.int64).reshape(workload.num_queries, len(workload.domain))
        return member, index
    if not isinstance(workload, Workload):
        raise CensusReconError(f"no product structure for a {type(workload).__name__}")
    dom = workload.domain
    # per attribute: the singletons 0..size-1, then the full set at index size
    member = [membership_matrix(s, [frozenset({v}) for v in range(s)] + [frozenset(range(s))]) for s in dom.sizes]
    rows = []
    for m in workload.marginals:
        cols = [dom.index(a) for a in m]
        cells = np.stack(np.meshgrid(*[np.arange(dom.sizes[c]) for c in cols], indexing="ij"), -1).reshape(-1, len(cols))
        idx = np.tile(np.array(dom.sizes, dtype=np.int64), (len(cells), 1))
        idx[:, cols] = cells
        rows.append(idx)
    return member, np.concatenate(rows, axis=0)


@functools.partial(jax.jit, static_argnames=("steps",))
def _fit(member, index, answers, steps: int):
    opt = optax.adam(0.1)
    logits = [jnp.zeros(m.shape[0], jnp.float32) for m in member]

    def loss(ls):
        pred = jnp.ones(answers.shape, jnp.float32)
        for j, (lg, m) in enumerate(zip(ls, member)):
            pred = pred * (jax.nn.softmax(lg) @ m)[index[:, j]]
        return jnp.sum((pred - answers) ** 2)

    def step(carry, _):
        ls, state = carry
        g = jax.grad(loss)(ls)
        upd, state = opt.update(g, state, ls)
        return (optax.apply_updates(ls, upd), state), None

    (logits, _), _ = jax.lax.scan(step, (logits, opt.init(logits)), None, length=steps)
    return [jax.nn.softmax(lg) for lg in logits]


def fit_one_way(workload, answers: np.ndarray, steps: int = 400) -> tuple[np.ndarray, ...]:
    """The one-way margins (one probability vector per attribute, domain order) whose product
    distribution answers ``workload`` closest to ``answers`` (fractions of persons) in squared
    error. Deterministic; float32 on the device."""
    member, index = product_structure(workload)
    answers = np.asarray(answers, dtype=np.float32)
    if answers.shape != (len(index),):
        raise CensusReconError(f"one answer per query: {len(index)} queries, {answers.shape} answers")
    out = _fit([jnp.asarray(m, jnp.float32) for m in member], jnp.asarray(index), jnp.asarray(answers), steps)
    return tuple(np.asarray(p, dtype=np.float64) for p in out)


def margins_attack(workload, answers: np.ndarray, rng: np.random.Generator | None = None,
                   limit: int | None = None) -> tuple[Ranking, int]:
    """The trivial attack's ranking of ``workload.domain``'s rows, and its candidate list's
    size (every row of positive probability)."""
    margins = fit_one_way(workload, answers)
    return rank_product(margins, workload.domain.encode, rng=rng, limit=limit), product_support(margins)
