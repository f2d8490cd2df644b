"""Confidence-ranked candidate sets R: distinct rows ordered by a score, highest first."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from censusrecon.microdata.errors import CensusReconError


@dataclass(frozen=True, eq=False)
class Ranking:
    """Distinct row keys ordered from most to least confident, with their scores.

    For RAP-Rank the score is the row's multiplicity in the union of the K reconstructions;
    for a sampling baseline it is the row's frequency (or probability) under the prior.
    """

    keys: np.ndarray
    scores: np.ndarray

    def __post_init__(self) -> None:
        keys = np.asarray(self.keys, dtype=np.int64)
        scores = np.asarray(self.scores, dtype=np.float64)
        if keys.shape != scores.shape or keys.ndim != 1:
            raise CensusReconError(f"keys and scores must be equal-length 1-d arrays, got {keys.shape}, {scores.shape}")
        if np.unique(keys).size != keys.size:
            raise CensusReconError("a ranking holds each row once; keys repeat")
        if scores.size > 1 and np.any(np.diff(scores) > 0):
            raise CensusReconError("ranking scores must be non-increasing")
        object.__setattr__(self, "keys", keys)
        object.__setattr__(self, "scores", scores)

    def __len__(self) -> int:
        return self.keys.size

    def top(self, k: int) -> np.ndarray:
        return self.keys[:k]


def rank_by_score(keys: np.ndarray, scores: np.ndarray, rng: np.random.Generator | None = None,
                  limit: int | None = None) -> Ranking:
    """Order distinct ``keys`` by ``scores`` descending; ties broken at random by ``rng``.

    Random tie-breaking keeps a systematic order of keys (low ages first, say) from biasing
    the match rate among equally scored rows; without ``rng`` ties break by key.
    """
    keys = np.asarray(keys, dtype=np.int64)
    scores = np.asarray(scores, dtype=np.float64)
    tie = rng.random(keys.size) if rng is not None else keys.astype(np.float64)
    order = np.lexsort((tie, -scores))
    if limit is not None:
        order = order[:limit]
    return Ranking(keys[order], scores[order])


def rank_by_frequency(keys: np.ndarray, rng: np.random.Generator | None = None,
                      limit: int | None = None) -> Ranking:
    """R(X): the distinct rows of multiset ``keys`` ordered by multiplicity (the paper's R(X)).

    >>> rank_by_frequency(np.array([5, 3, 5, 7, 5, 3])).keys.tolist()
    [5, 3, 7]
    """
    uniq, counts = np.unique(np.asarray(keys, dtype=np.int64), return_counts=True)
    return rank_by_score(uniq, counts.astype(np.float64), rng=rng, limit=limit)


def product_support(margins) -> int:
    """Rows of positive probability under independent ``margins``: the product of their supports
    (a domain's size fits int64, so this does too).

    >>> product_support([np.array([0.5, 0.5, 0.0]), np.array([0.25] * 4)])
    8
    """
    size = 1
    for p in margins:
        size *= int((np.asarray(p) > 0).sum())
    return size


def rank_product(margins, encode, rng: np.random.Generator | None = None, limit: int | None = None) -> Ranking:
    """Rows ranked by the product of independent per-attribute ``margins`` (one probability
    vector per attribute, in domain order), ``encode`` turning (rows, attributes) codes into
    keys. Exact top ``limit``: a combination in the overall top L has its prefix among the top
    L prefixes, so pruning to L after each attribute loses nothing (default L = 100,000).

    >>> r = rank_product([np.array([0.7, 0.3]), np.array([0.2, 0.8])], lambda c: c[:, 0] * 2 + c[:, 1])
    >>> r.keys.tolist(), r.scores.round(2).tolist()
    ([1, 3, 0, 2], [0.56, 0.24, 0.14, 0.06])
    """
    L = limit or 100_000
    codes = np.zeros((1, 0), dtype=np.int64)
    probs = np.ones(1)
    for p in margins:
        p = np.asarray(p, dtype=np.float64)
        vals = np.flatnonzero(p > 0)
        cand = (probs[:, None] * p[vals][None, :]).reshape(-1)
        keep = np.argsort(-cand, kind="stable")[:L]
        prefix, val = np.divmod(keep, len(vals))
        codes = np.concatenate([codes[prefix], vals[val][:, None]], axis=1)
        probs = cand[keep]
    return rank_by_score(encode(codes), probs, rng=rng, limit=limit)
