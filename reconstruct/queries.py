"""Differentiable answers of marginal workloads on a relaxed dataset, as a few large contractions."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import jax.numpy as jnp
import numpy as np

from microdata.census import membership_matrix
from microdata.marginals import Workload


@dataclass(frozen=True)
class _Group:
    prefix: tuple[int, ...]  # attribute positions whose row-wise outer product is the left factor
    lasts: tuple[int, ...]  # attribute positions concatenated as the right factor


@dataclass(frozen=True)
class MarginalPlan:
    """How to evaluate a workload: marginals grouped by all-but-last attribute.

    A k-way marginal (a1..ak) on relaxed rows P_a (n' × |a|) is
    (1/n') · (P_a1 ⊙ ... ⊙ P_a(k-1))ᵀ · P_ak, the row-wise outer product of the prefix times
    the last attribute. All marginals sharing a prefix become ONE matmul against the
    concatenation of their last attributes, so a step costs one contraction per distinct
    prefix (≤ d for 2-way, ≤ d²/2 for 3-way), never one per marginal. Attributes are
    ordered by ascending size inside each marginal so the largest attribute sits on the
    matmul side, never inside a row-wise product.

    ``order`` maps the plan's output order to the workload's query order:
    ``plan_answers[order_inv]`` is in workload order; targets are permuted once on the host.
    """

    sizes: tuple[int, ...]
    groups: tuple[_Group, ...]
    perm: tuple[int, ...]  # plan position -> workload query index
    num_queries: int

    @classmethod
    def build(cls, workload: Workload) -> "MarginalPlan":
        dom = workload.domain
        sizes = dom.sizes
        offsets = workload.offsets()
        by_prefix: dict[tuple[int, ...], list[tuple[int, int]]] = {}
        for mi, marg in enumerate(workload.marginals):
            pos = [dom.index(a) for a in marg]
            sorted_pos = sorted(pos, key=lambda i: (sizes[i], i))
            by_prefix.setdefault(tuple(sorted_pos[:-1]), []).append((sorted_pos[-1], mi))
        groups = []
        perm: list[np.ndarray] = []
        for prefix, items in by_prefix.items():
            groups.append(_Group(prefix, tuple(last for last, _ in items)))
            # plan output of this group: (prod prefix sizes) x (sum of last sizes), row-major
            pre_shape = [sizes[i] for i in prefix]
            n_pre = int(np.prod(pre_shape)) if prefix else 1
            cols = []
            for last, mi in items:
                marg = workload.marginals[mi]
                pos = [dom.index(a) for a in marg]
                shape = [sizes[i] for i in pos]
                # workload index of cell (prefix idx..., last idx) in the marginal's own order
                grids = np.meshgrid(*[np.arange(sizes[i]) for i in (*prefix, last)], indexing="ij")
                coords = {p: g for p, g in zip((*prefix, last), grids)}
                flat = np.ravel_multi_index(tuple(coords[p] for p in pos), shape)
                cols.append(offsets[mi] + flat.reshape(n_pre, sizes[last]))
            perm.append(np.concatenate(cols, axis=1).reshape(-1))
        perm_arr = np.concatenate(perm)
        assert np.array_equal(np.sort(perm_arr), np.arange(workload.num_queries))
        return cls(tuple(sizes), tuple(groups), tuple(int(i) for i in perm_arr), workload.num_queries)

    def to_plan_order(self, values: np.ndarray) -> np.ndarray:
        """Permute a workload-ordered vector (targets, weights) into plan order."""
        return np.asarray(values)[np.array(self.perm, dtype=np.int64)]

    def to_workload_order(self, values) -> np.ndarray:
        out = np.empty(self.num_queries, dtype=np.asarray(values).dtype)
        out[np.array(self.perm, dtype=np.int64)] = np.asarray(values)
        return out

    def answers(self, probs: Sequence[jnp.ndarray]) -> jnp.ndarray:
        """Relaxed answers in plan order for per-attribute probabilities ``probs[i]`` (n' × |i|)."""
        n = probs[0].shape[0]
        outs = []
        for g in self.groups:
            right = jnp.concatenate([probs[i] for i in g.lasts], axis=1)
            if not g.prefix:
                outs.append(jnp.sum(right, axis=0))
                continue
            left = probs[g.prefix[0]]
            for i in g.prefix[1:]:
                left = (left[:, :, None] * probs[i][:, None, :]).reshape(n, -1)
            outs.append((left.T @ right).reshape(-1))
        return jnp.concatenate(outs) / n


def reference_answers(workload: Workload, probs: Sequence[jnp.ndarray]) -> jnp.ndarray:
    """The plain definition, one einsum per marginal, in workload order (for tests only)."""
    dom = workload.domain
    letters = "abcdefghijklmnopqrstuvwxyz"
    outs = []
    for marg in workload.marginals:
        pos = [dom.index(a) for a in marg]
        spec = ",".join(f"z{letters[j]}" for j in range(len(pos))) + "->" + letters[: len(pos)]
        outs.append(jnp.einsum(spec, *[probs[i] for i in pos]).reshape(-1))
    return jnp.concatenate(outs) / probs[0].shape[0]


@dataclass(frozen=True)
class ProductPlan:
    """Relaxed answers of product queries (census table cells), batched: no loop over queries.

    A query restricts each attribute a to a value set S_a; on relaxed rows its answer is
    (1/n') Σ_r Π_a Σ_{v∈S_a} P_a[r, v]. Per attribute, the summed probabilities of all
    distinct sets are one matmul P_a · M_a (M_a the 0/1 membership matrix). Queries are then
    grouped by their sets on every attribute but the ``outer`` one: the row-wise product over those attributes is formed
    once per distinct group, and one matmul against the outer attribute's summed
    probabilities gives every (outer set × group) answer, from which the queries are
    gathered. The outer attribute is the one that makes this cheapest (BLOCK, typically). Same interface as :class:`MarginalPlan` (plan order = workload order).
    """

    sizes: tuple[int, ...]
    memberships: tuple[tuple[tuple[int, ...], ...], ...]  # per attribute, per set: its values
    outer: int
    group_sets: tuple[tuple[int, ...], ...]  # per group, a set index for every non-outer attribute
    query_outer: tuple[int, ...]
    query_group: tuple[int, ...]
    num_queries: int

    @classmethod
    def build(cls, workload) -> "ProductPlan":
        d = len(workload.domain)
        q = np.array(workload.queries, dtype=np.int64).reshape(-1, d)
        n_sets = [len(s) for s in workload.value_sets]
        best = None
        for outer in range(d):  # the outer attribute that makes the step cheapest
            rest = [j for j in range(d) if j != outer]
            groups, inverse = np.unique(q[:, rest], axis=0, return_inverse=True)
            # gathers and products per group dominate; the outer matmul is far cheaper per element
            cost = len(groups) * (len(rest) + n_sets[outer] / 64)
            if best is None or cost < best[0]:
                best = (cost, outer, groups, inverse)
        _, outer, groups, inverse = best
        return cls(
            sizes=tuple(workload.domain.sizes),
            memberships=tuple(tuple(tuple(sorted(s)) for s in sets) for sets in workload.value_sets),
            outer=outer,
            group_sets=tuple(tuple(int(x) for x in g) for g in groups),
            query_outer=tuple(int(x) for x in q[:, outer]),
            query_group=tuple(int(x) for x in np.asarray(inverse).reshape(-1)),
            num_queries=len(q),
        )

    def to_plan_order(self, values: np.ndarray) -> np.ndarray:
        return np.asarray(values)

    def to_workload_order(self, values) -> np.ndarray:
        return np.asarray(values)

    def _membership(self, j: int) -> np.ndarray:
        return membership_matrix(self.sizes[j], self.memberships[j])

    def answers(self, probs: Sequence[jnp.ndarray]) -> jnp.ndarray:
        n = probs[0].shape[0]
        # feature-major: (sets × n') so that gathering a set's row is a contiguous copy
        summed = [jnp.asarray(self._membership(j)).T @ probs[j].T for j in range(len(self.sizes))]
        groups = np.array(self.group_sets, dtype=np.int64).reshape(len(self.group_sets), -1)
        rest = [j for j in range(len(self.sizes)) if j != self.outer]
        prod = summed[rest[0]][groups[:, 0]]
        for col, j in enumerate(rest[1:], start=1):
            prod = prod * summed[j][groups[:, col]]
        table = summed[self.outer] @ prod.T  # (outer sets × groups)
        return table[np.array(self.query_outer), np.array(self.query_group)] / n


def plan_for(workload):
    """The evaluation plan of a marginal workload or a census workload."""
    if isinstance(workload, Workload):
        return MarginalPlan.build(workload)
    return ProductPlan.build(workload)
