"""k-way marginal workloads and their exact answers, computed vectorised."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from censusrecon.microdata.dataset import Dataset
from censusrecon.microdata.domain import Domain
from censusrecon.microdata.errors import DomainError


@dataclass(frozen=True)
class Workload:
    """An ordered set of marginals over a domain; each marginal is a tuple of attribute names.

    A marginal's queries are its cells, in row-major order of its attributes (last fastest);
    the workload's query vector is the concatenation over marginals. Answers are fractions
    of rows (statistical queries), as in the RAP-Rank paper.

    >>> w = Workload.all_kway(Domain.from_sizes({"A": 2, "B": 3, "C": 2}), 2)
    >>> w.marginals
    (('A', 'B'), ('A', 'C'), ('B', 'C'))
    >>> w.num_queries
    16
    """

    domain: Domain
    marginals: tuple[tuple[str, ...], ...]

    def __post_init__(self) -> None:
        margs = tuple(tuple(m) for m in self.marginals)
        object.__setattr__(self, "marginals", margs)
        if not margs:
            raise DomainError("a workload needs at least one marginal")
        seen = set()
        for m in margs:
            if not m:
                raise DomainError("a marginal needs at least one attribute")
            if len(set(m)) != len(m):
                raise DomainError(f"marginal {m} repeats an attribute")
            for a in m:
                self.domain.index(a)
            key = tuple(sorted(m, key=self.domain.index))
            if key in seen:
                raise DomainError(f"marginal {m} appears twice in the workload")
            seen.add(key)

    @classmethod
    def all_kway(cls, domain: Domain, k: int, attributes: Sequence[str] | None = None,
                 lower: bool = False) -> "Workload":
        """All k-way marginals over ``attributes`` (default: all), with every j<k too if ``lower``."""
        attrs = list(attributes) if attributes is not None else list(domain.names)
        for a in attrs:
            domain.index(a)
        if not 1 <= k <= len(attrs):
            raise DomainError(f"k must be between 1 and the number of attributes ({len(attrs)}), got {k}")
        ks = range(1, k + 1) if lower else (k,)
        margs = [m for j in ks for m in itertools.combinations(attrs, j)]
        return cls(domain, tuple(margs))

    def sample(self, count: int, rng: np.random.Generator) -> "Workload":
        """A random subset of ``count`` marginals (all of them when there are fewer), in workload order.

        The number of 3-way marginals grows as d³/6; publishing a sample keeps the attack
        (and the experiment) tractable on wide data.
        """
        if count < 1:
            raise DomainError(f"a sampled workload needs at least one marginal, got {count}")
        if count >= len(self.marginals):
            return self
        keep = np.sort(rng.choice(len(self.marginals), size=count, replace=False))
        return Workload(self.domain, tuple(self.marginals[i] for i in keep))

    def shape(self, marginal: Sequence[str]) -> tuple[int, ...]:
        return tuple(self.domain.size(a) for a in marginal)

    @property
    def sizes(self) -> tuple[int, ...]:
        """Number of cells of each marginal."""
        return tuple(int(np.prod(self.shape(m))) for m in self.marginals)

    @property
    def num_queries(self) -> int:
        return int(sum(self.sizes))

    def offsets(self) -> np.ndarray:
        """Start of each marginal in the query vector (length len(marginals) + 1)."""
        return np.concatenate([[0], np.cumsum(self.sizes)]).astype(np.int64)

    def to_list(self) -> list[list[str]]:
        return [list(m) for m in self.marginals]


def marginal_counts(data: Dataset, marginal: Sequence[str], weights: np.ndarray | None = None) -> np.ndarray:
    """Integer cell counts of one marginal, flattened row-major (one bincount, no row loop); with
    ``weights``, the float64 sum of the rows' weights in each cell."""
    shape = tuple(data.domain.size(a) for a in marginal)
    idx = [data.domain.index(a) for a in marginal]
    flat = np.ravel_multi_index(tuple(data.codes[:, i] for i in idx), shape) if data.codes.size else np.zeros(0, np.int64)
    out = np.bincount(flat, weights=weights, minlength=int(np.prod(shape)))
    return out if weights is not None else out.astype(np.int64)


def answer(data: Dataset, workload: Workload) -> np.ndarray:
    """Exact answers Q(D) as fractions of rows, float64, concatenated over the workload's marginals."""
    if data.domain != workload.domain:
        raise DomainError(
            f"data domain {list(data.domain.names)} differs from the workload's {list(workload.domain.names)}"
        )
    if len(data) == 0:
        raise DomainError("cannot answer queries on an empty dataset")
    counts = [marginal_counts(data, m) for m in workload.marginals]
    return np.concatenate(counts).astype(np.float64) / len(data)
