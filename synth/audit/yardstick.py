"""The audit's own yardstick: each published measurement's sensitivity and the budget a declared ε allows.

Derived from the neighbouring relation, the table definitions and OpenDP's privacy maps alone: the
sensitivity of a unit's tables is the most one person of the unit can move them, found by brute force
over every person the unit could lose, gain or change (every person type, in every block); the zCDP budget
of an (ε, δ) release is recomputed here and its conversion checked by OpenDP's map. Nothing here reads the
code that publishes (``synth``), so an error in how a release derives its noise cannot move what the audit
expects of that noise (``tests/experiments/test_yardstick.py`` holds this module to that).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from censusrecon.microdata.domain import Domain
from censusrecon.microdata.marginals import Workload

#: the neighbouring relations, for the privacy unit one person (one row)
RELATIONS = ("add_remove", "replace_one")
#: person types enumerated by the brute force at most (the census person domain has 29,232)
TYPE_LIMIT = 200_000
#: types per chunk of the brute force (its (types × cells) 0/1 matrix stays near 150 MB for 70,000 cells)
CHUNK = 2000


def relation_of(value) -> str:
    """The relation's name from a config value or any enum whose value is the name.

    >>> relation_of("replace_one")
    'replace_one'
    """
    name = getattr(value, "value", value)
    if name not in RELATIONS:
        raise ValueError(f"unknown neighbouring relation {value!r}; the relations are {', '.join(RELATIONS)}")
    return name


def cells_of(workload, codes: np.ndarray) -> np.ndarray:
    """(rows × queries) 0/1: the released cells each row is counted in, from the tables' definitions (each
    query a set of values per attribute, or a marginal's cell), as exact answers count them.

    >>> w = Workload(Domain.from_sizes({"A": 2, "B": 3}), [("A",), ("A", "B")])
    >>> cells_of(w, np.array([[1, 2]])).astype(int).tolist()
    [[0, 1, 0, 0, 0, 0, 0, 1]]
    """
    codes = np.atleast_2d(codes)
    if isinstance(workload, Workload):
        out = np.zeros((len(codes), workload.num_queries), dtype=bool)
        for off, m in zip(workload.offsets()[:-1], workload.marginals):
            idx = [workload.domain.index(a) for a in m]
            flat = np.ravel_multi_index(tuple(codes[:, i] for i in idx), workload.shape(m))
            out[np.arange(len(codes)), off + flat] = True
        return out
    q = np.array(workload.queries, dtype=np.int64).reshape(len(workload.queries), len(workload.domain))
    member = [workload.membership(j).astype(bool) for j in range(len(workload.domain))]
    # only the queries some row can be in are computed: a query is out for every row when one of its
    # attributes' sets holds none of the rows' values (another block's cells, for rows of one block)
    alive = np.ones(len(q), dtype=bool)
    for j, m in enumerate(member):
        alive &= m[np.unique(codes[:, j])].any(axis=0)[q[:, j]]
    keep = np.flatnonzero(alive)
    hit = np.ones((len(codes), keep.size), dtype=bool)
    for j, m in enumerate(member):
        hit &= m[codes[:, j]][:, q[keep, j]]
    out = np.zeros((len(codes), len(q)), dtype=bool)
    out[:, keep] = hit
    return out


def person_types(domain: Domain, block: int | None, limit: int = TYPE_LIMIT, seed: int = 0) -> np.ndarray:
    """Every person type of ``domain`` (BLOCK fixed to ``block``), or ``limit`` of them at random."""
    free = [j for j, a in enumerate(domain.names) if a != "BLOCK"]
    sizes = [domain.sizes[j] for j in free]
    total = int(np.prod(sizes))
    flat = np.arange(total) if total <= limit else np.random.default_rng(seed).choice(total, limit, replace=False)
    codes = np.zeros((len(flat), len(domain)), dtype=np.int64)
    codes[:, free] = np.stack(np.unravel_index(flat, sizes), axis=1)
    if "BLOCK" in domain:
        codes[:, domain.index("BLOCK")] = block
    return codes


@dataclass(frozen=True)
class Sensitivity:
    """The most one person moves a measurement's released counts (L1; for 0/1 cells also the squared L2),
    how it was found, and which change of one person attains it."""

    l1: int
    relation: str
    how: str
    worst: str
    exhaustive: bool = True
    #: the change that attains it, as rows of the domain: (the person lost or replaced, the person gained)
    pair: tuple = (None, None)

    def as_dict(self) -> dict:
        return {"sensitivity": self.l1, "relation": self.relation, "found_by": self.how, "attained_by": self.worst,
                "exhaustive": self.exhaustive}


def table_sensitivity(workload, persons: np.ndarray | None, relation, limit: int = TYPE_LIMIT) -> Sensitivity:
    """The L1 sensitivity of ``workload``'s counts under ``relation``: the most the counts move when the data
    lose a person of ``persons`` (the unit's own rows), gain any person (any type, in any block), or, under
    replace-one, one of ``persons`` becomes any person (any type, in any block).

    Census tables (product queries, per block, area and unit) by brute force over every person type in every
    block: ``|c(x)| + |c(y)| - 2|c(x) ∩ c(y)|`` for the replaced person x and their replacement y, grouped by the
    cells two blocks share. k-way marginals from their definition: each marginal counts every person in exactly
    one of its cells. ``persons`` None: any person of the domain may be replaced.

    >>> w = Workload(Domain.from_sizes({"A": 2, "B": 3}), [("A",), ("A", "B")])
    >>> table_sensitivity(w, None, "replace_one").l1, table_sensitivity(w, None, "add_remove").l1
    (4, 2)
    """
    rel = relation_of(relation)
    if isinstance(workload, Workload):
        return _marginal_sensitivity(workload, rel)
    return _product_sensitivity(workload, persons, rel, limit)


def _marginal_sensitivity(workload: Workload, rel: str) -> Sensitivity:
    marg = len(workload.marginals)
    if rel == "add_remove":
        return Sensitivity(marg, rel, f"each of the {marg} marginals counts a person in exactly one of its cells",
                           "a person added or removed")
    # a replacement differing from the person in every attribute of at least two values leaves every marginal
    # that has such an attribute: two of its cells move
    movable = sum(any(workload.domain.size(a) > 1 for a in m) for m in workload.marginals)
    return Sensitivity(2 * movable, rel, f"{movable} of the {marg} marginals have an attribute a replacement can "
                       "change: one cell down and one up in each", "a person replaced by one differing in every "
                       "attribute")


def _product_sensitivity(workload, persons, rel: str, limit: int) -> Sensitivity:
    """Census tables: each query is a product of value sets, one of them a set of blocks (a block, an area's
    blocks, the unit's). Queries are grouped by their product over the other attributes (g) and their block
    set (k): ``C[g, k]`` counts them, so a type's cells in block b number ``Σ_g hit[t, g] Σ_k C[g, k] [b ∈ k]``
    and two persons' shared cells ``Σ_g hit[x, g] hit[y, g] Σ_k C[g, k] [bx, by ∈ k]``: every count is exact."""
    pr = _Products(workload, limit)
    t_add, b_add = np.unravel_index(int(np.argmax(pr.count)), pr.count.shape)
    found = (f"brute force over {len(pr.types):,} person types"
             f"{'' if pr.exhaustive else f' of {pr.n_types:,} (a sample)'} "
             f"in each of {pr.block_sets.shape[0]} blocks, {len(pr.q):,} cells")
    if rel == "add_remove":
        return Sensitivity(int(pr.count.max()), rel, found, f"a person of the type in most cells "
                           f"({int(pr.count.max())}) added in block {int(b_add)}", pr.exhaustive,
                           (None, pr.row(int(t_add), int(b_add))))
    xs_t, xs_b = pr.replaced(persons)
    best, worst, pair = _worst_replacement(pr, xs_t, xs_b)
    return Sensitivity(int(best), rel, found + ", every person of the unit replaced", worst, pr.exhaustive, pair)


class _Products:
    """A census workload's queries grouped by their product over the attributes other than BLOCK (``products``) and
    their block set: ``C[g, k]`` queries of product g over block set k; the person types (every one, or a sample of
    ``limit``) and each type's cells in each block (``count``)."""

    def __init__(self, workload, limit: int):
        dom = workload.domain
        self.names = names = list(dom.names)
        self.jb = jb = names.index("BLOCK") if "BLOCK" in names else None
        self.q = q = np.array(workload.queries, dtype=np.int64).reshape(len(workload.queries), len(names))
        self.member = member = [workload.membership(j).astype(bool) for j in range(len(names))]
        self.free = free = [j for j in range(len(names)) if j != jb]
        self.n_types = int(np.prod([dom.sizes[j] for j in free])) if free else 1
        self.exhaustive = self.n_types <= limit
        self.types = person_types(dom, 0 if jb is not None else None, limit)[:, free]
        self.products, g_of = np.unique(q[:, free], axis=0, return_inverse=True)
        g_of = g_of.ravel()
        self.block_sets = member[jb] if jb is not None else np.ones((1, 1), dtype=bool)  # (blocks × block sets)
        k_of = q[:, jb] if jb is not None else np.zeros(len(q), dtype=np.int64)
        self.C = np.zeros((len(self.products), self.block_sets.shape[1]), dtype=np.int64)
        np.add.at(self.C, (g_of, k_of), 1)
        self.universal = np.ones(len(self.products), dtype=bool)  # products every person type is counted in
        for col, j in enumerate(free):
            self.universal &= member[j][:, self.products[:, col]].all(axis=0)
        # (products × blocks): cells in each block
        self.per_block = (self.C @ self.block_sets.T.astype(np.int64)).astype(np.float32)
        self.count = np.concatenate([self.hits(self.types[i:i + CHUNK]).astype(np.float32) @ self.per_block
                                     for i in range(0, len(self.types), CHUNK)]).round().astype(np.int64)

    def hits(self, t: np.ndarray) -> np.ndarray:
        """(types × products): whether each type lies in each product's value sets."""
        out = np.ones((len(t), len(self.products)), dtype=bool)
        for col, j in enumerate(self.free):
            out &= self.member[j][t[:, col]][:, self.products[:, col]]
        return out

    def row(self, t: int, b: int) -> np.ndarray:
        """A person of type ``t`` in block ``b``, as a row of the domain."""
        r = np.zeros(len(self.names), dtype=np.int64)
        r[self.free] = self.types[t]
        if self.jb is not None:
            r[self.jb] = b
        return r

    def replaced(self, persons) -> tuple[np.ndarray, np.ndarray]:
        """The persons replace-one may replace, as (type, block): the unit's own (their types joining a sampled
        domain), or any type in any block when ``persons`` is None."""
        if persons is None:
            blocks = self.block_sets.shape[0]
            return np.tile(np.arange(len(self.types)), blocks), np.repeat(np.arange(blocks), len(self.types))
        free, jb = self.free, self.jb
        rows = np.unique(np.asarray(persons, dtype=np.int64), axis=0)
        key = {tuple(t): i for i, t in enumerate(self.types.tolist())}
        extra = [r[free] for r in rows if tuple(r[free].tolist()) not in key]
        if extra:  # a sampled domain: the unit's own types join the sample
            extra = np.unique(np.array(extra), axis=0)
            self.types = np.vstack([self.types, extra])
            self.count = np.vstack([self.count, (self.hits(extra).astype(np.float32) @ self.per_block).round()
                                    .astype(np.int64)])
            key = {tuple(t): i for i, t in enumerate(self.types.tolist())}
        xs_t = np.array([key[tuple(r[free].tolist())] for r in rows])
        xs_b = rows[:, jb] if jb is not None else np.zeros(len(rows), dtype=np.int64)
        return xs_t, xs_b


def _worst_replacement(pr: _Products, xs_t: np.ndarray, xs_b: np.ndarray) -> tuple[int, str, tuple]:
    """The replacement that moves the most cells, x of (``xs_t``, ``xs_b``) by any type in any block: the
    (x's block, y's block) pairs grouped by the block sets holding both (which decides their overlap), searched
    from the largest upper bound down, stopping where no bound can beat the best found."""
    count, block_sets, C, types, types_hits = pr.count, pr.block_sets, pr.C, pr.types, pr.hits
    patterns: dict = {}
    for bx in np.unique(xs_b):
        both = block_sets[bx][None, :] & block_sets  # (y's block × block sets)
        for by in range(block_sets.shape[0]):
            patterns.setdefault(both[by].tobytes(), (both[by], {}))[1].setdefault(int(bx), []).append(by)
    candidates = []  # (upper bound, shared cells per product, block of x, its y blocks, the x rows, y's counts)
    for shared_sets, by_bx in patterns.values():
        m = C @ shared_sets.astype(np.int64)  # shared cells per product when both persons lie in it
        floor = 2 * int(m[pr.universal].sum())  # every pair shares at least these
        for bx, bys in by_bx.items():
            cy = count[:, bys].max(axis=1)
            sel = np.flatnonzero(xs_b == bx)
            ub = count[xs_t[sel], bx] + int(cy.max()) - floor
            candidates.append((int(ub.max()), m, floor, bx, bys, sel, cy))
    best, worst, pair = -1, "", (None, None)
    for ub, m, floor, bx, bys, sel, cy in sorted(candidates, key=lambda c: -c[0]):
        if ub <= best:
            break
        weight = m.astype(np.float32)
        xt_all = xs_t[sel]
        own = count[xt_all, bx] + int(cy.max()) - floor  # each x's own upper bound, the most promising first
        order = np.argsort(-own, kind="stable")
        for s0 in range(0, len(order), 256):
            part = order[s0:s0 + 256]
            if own[part[0]] <= best:
                break
            xt = xt_all[part]
            hx = types_hits(types[xt]).astype(np.float32) * weight[None, :]
            for i in range(0, len(types), CHUNK):
                overlap = (hx @ types_hits(types[i:i + CHUNK]).T.astype(np.float32)).round().astype(np.int64)
                delta = count[xt, bx][:, None] + cy[None, i:i + CHUNK] - 2 * overlap
                k = int(delta.max())
                if k > best:
                    a, c = np.unravel_index(int(np.argmax(delta)), delta.shape)
                    by = next(b for b in bys if count[i + c, b] == cy[i + c])
                    best = k
                    pair = (pr.row(int(xt[a]), int(bx)), pr.row(i + int(c), int(by)))
                    worst = (f"a person in block {int(bx)} replaced by a type in block {int(by)} "
                             f"({'the same block' if by == bx else f'the two blocks have {int(m.sum())} cells in common'})")
    return best, worst, pair


def node_table_sensitivity(workload, present: np.ndarray, relation, nodes: int) -> Sensitivity:
    """The tables one level of a tree publishes per node (``workload`` over the person domain, no BLOCK):
    across the level's ``nodes``, under replace-one, a person may leave their node for another (no cell
    shared: the most cells of a present type plus the most of any type) or change type within it (its cells
    shared); ``present``: the person types (rows of the person domain) the level's data holds."""
    rel = relation_of(relation)
    one = table_sensitivity(workload, present, rel)
    if rel == "add_remove" or nodes < 2:
        return one
    most = table_sensitivity(workload, None, "add_remove").l1  # the most cells of any type
    px = cells_of(workload, np.unique(np.asarray(present, dtype=np.int64), axis=0)).sum(axis=1)
    across = int(px.max()) + most
    if across >= one.l1:
        return Sensitivity(across, rel, one.how + f"; a person moved to another of the level's {nodes} nodes",
                           "a person of the type in most cells moved to another node as the type in most cells",
                           one.exhaustive)
    return one


def detailed_sensitivity(relation) -> int:
    """A node's detailed histogram (one cell per person type): one cell moves under add/remove, two under
    replace-one (the person leaves one cell, in their node, for another, in theirs or another node's)."""
    return 1 if relation_of(relation) == "add_remove" else 2


def zcdp_rho(epsilon: float, delta: float) -> float:
    """The largest ρ whose zCDP converts to (ε, δ)-DP by ε = ρ + 2√(ρ ln(1/δ)) (Bun and Steinke 2016,
    Proposition 1.3), the conversion a zCDP release declares: ρ = (√(ln(1/δ) + ε) − √(ln(1/δ)))².

    >>> round(zcdp_rho(1.0, 1e-10), 6)
    0.010628
    """
    if not (epsilon > 0 and 0 < delta < 1):
        raise ValueError(f"ε must be positive and δ in (0, 1), got ε = {epsilon}, δ = {delta}")
    log = math.log(1 / delta)
    return (math.sqrt(log + epsilon) - math.sqrt(log)) ** 2


def opendp_epsilon(rho: float, delta: float) -> float:
    """The ε at ``delta`` that OpenDP's own privacy map gives a ρ-zCDP mechanism (its zCDP to (ε, δ)
    conversion with δ fixed, on a Gaussian mechanism of that ρ): the check that a declared conversion holds."""
    import opendp.prelude as dp

    dp.enable_features("contrib")
    space = dp.atom_domain(T=float, nan=False), dp.absolute_distance(T=float)
    scale = 1.0 / math.sqrt(2.0 * rho)  # ρ = Δ² / (2σ²) at Δ = 1
    meas = dp.c.make_fix_delta(dp.c.make_zCDP_to_approxDP(dp.m.make_gaussian(*space, scale)), delta)
    return float(meas.map(1.0)[0])


def smoothed_mixing(epsilon: float, n: int, cells: int, draws: int) -> float:
    """The least weight of the uniform in the smoothed histogram's mix (1 − δ)·p̂ + δ/m for ``draws`` i.i.d.
    draws to be ε-DP under replace-one, derived here, not read from the release: a draw's likelihood ratio
    between neighbours is at most 1 + (1 − δ)·m/(n·δ) (a cell gains 1/n of mass where its smoothed mass is at
    least δ/m), so ``draws`` of them spend draws·log(1 + (1 − δ)m/(nδ)) ≤ ε, i.e. δ ≥ m / (m + n·(e^{ε/draws} − 1))
    (Wasserman and Zhou 2010, §4.2).

    >>> round(smoothed_mixing(1.0, n=100, cells=10, draws=1), 6)
    0.054997
    """
    a = math.expm1(epsilon / draws)
    return min(1.0, cells / (cells + n * a))
