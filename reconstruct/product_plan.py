"""Census tables as product queries: the plan that answers a workload of per-block (and per-area) tables."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from censusrecon.microdata.census import membership_matrix
from censusrecon.reconstruct import fused
from censusrecon.reconstruct.kernels import DTYPES, DenseAnswers, block_answers, plan_dot
from censusrecon.reconstruct.relaxed import Layout, softmax_parts, softmax_parts_backward, split

#: the cost of one element of a row-wise product pass relative to one matmul flop: the products
#: are memory traffic, the matmuls compute-bound (used only to choose a plan's sides and parts)
_ELEMENT_COST = 48


#: a side's big level of at most this many groups is formed group by group as broadcasts, one of
#: more by gathers (see ``_broadcast``; the SF1 tables' sides have 1-6)
BROADCAST_MAX_GROUPS = 12


#: ... and of at most this many parents and sets in each group (the SF1 tables' 2010 tracts: up to 92)
BROADCAST_MAX_TERMS = 128


def _unique_rows(rows: np.ndarray, radices: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(rows, axis=0, return_inverse=True)`` for rows of set indices (column j below
    ``radices[j]``), through one int64 key per row: many times faster than sorting rows."""
    key = np.zeros(len(rows), np.int64)
    for j, r in enumerate(radices):
        key = key * int(r) + rows[:, j]
    uniq, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    return rows[first], np.asarray(inverse).reshape(-1)


def _best_split(q: np.ndarray, n_sets: Sequence[int], splits=None):
    """The cheapest split of the attributes into two sides (the first attribute on the left) for
    the queries ``q`` (rows of set indices), among ``splits`` ((left, right) pairs; default every
    split), with the distinct set combinations each side needs and its cost: three matmuls of the
    two sides' products (the answers and both sides' cotangents), and the passes over rows of n'
    floats: the row-wise products and the scatter-adds of the shares into each attribute's set rows."""
    d = q.shape[1]
    if splits is None:
        splits = [([0] + [j for j in range(1, d) if mask >> (j - 1) & 1],
                   [j for j in range(1, d) if not mask >> (j - 1) & 1]) for mask in range((1 << (d - 1)) - 1)]
    best = None
    for left, right in splits:
        lc, li = _unique_rows(q[:, left], [n_sets[j] for j in left])
        rc, ri = _unique_rows(q[:, right], [n_sets[j] for j in right])
        # per side, passes over its rows: the forward's product, and per attribute a share and its
        # scatter-add (an estimate: the prefix tree reads fewer; on the bench's 85-block tract the
        # split it picks was the fastest of four measured, 2-3x the others)
        passes = len(lc) * (4 * len(left) - 1) + len(rc) * (4 * len(right) - 1)
        cost = 6 * len(lc) * len(rc) + _ELEMENT_COST * passes
        if best is None or cost < best[0]:
            best = (cost, left, right, lc, li, rc, ri)
    return best


@dataclass(frozen=True)
class _Part:
    """Queries answered by one matmul of two sides' products (see :class:`ProductPlan`)."""

    queries: tuple[int, ...]  # their positions in workload order
    left: tuple[int, ...]
    right: tuple[int, ...]
    left_combos: tuple[tuple[int, ...], ...]  # per left row, a set index for every left attribute
    right_combos: tuple[tuple[int, ...], ...]
    query_left: tuple[int, ...]
    query_right: tuple[int, ...]

    @classmethod
    def of(cls, q: np.ndarray, positions: np.ndarray, n_sets, split=None) -> tuple[float, "_Part"]:
        splits = None
        if split is not None:
            left, right = sorted(split[0]), sorted(split[1])
            if not left or left[0] != 0 or not right or sorted(left + right) != list(range(q.shape[1])):
                raise ValueError(f"no split {split} (the left side must hold attribute 0, and every attribute "
                                 "must be on one side)")
            splits = [(left, right)]
        cost, left, right, lc, li, rc, ri = _best_split(q[positions], n_sets, splits)
        lc, li = _in_grouped_order(lc, li)
        rc, ri = _in_grouped_order(rc, ri)
        ints = lambda a: tuple(int(x) for x in np.asarray(a).reshape(-1))  # noqa: E731
        return cost, cls(ints(positions), tuple(left), tuple(right), tuple(ints(r) for r in lc),
                         tuple(ints(r) for r in rc), ints(li), ints(ri))


def _by_constant(m: np.ndarray, x: jax.Array) -> jax.Array:
    """``m @ x`` for a constant matrix ``m`` (an attribute's membership matrix). Vmapped (a batch of runs), a
    matmul of ``m`` broadcast over the batch by each run's ``x``, not the product XLA makes of it otherwise: ``m``
    by every run's columns side by side, which a GPU gets by transposing the batch's ``x`` and transposing the
    result back (two passes over both; XLA:GPU's count of the 85-block step at 256 runs a call: 65.1 -> 62.5 MB a
    run-step). Nothing changes for one run."""
    f = jax.custom_batching.custom_vmap(lambda y: jnp.asarray(m) @ y)

    @f.def_vmap
    def _batched(size, batched, y):
        if not batched[0]:
            return f(y), False
        return jnp.matmul(jnp.broadcast_to(jnp.asarray(m), (size,) + m.shape), y), True

    return f(x)


def _segment_sum(x: jax.Array, ids: np.ndarray, segments: int) -> jax.Array:
    """Row sums of ``x`` (float32) per segment id: a scatter-add, whose cost is one pass over
    ``x`` whatever the number of segments. Measured against one matmul by the (segments × rows)
    0/1 matrix, which costs segments × rows × n' multiply-adds: 1.2-5x faster on XLA:CPU from
    25 segments up and as fast at 3 (rows 72-1,664, n' = 300, one core), and 1.5-2.3x faster for
    the whole census step. ``ids`` sorted (a prefix tree's parents, and a side's first attribute:
    its combinations are in lexicographic order) lets XLA skip the sort."""
    ids = np.asarray(ids)
    return jax.ops.segment_sum(x, jnp.asarray(ids, jnp.int32), segments,
                               indices_are_sorted=bool(np.all(ids[1:] >= ids[:-1])))


def _pairwise_sum(terms: Sequence[jax.Array]) -> jax.Array:
    """The sum of a short static list of arrays as a pairwise tree of adds: element-wise ops that
    XLA fuses with the products they sum (each term its own slices of the operands) into one loop
    over the output, nothing materialised. Two other forms measured slower on the 85-block step: a
    reduce of the product is handed to XLA:CPU's YNNPACK fusion (jaxlib 0.10), which ran it as n'
    tiny batched dots (2.6x slower in all); slices of one materialised product wrote the product
    out first."""
    terms = list(terms)
    while len(terms) > 1:
        terms = [terms[i] + terms[i + 1] if i + 1 < len(terms) else terms[i] for i in range(0, len(terms), 2)]
    return terms[0]


def _set_rows(size: int, sets) -> tuple[np.ndarray, np.ndarray, np.ndarray, bool]:
    """How an attribute's set sums are formed without a matmul by a mostly-identity 0/1 matrix:
    the values that are a set by themselves are read as they are (``direct``, ascending), the
    other sets are one small matmul by their membership matrix (``other``: values × sets), and the
    set of every value (``full``), whose sum is 1 for every relaxed row, is a row of ones that
    depends on nothing (its cotangent, the same for every value, is cancelled by the softmax's
    backward: it is not formed); ``row`` gives each set's row among [direct values, other sets,
    the full set].

    >>> direct, other, row, full = _set_rows(3, [(0,), (0, 1, 2), (1, 2), (2,)])
    >>> direct.tolist(), other.T.tolist(), row.tolist(), full
    ([0, 2], [[0.0, 1.0, 1.0]], [0, 3, 2, 1], True)
    """
    row = np.full(len(sets), -1, np.int64)
    seen: dict[int, int] = {}
    for i, vals in enumerate(sets):
        if len(vals) == 1 and vals[0] not in seen:
            seen[vals[0]] = i
    direct = np.array(sorted(seen), np.int64)
    for pos, v in enumerate(direct):
        row[seen[int(v)]] = pos
    whole = [i for i in range(len(sets)) if row[i] < 0 and len(set(sets[i])) == size]
    rest = [i for i in range(len(sets)) if row[i] < 0 and i not in whole[:1]]
    row[rest] = len(direct) + np.arange(len(rest))
    if whole:
        row[whole[0]] = len(direct) + len(rest)
    return direct, membership_matrix(size, [sets[i] for i in rest]), row, bool(whole)


def _parent_runs(combos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where each run of rows with the same parent (all columns but the last) starts and ends."""
    new_parent = np.r_[True, np.any(combos[1:, :-1] != combos[:-1, :-1], axis=1)] if len(combos) else np.zeros(0, bool)
    starts = np.flatnonzero(new_parent)
    return starts, np.r_[starts[1:], len(combos)]


def _grouped_order(combos: np.ndarray) -> np.ndarray:
    """The order of a side's combinations (rows of set indices, one column per attribute) that
    :func:`_side_layout` reads: each combination is its parent (the sets of all attributes but the
    last) and a set of the last attribute; parents whose children have the same last sets, in the
    same order (a *signature*), are adjacent, each parent's children a run in that order. Groups
    come in the order of their first parent (lexicographic), parents within a group and children
    within a parent lexicographically.

    >>> _grouped_order(np.array([[0, 0], [0, 1], [1, 0], [2, 0], [2, 1]])).tolist()
    [0, 1, 3, 4, 2]
    """
    combos = np.asarray(combos, np.int64).reshape(len(combos), -1)
    if combos.shape[1] < 2 or not len(combos):
        return np.arange(len(combos))
    lex = np.lexsort(combos.T[::-1])
    c = combos[lex]
    runs: dict[tuple, list[np.ndarray]] = {}
    for s, e in zip(*_parent_runs(c)):
        runs.setdefault(tuple(c[s:e, -1].tolist()), []).append(lex[s:e])
    return np.concatenate([r for group in runs.values() for r in group])


def _in_grouped_order(combos: np.ndarray, inverse: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A side's combinations in :func:`_grouped_order`, and the queries' indices into them remapped."""
    order = _grouped_order(combos)
    where = np.empty(len(order), np.int64)
    where[order] = np.arange(len(order))
    return np.asarray(combos)[order], where[np.asarray(inverse, np.int64)]


def _side_layout(attrs: Sequence[int], combos: np.ndarray) -> tuple:
    """How a side's rows (its combinations, in :func:`_grouped_order`) are formed: (parent factors,
    last attribute, groups). The parents are the distinct combinations of all attributes but the
    last, in order of first appearance, one row-wise product of their set rows (``parent factors``:
    per attribute, the set index of each parent); each group is (first parent, parents, the last
    attribute's sets): its rows are every parent of it times every one of those sets, parent-major,
    a broadcast product with no gather of the big level's rows, and its cotangent's shares are two
    reductions of the same block (over the sets, into the parents; over the parents, into the sets).
    A one-attribute side is its set rows as they are (no parents: last attribute and groups None).
    On the 85-block bench tract the 823 right rows fall in 6 groups (48 parents × 8 race sets, ...)."""
    combos = np.asarray(combos, np.int64).reshape(len(combos), -1)
    if len(attrs) == 1:
        return ((attrs[0], combos[:, 0]),), None, None
    starts, ends = _parent_runs(combos)
    parents = combos[starts, :-1]
    if len({tuple(p) for p in parents.tolist()}) != len(parents):
        raise ValueError("a side's combinations must be in grouped order (each parent's children one run)")
    groups: list[list] = []  # [first parent, parents, sets]
    for i, (s, e) in enumerate(zip(starts, ends)):
        sets = tuple(combos[s:e, -1].tolist())
        if groups and groups[-1][2] == sets:
            groups[-1][1] += 1
        else:
            groups.append([i, 1, sets])
    if len({g[2] for g in groups}) != len(groups):
        raise ValueError("a side's combinations must be in grouped order (parents of one signature adjacent)")
    factors = tuple((attrs[c], parents[:, c]) for c in range(len(attrs) - 1))
    return factors, attrs[-1], tuple((first, count, np.array(sets, np.int64)) for first, count, sets in groups)


@dataclass(frozen=True, eq=False)
class ProductPlan(DenseAnswers):
    """Relaxed answers of product queries (census table cells), batched: no loop over queries.

    A query restricts each attribute a to a value set S_a; on relaxed rows its answer is
    (1/n') Σ_r Π_a Σ_{v∈S_a} P_a[v, r]. Per attribute, the summed probabilities of all its
    distinct sets are S_a = M_aᵀ · P_a (M_a the 0/1 membership matrix), formed without most of
    that matmul: a set of one value is that row of P_a as it is, and only the other sets (ranges,
    totals) are one small matmul. The queries fall in parts (by where they are published: the
    per-block cells, the unit's, when that is cheaper than one part), and in each part the
    attributes are split in two sides: each side's distinct set combinations become rows of the
    row-wise product of their S_a rows (L and R), and one matmul L · Rᵀ answers every
    (left × right) combination of the part at once. The dense vector is every part's whole
    product: queries are read from it where they lie (``dense_index``), by-products carry no loss,
    and no step gathers or scatters the answers. Splits and parts are the ones of least cost
    (:func:`_best_split`): a matmul computes some combinations no query asks for, and in exchange
    the row-wise products, which are memory traffic, are few (a 24-block tract with every SF1
    table: per block 72 × 551 product rows and for the unit 3 × 1,664, instead of 25 groups ×
    4,051). A side's rows are built in two levels (:func:`_side_layout`): the distinct
    combinations of all its attributes but the last (parents), then each combination as its
    parent's row times the last attribute's set sums. Parents whose children have the same sets
    are grouped, so each group's rows are a broadcast product of two small blocks and the big
    level is never gathered, nor its cotangent's shares materialised: they are two reductions of
    the group's block.

    The gradient is written by hand, as plain contractions: Ḡ holds the answers' cotangents at
    their (left, right) places; L̄ = Ḡ · R and R̄ = Ḡᵀ · L; each factor's share is the side's
    cotangent times the level's other factors (never a division), summed into its attribute's
    set rows or its parents' rows (reduced over a group's block); and P̄_a is the transpose of
    forming S_a. Parents of three attributes or more are one attribute's set rows times a few rows
    of the others' combinations (:func:`_parent_factors`), and the logits a fit keeps are one array
    per attribute (:meth:`state_of`): both so that the step's ops read fewer and smaller arrays
    (XLA's count of the 85-block step's bytes: 102.9 MB a run-step before, bench/run.py prints it). Operands are cast to the matmul dtype, every product and accumulation stays
    float32. Tested against autodiff of the plain definition (:func:`reference_product_answers`).

    ``kernel="pallas"`` runs each part on the fused GPU kernels of :mod:`reconstruct.fused` instead: no side's rows
    are formed in memory (each kernel forms its tiles from the set sums), and only the set sums are kept.
    """

    layout: Layout
    memberships: tuple[tuple[tuple[int, ...], ...], ...]  # per attribute, per set: its values
    parts: tuple[_Part, ...]
    num_queries: int

    @property
    def key(self):
        return ("product", self.layout.sizes, self.memberships, self.parts)

    @functools.cached_property
    def _hash(self):
        return hash(self.key)

    def __hash__(self):
        return self._hash

    def __eq__(self, other):
        return isinstance(other, ProductPlan) and (self is other or self.key == other.key)

    @classmethod
    def build(cls, workload, split: tuple[Sequence[int], Sequence[int]] | None = None,
              by_level: bool | None = None) -> "ProductPlan":
        """The plan of a census workload: its queries in one part, or one part per publication
        level (``workload.levels()``: block, areas, unit) when that costs less, each on the
        cheapest split of its attributes; ``split`` (left attributes, right attributes) and
        ``by_level`` force a choice (tests, benches)."""
        d = len(workload.domain)
        q = np.array(workload.queries, dtype=np.int64).reshape(-1, d)
        n_sets = [len(s) for s in workload.value_sets]
        if d == 1:  # one attribute: the other side is the empty product (a row of ones)
            q = np.concatenate([q, np.zeros((len(q), 1), np.int64)], axis=1)
            n_sets = n_sets + [1]
        everything = np.arange(len(q))
        one_cost, one = _Part.of(q, everything, n_sets, split)
        options = [(one_cost, (one,))]
        levels = workload.levels() if hasattr(workload, "levels") and len(q) else np.array([])
        if by_level is not False and len(set(levels.tolist())) > 1:
            parts = [_Part.of(q, np.flatnonzero(levels == lv), n_sets, split) for lv in dict.fromkeys(levels.tolist())]
            options.append((sum(c for c, _ in parts), tuple(p for _, p in parts)))
        if by_level is True:
            options = options[-1:]
        _, parts = min(options, key=lambda o: o[0])
        return cls(layout=Layout.of(workload.domain.sizes),
                   memberships=tuple(tuple(tuple(sorted(s)) for s in sets) for sets in workload.value_sets),
                   parts=parts, num_queries=len(q))

    @functools.cached_property
    def _bases(self) -> tuple[int, ...]:
        """Where each part's (left rows × right rows) block starts in the dense vector."""
        return tuple(int(x) for x in np.cumsum([0] + [len(p.left_combos) * len(p.right_combos) for p in self.parts]))

    @property
    def dense_size(self) -> int:
        return self._bases[-1]

    @functools.cached_property
    def dense_index(self) -> np.ndarray:
        """Each query's place in the dense vector (workload order): the dense vector is every
        part's whole (left × right) product, by-products included, so that no step gathers the
        queries out of it or scatters their cotangents back."""
        idx = np.zeros(self.num_queries, np.int64)
        for base, p in zip(self._bases, self.parts):
            idx[np.array(p.queries, np.int64)] = (base + np.array(p.query_left, np.int64) * len(p.right_combos)
                                                  + np.array(p.query_right, np.int64))
        return idx

    def _n_sets(self, j: int) -> int:
        return len(self.memberships[j]) if j < len(self.memberships) else 1

    @property
    def activation_rows(self) -> int:
        """Rows of n' floats one run keeps for its gradient: the set sums and every part's products."""
        return sum(len(p.left_combos) + len(p.right_combos) for p in self.parts) + sum(len(m) for m in self.memberships)

    @functools.cached_property
    def _set_rows(self):
        return tuple(_set_rows(self.layout.sizes[j], self.memberships[j]) for j in range(len(self.memberships)))

    def flops_per_step(self, rows: int) -> float:
        """The matmuls of a step: every part's answers and both sides' cotangents, and the sums of
        the sets that are not single values, with their cotangents (the row-wise products, the
        scatter-adds and the single values read as they are: passes, not matmuls)."""
        cells = sum(len(p.left_combos) * len(p.right_combos) for p in self.parts)
        return self._step_flops(rows, cells)

    def useful_flops_per_step(self, rows: int) -> float:
        """``flops_per_step`` less the by-products: a part's (left × right) cells that are no query
        cost the same multiply-adds and answer nothing."""
        return self._step_flops(rows, self.num_queries)

    def _step_flops(self, rows: int, cells: int) -> float:
        """2n' per multiply-add: three matmul cells (the answer and both sides' cotangents) per cell
        computed, and the other sets' sums with their cotangents."""
        sets = 2 * sum(other.size for _, other, _, _ in self._set_rows)
        return 2.0 * rows * (3 * cells + sets)

    def answers(self, P: jax.Array, dtype: str = "float32", kernel: str = "xla") -> jax.Array:
        """Relaxed answers in workload order."""
        return self.dense_answers(P, dtype, kernel)[jnp.asarray(self.dense_index)]

    def dense_answers(self, P: jax.Array, dtype: str = "float32", kernel: str = "xla") -> jax.Array:
        """The dense vector (see ``dense_index``) of the probabilities P (W × n'), with the
        hand-written gradient; ``kernel="pallas"``: each part by the fused kernels of :mod:`reconstruct.fused`."""
        return self._dense_fn(dtype, kernel)[0](P)

    def dense_answers_of_logits(self, logits, dtype: str = "float32", kernel: str = "xla") -> jax.Array:
        """``dense_answers`` of the softmax of recentred logits, one hand-written gradient for both:
        the RAP step's entry point. ``logits`` is the per-attribute state (:meth:`state_of`) the step
        keeps, or the stacked (W × n') array (split first)."""
        if not isinstance(logits, tuple):
            logits = split(logits, self.layout)
        return self._dense_fn(dtype, kernel)[1](logits)

    def state_of(self, logits: jax.Array) -> tuple[jax.Array, ...]:
        """The form a RAP fit keeps its logits in for this plan: one array per attribute, so that no op of the
        step reads a slice of the whole (W × n') array (see :func:`reconstruct.relaxed.split`)."""
        return split(logits, self.layout)

    @functools.lru_cache(maxsize=64)  # per (plan, dtype, kernel); bounded: a sweep builds many plans
    def _dense_fn(self, dtype: str, kernel: str = "xla"):
        """The dense answers of P and of logits, each a jax.custom_vjp function whose gradient is :meth:`_backward`
        (the forward pass keeps the set sums and each side's rows it reuses); with ``kernel="pallas"``, the fused
        kernels' forward and backward (:meth:`_fused_forward`, :meth:`_fused_backward`: only the set sums kept)."""
        if kernel not in ("xla", "pallas"):
            raise ValueError(f"kernel must be 'xla' or 'pallas', got {kernel!r}")
        dt = DTYPES[dtype]
        if kernel == "pallas":
            return self._vjp_pair(lambda P, norm: self._fused_forward(P, dt, norm),
                                  lambda res, g, norm: self._fused_backward(res, g, dt, norm))
        parts = self._sides()
        return self._vjp_pair(lambda P, norm: self._forward(P, dt, parts, norm),
                              lambda res, g, norm: self._backward(res, g, dt, parts, norm))

    def _vjp_pair(self, forward, backward):
        """:meth:`_dense_fn`'s two jax.custom_vjp functions (of P, of logits) from a plan's ``forward(P, normalised)``
        -> (dense answers, residuals) and ``backward(residuals, g, normalised)`` -> each attribute's dP."""
        @jax.custom_vjp
        def dense(P):
            return forward(split(P, self.layout), False)[0]

        def fwd(P):
            return forward(split(P, self.layout), False)

        def bwd(res, g):
            return (jnp.concatenate(backward(res, g, False), axis=0),)

        dense.defvjp(fwd, bwd)

        @jax.custom_vjp
        def of_logits(L):
            return forward(softmax_parts(L), True)[0]

        def fwd_l(L):
            P = softmax_parts(L)
            out, res = forward(P, True)
            return out, (P, res)

        def bwd_l(res, g):
            P, inner = res
            return (softmax_parts_backward(P, backward(inner, g, True)),)

        of_logits.defvjp(fwd_l, bwd_l)
        return dense, of_logits

    @functools.cached_property
    def _fused_sides(self) -> tuple:
        """Per part, for the fused kernels: (left attributes, each left row's set-sum row of each of them, the same
        for the right); the padding attribute's one row of ones last among the set sums."""
        rows_of_set = [r for _, _, r, _ in self._set_rows] + [np.zeros(1, np.int64)]

        def rows(attrs, combos):
            combos = np.asarray(combos, np.int64).reshape(len(combos), len(attrs))
            return np.stack([rows_of_set[a][combos[:, k]] for k, a in enumerate(attrs)], axis=1)

        return tuple((p.left, rows(p.left, p.left_combos), p.right, rows(p.right, p.right_combos)) for p in self.parts)

    def fused_cache_reads(self, rows: int) -> int:
        """The fused kernels' modelled reads a run-step, every part's (:func:`reconstruct.fused.cache_reads`)."""
        return int(sum(sum(fused.cache_reads((len(li), len(left)), (len(ri), len(right)), rows).values())
                       for left, li, right, ri in self._fused_sides))

    def _fused_forward(self, P, dt, normalised: bool = False):
        """The dense answers of P by :func:`reconstruct.fused.answers`, part by part, and the set sums (all the
        gradient reads: the kernels form the product rows again)."""
        S = self._set_sums(P, normalised)
        outs = [fused.answers(([S[a] for a in left], li), ([S[a] for a in right], ri), dt).reshape(-1)
                for left, li, right, ri in self._fused_sides]
        out = outs[0] if len(outs) == 1 else jnp.concatenate(outs)
        return out / P[0].shape[1], S

    def _fused_backward(self, S, g, dt, normalised: bool = False):
        """:meth:`_backward` by :func:`reconstruct.fused.cotangents`."""
        n = S[-1].shape[1]
        g = g / n
        dS = [None] * len(S)
        for i, (left, li, right, ri) in enumerate(self._fused_sides):
            G = g[self._bases[i]:self._bases[i + 1]].reshape(len(li), len(ri))
            d_left, d_right = fused.cotangents(G, ([S[a] for a in left], li), ([S[a] for a in right], ri), dt,
                                               ([dS[a] for a in left], [dS[a] for a in right]))
            for a, x in zip(left + right, list(d_left) + list(d_right)):
                dS[a] = x  # the earlier parts' cotangent of a, added to in place
        return self._set_sums_cotangent(dS, n, normalised)

    def _sides(self) -> list:
        """Each part's (left, right) side layouts (:func:`_side_layout`), with set indices turned into rows of the set
        sums (the padding attribute's one row of ones last)."""
        rows_of_set = [r for _, _, r, _ in self._set_rows] + [np.zeros(1, np.int64)]

        def side(attrs, combos):
            factors, last, groups = _side_layout(attrs, combos)
            factors = tuple((a, rows_of_set[a][val]) for a, val in factors)
            if groups is not None:
                groups = tuple((first, count, rows_of_set[last][sets]) for first, count, sets in groups)
            return _parent_factors(factors), last, groups

        return [(side(p.left, p.left_combos), side(p.right, p.right_combos)) for p in self.parts]

    def _set_sums(self, P, normalised: bool = False):
        """Per attribute, the (sets × n') summed probabilities, float32, rows in ``rows_of_set``
        order: the single values as they are, then the other sets by one small exact matmul. ``P``
        holds each attribute's (size × n') probabilities (domain order: the plan's layout stacks
        attributes in it)."""
        out = []
        n = P[0].shape[1]
        for j, (direct, other, _, full) in enumerate(self._set_rows):
            Pj = P[j]
            pieces = [_gather(Pj, direct)] if len(direct) else []
            if other.shape[1]:
                pieces.append(_by_constant(other.T, Pj))
            if full:  # every value's sum: 1 where P is a softmax's (``normalised``)
                pieces.append(jnp.ones((1, n), jnp.float32) if normalised else jnp.sum(Pj, axis=0, keepdims=True))
            out.append(pieces[0] if len(pieces) == 1 else jnp.concatenate(pieces, axis=0))
        return out + [jnp.ones((1, n), jnp.float32)]

    def _set_sums_cotangent(self, dS, n, normalised: bool = False):
        """The transpose of :func:`set_sums`: the cotangent of each attribute's (size × n') probabilities (where
        P is a softmax's, ``normalised``, the full set's row is constant and its cotangent is not formed: it is the
        same for every value, which the softmax's backward cancels)."""
        out = []
        for j, (direct, other, _, full) in enumerate(self._set_rows):
            k, m = len(direct), other.shape[1]
            dP = None
            if dS[j] is not None:  # None: an attribute no query restricts
                dP = _scatter(dS[j][:k], direct, self.layout.sizes[j]) if k else None
                if m:
                    more = _by_constant(other, dS[j][k:k + m])
                    dP = more if dP is None else dP + more
                if full and not normalised:  # every value gets the full set's cotangent
                    every = jnp.broadcast_to(dS[j][k + m:k + m + 1], (self.layout.sizes[j], n))
                    dP = every if dP is None else dP + every
            out.append(jnp.zeros((self.layout.sizes[j], n), jnp.float32) if dP is None else dP)
        return out

    def _side_cotangent(self, S, layout, kept, dX, dS):
        """The side's cotangent dX (rows × n'): each row's share summed into its parent's row and
        its set's row (per group, two reductions of its block; or scatter-adds of the gathered
        shares); then each parent attribute's share (the parents' cotangent times the other
        attributes' set rows) summed into its set rows."""
        factors, last, groups = layout
        parents, _ = kept
        if groups is not None and not _broadcast(groups):
            par, own = _of_rows(groups)
            _accumulate(dS, last, _scatter(dX * _gather(parents, par, True), own, self._n_sets(last)))
            dX = _scatter(dX * _gather(S[last], own, True), par, parents.shape[0])
        elif groups is not None:
            d_parents, d_sets, row = [], [], 0
            for first, count, sets in groups:
                c, own = len(sets), _gather(S[last], sets, True)
                # each term its own slice of dX (strided over a group's parents, or one parent's
                # sets), fused into the sum: a slice of the group's block read by both sums was
                # copied out first
                d_parents.append(_pairwise_sum([dX[row + j:row + count * c:c] * own[j] for j in range(c)]))
                d_sets.append(_pairwise_sum([dX[row + i * c:row + (i + 1) * c] * parents[first + i]
                                             for i in range(count)]))
                row += count * c
            all_sets = np.concatenate([sets for _, _, sets in groups])
            _accumulate(dS, last, _scatter(d_sets[0] if len(d_sets) == 1 else jnp.concatenate(d_sets), all_sets,
                                         self._n_sets(last)))
            dX = d_parents[0] if len(d_parents) == 1 else jnp.concatenate(d_parents)
        big, rest = factors
        sources = [(S[a], val, a) for a, val in big]
        if rest is not None:
            sources.append((_rest_rows(S, rest[0]), rest[1], None))
        rows = [_gather(src, val, True) for src, val, _ in sources]
        for i, (src, val, a) in enumerate(sources):
            share = _scatter(_product([dX] + rows[:i] + rows[i + 1:]), val, src.shape[0])
            if a is not None:
                _accumulate(dS, a, share)
                continue
            # the rest's combinations' cotangent (a few rows) into each of their attributes' set rows
            each = [_gather(S[b], v) for b, v in rest[0]]
            for k, (b, v) in enumerate(rest[0]):
                _accumulate(dS, b, _scatter(_product([share] + each[:k] + each[k + 1:]), v, self._n_sets(b)))

    def _forward(self, P, dt, parts, normalised: bool = False):
        """The dense answers of P, with what the gradient reads (the set sums, each side's rows)."""
        S = self._set_sums(P, normalised)
        outs, kept = [], []
        for left_tree, right_tree in parts:
            left, right = _side_product(S, left_tree), _side_product(S, right_tree)
            L, R = left[-1], right[-1]
            outs.append(block_answers(L, R, dt).reshape(-1))
            kept.append((left, right))
        out = outs[0] if len(outs) == 1 else jnp.concatenate(outs)
        return out / P[0].shape[1], (S, kept)

    def _backward(self, res, g, dt, parts, normalised: bool = False):
        """The cotangent of each attribute's (size × n') probabilities from the answers' cotangent ``g``."""
        S, kept = res
        n = S[-1].shape[1]
        g = g / n
        dS = [None] * len(S)
        for i, ((left_tree, right_tree), (left, right)) in enumerate(zip(parts, kept)):
            G = g[self._bases[i]:self._bases[i + 1]].reshape(left[-1].shape[0], right[-1].shape[0])
            self._side_cotangent(S, left_tree, left, plan_dot(G, right[-1], dt), dS)
            self._side_cotangent(S, right_tree, right, plan_dot(G.T, left[-1], dt), dS)
        return self._set_sums_cotangent(dS, n, normalised)


def _consecutive(idx) -> int | None:
    """The first of static rows ``idx`` when they are consecutive (a slice), else None."""
    return int(idx[0]) if len(idx) and np.array_equal(idx, np.arange(idx[0], idx[0] + len(idx))) else None

def _gather(S, idx, again=False):
    """S[idx] for static rows ``idx``, as a slice when they are consecutive. ``again``: the
    backward's gather of rows the forward gathered too, written so that it is not merged
    with the forward's (each is then fused into its one consumer, instead of materialised
    once and read twice: measured faster); behind an optimization barrier, which XLA's
    simplifier cannot see through (a clamp of in-range constant indices it folded away, and
    merged the two), so the backward's products read the small set rows, not a gathered copy."""
    start = _consecutive(idx)
    if start is not None:
        return S[start:start + len(idx)]
    rows = jnp.asarray(idx, jnp.int32)
    return jnp.take(jax.lax.optimization_barrier(S), rows, axis=0, mode="clip") if again else S[rows]

def _scatter(x, idx, segments):
    """The transpose of :func:`gather`: rows of x summed into ``segments`` rows at ``idx``."""
    start = _consecutive(idx)
    if start is not None:
        return jnp.pad(x, ((start, segments - start - len(idx)), (0, 0)))
    return _segment_sum(x, idx, segments)

def _accumulate(dS, a, x):
    """dS[a] += x, where None is zero (no zero buffers to fill and add to)."""
    dS[a] = x if dS[a] is None else dS[a] + x

def _product(rows):
    return functools.reduce(jnp.multiply, rows)

def _broadcast(groups) -> bool:
    """Whether a side's big level is formed group by group as broadcasts (see
    :func:`_side_layout`) rather than by gathering each row's parent and set: the broadcasts
    read and write less, but each group costs a few kernels, so sides of many small groups
    are gathered, and each group's sums are unrolled, so sides of groups of over
    ``BROADCAST_MAX_TERMS`` parents or sets are gathered too (a unit of hundreds of blocks on
    a side would otherwise compile a sum of hundreds of terms). Measured on the SF1 tables
    (the minimum of 40-60 alternating trials of the step's gradient, one device per core):
    the 85-block tract's 823 × 1,000 right side (6 groups) 15% faster broadcast, the
    24-block tract's sides (551 × 300 in 6 groups, 72 × 300 in 1) 9% faster."""
    return len(groups) <= BROADCAST_MAX_GROUPS and all(max(count, len(sets)) <= BROADCAST_MAX_TERMS
                                                      for _, count, sets in groups)

def _of_rows(groups):
    """Each row's parent and last-attribute set row (the gathered form of the groups)."""
    par = np.concatenate([np.repeat(np.arange(first, first + count), len(sets))
                          for first, count, sets in groups])
    own = np.concatenate([np.tile(sets, count) for _, count, sets in groups])
    return par, own

#: a side's parents are formed as one factor times the other factors' combinations when there are at most this
#: many combinations per parent (see :func:`_parent_factors`)
REST_MAX_SHARE = 0.5


def _parent_factors(factors):
    """A side's parent factors ((attribute, set row of each parent), ...) as (big, rest): with three or more, the
    factor of most distinct sets stays a factor (``big``) and the others' distinct combinations become a few rows of
    their own (``rest``: (their factors at each combination, each parent's combination)), formed once per step, so
    that each parent is two gathered rows, not one per attribute, and its cotangent two shares, not one per
    attribute (the 2010-sized tract's 193 parents of age × sex × Hispanic origin sets: 9 combinations of sex and
    origin). ``rest`` is None where that does not pay (fewer than three factors, or combinations barely shared).

    >>> big, rest = _parent_factors(((1, np.array([0, 1, 2, 3])), (2, np.array([0, 1, 0, 1])), (3, np.array([0, 0, 0, 0]))))
    >>> big[0][0], rest[1].tolist(), [(a, v.tolist()) for a, v in rest[0]]
    (1, [0, 1, 0, 1], [(2, [0, 1]), (3, [0, 0])])
    """
    if len(factors) < 3:
        return tuple(factors), None
    first = max(range(len(factors)), key=lambda k: (len(np.unique(factors[k][1])), -k))
    others = [f for k, f in enumerate(factors) if k != first]
    combos, which = np.unique(np.stack([v for _, v in others], axis=1), axis=0, return_inverse=True)
    if len(combos) > REST_MAX_SHARE * len(factors[0][1]):  # combinations barely shared: the flat product reads less
        return tuple(factors), None
    return (factors[first],), (tuple((a, combos[:, k]) for k, (a, _) in enumerate(others)), np.asarray(which).reshape(-1))


def _rest_rows(S, rest_factors):
    """The rows of the rest's combinations (see :func:`_parent_factors`): a product of a few gathered set rows."""
    return _product([_gather(S[a], v) for a, v in rest_factors])


def _side_product(S, layout):
    """The side's rows (see :func:`_side_layout`): its parents' (or, with one attribute, its
    only) rows, a row-wise product of gathered set rows, then each row as its parent's row
    times its set's (per group a broadcast, or gathered). Returns (parents, rows) (the
    backward reads both)."""
    (big, rest), last, groups = layout
    rows = [_gather(S[a], val) for a, val in big]
    if rest is not None:
        rows.append(_gather(_rest_rows(S, rest[0]), rest[1]))
    parents = _product(rows)
    if groups is None:
        return parents, parents
    if not _broadcast(groups):
        par, own = _of_rows(groups)
        return parents, _gather(parents, par) * _gather(S[last], own)
    n = parents.shape[1]
    blocks = [(parents[first:first + count, None, :] * _gather(S[last], sets)[None]).reshape(-1, n)
              for first, count, sets in groups]
    return parents, blocks[0] if len(blocks) == 1 else jnp.concatenate(blocks, axis=0)


def reference_product_answers(workload, P: jax.Array) -> jax.Array:
    """Census answers by their plain definition, one query at a time (for tests: autodiff of this
    is the reference gradient): (1/n') Σ_r Π_a Σ_{v∈S_a(q)} P_a[v, r]."""
    layout = Layout.of(workload.domain.sizes)
    out = []
    for q in workload.queries:
        prod = jnp.ones(P.shape[1], P.dtype)
        for j, s in enumerate(q):
            rows = P[layout.rows_of(j)]
            prod = prod * rows[np.array(sorted(workload.value_sets[j][s]), dtype=np.int64)].sum(axis=0)
        out.append(prod.sum() / P.shape[1])
    return jnp.stack(out)
