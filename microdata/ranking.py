"""Confidence-ranked candidate sets R: distinct rows ordered by a score, highest first."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from microdata.errors import CensusReconError


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
