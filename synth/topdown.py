"""A TopDown-style consistent release: noisy tables at every geographic level, then estimates made
non-negative, integer and consistent from the top down (children add up to their parent)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from synth.mechanism import Mechanism, PrivacyError, Relation, parse_relation
from synth.noise import noise_scale

#: The 2020 production shares of the person-file budget per geographic level (out of 4099:
#: 104 / 1440 / 447 / 687 / 1256 / 165), renormalised over the levels a hierarchy has.
PRODUCTION_SHARES = {"national": 104 / 4099, "state": 1440 / 4099, "county": 447 / 4099, "tract": 687 / 4099,
                     "block_group": 1256 / 4099, "block": 165 / 4099}


def level_shares(levels: list[str], shares: dict[str, float] | None = None) -> dict[str, float]:
    """Each level's share of ε: the given ``shares`` or the 2020 production shares, renormalised over
    ``levels`` (a level the production split does not name must be given a share)."""
    base = dict(PRODUCTION_SHARES if shares is None else shares)
    missing = [lv for lv in levels if lv not in base]
    if missing:
        raise PrivacyError(f"no budget share for levels {missing}; give release.topdown.shares for every level")
    if any(base[lv] <= 0 for lv in levels):
        raise PrivacyError("every level's budget share must be positive")
    total = sum(base[lv] for lv in levels)
    return {lv: base[lv] / total for lv in levels}


@dataclass
class Tree:
    """A geographic hierarchy below one root: per level (coarsest first) its nodes' ids, each
    node's parent (index into the level above; -1 for the root) and its exact counts of the
    person-level queries (nodes × queries, int64)."""

    levels: list[str]
    ids: list[np.ndarray]
    parent: list[np.ndarray]
    counts: list[np.ndarray]
    total_queries: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # queries counting everyone

    def check(self) -> None:
        if len(self.ids[0]) != 1:
            raise PrivacyError("a TopDown tree has one root")
        for lv in range(1, len(self.levels)):
            if self.parent[lv].min() < 0 or self.parent[lv].max() >= len(self.ids[lv - 1]):
                raise PrivacyError(f"level {self.levels[lv]}: a node's parent is not a node of the level above")


def measure(tree: Tree, epsilon: float, backend, relation: Relation | str, cells_per_person: int,
            shares: dict[str, float] | None = None, runs: int | None = None,
            invariants: tuple[str, ...] = ()) -> tuple[list[np.ndarray], Mechanism]:
    """Noisy measurements of every query at every level: discrete Laplace on int64 counts through
    ``backend``, level l at scale Δ/(share_l · ε). A person lies in one node of each level, so a
    level's L1 sensitivity is the most queries one person lies in (``cells_per_person``), doubled
    under replace-one (the person may move to another node); the levels compose to ε. The
    ``root_total`` invariant publishes the root's total queries exactly (declared, not in ε).
    ``runs`` releases that many times at once (the auditor's batches)."""
    relation = parse_relation(relation)
    tree.check()
    sh = level_shares(tree.levels, shares)
    delta = cells_per_person * (2 if relation is Relation.REPLACE_ONE else 1)
    noisy, per_level = [], {}
    for lv, counts in zip(tree.levels, tree.counts):
        scale, figure = noise_scale(delta, epsilon * sh[lv], backend)
        if runs is None:
            y = backend.add(counts, scale)
        else:
            y = backend.add(np.broadcast_to(counts, (int(runs), *counts.shape)), scale)
        per_level[lv] = {"share": sh[lv], "epsilon": epsilon * sh[lv], "scale": scale,
                         **({"backend_epsilon": figure} if figure is not None else {})}
        noisy.append(y)
    if "root_total" in invariants and len(tree.total_queries):
        noisy[0] = np.array(noisy[0], copy=True)
        noisy[0][..., 0, tree.total_queries] = tree.counts[0][0, tree.total_queries]
    mech = Mechanism("topdown", relation, delta * len(tree.levels), epsilon, None, details={
        "levels": per_level, "cells_per_person": cells_per_person, "sensitivity_per_level": delta,
        "composition": "basic: the levels' ε add up to ε",
        "invariants": list(invariants) or "none", "reference": "2020 Census TopDown, person file budget split"})
    return noisy, mech


def project_simplex(y: np.ndarray, total: np.ndarray) -> np.ndarray:
    """Column by column, the non-negative z closest to y (Euclidean) with Σ z = total: the
    children's estimates of one cell given their parent's, as the TopDown estimation step solves it
    for one query (a projection onto a scaled simplex; closed form)."""
    y = np.asarray(y, dtype=np.float64)
    total = np.asarray(total, dtype=np.float64)
    n = y.shape[0]
    u = -np.sort(-y, axis=0)
    css = np.cumsum(u, axis=0) - total[None, :]
    k = np.arange(1, n + 1)[:, None]
    ok = u - css / k > 0
    rho = n - 1 - np.argmax(ok[::-1], axis=0)
    tau = css[rho, np.arange(y.shape[1])] / (rho + 1)
    z = np.maximum(y - tau[None, :], 0.0)
    z[:, total <= 0] = 0.0
    return z


def round_keeping_sums(z: np.ndarray, total: np.ndarray) -> np.ndarray:
    """Integers within one of ``z`` (which is non-negative, each column summing to ``total``) whose
    columns still sum to ``total``: each entry's floor, plus one for the largest fractional parts
    (the rounding that keeps the parent totals)."""
    fl = np.floor(z + 1e-9)
    rem = (np.asarray(total) - fl.sum(axis=0)).round().astype(np.int64)
    order = np.argsort(-(z - fl), axis=0, kind="stable")
    rank = np.empty_like(order)
    np.put_along_axis(rank, order, np.arange(z.shape[0])[:, None].repeat(z.shape[1], axis=1), axis=0)
    return (fl + (rank < rem[None, :])).astype(np.int64)


def estimate(tree: Tree, noisy: list[np.ndarray]) -> list[np.ndarray]:
    """Top-down estimation: the root's noisy counts made non-negative integers; then, parent by parent
    and query by query, its children's non-negative estimates closest to their noisy measurements
    subject to adding up to the parent's fixed estimate, rounded to integers that keep it. Every
    child sum equals its parent in every query; only one parent's children are held at a time."""
    est = [np.maximum(np.rint(noisy[0]), 0).astype(np.int64)]
    for lv in range(1, len(tree.levels)):
        out = np.zeros_like(tree.counts[lv])
        parents = tree.parent[lv]
        for p in range(len(tree.ids[lv - 1])):
            kids = np.flatnonzero(parents == p)
            if kids.size == 0:
                continue
            total = est[lv - 1][p]
            z = project_simplex(noisy[lv][kids], total)
            out[kids] = round_keeping_sums(z, total)
        est.append(out)
    return est
