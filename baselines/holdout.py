"""The holdout split (D, D_holdout) of the paper, seeded, disjoint and complete."""

from __future__ import annotations

import numpy as np

from censusrecon.microdata.dataset import Dataset
from censusrecon.microdata.errors import CensusReconError


def holdout_split(data: Dataset, rng: np.random.Generator, fraction: float = 0.5) -> tuple[Dataset, Dataset]:
    """Randomly partition ``data`` into the private D and D_holdout (``fraction`` of rows).

    Dick et al. (2023, §2.2) split the real data into two halves: D is attacked, D_holdout
    is the strongest prior an attacker could have (the same distribution as D).
    Every row lands in exactly one part.

    >>> from censusrecon.microdata.domain import Domain
    >>> d = Dataset(Domain.from_sizes({"A": 3}), np.arange(10)[:, None] % 3)
    >>> D, H = holdout_split(d, np.random.default_rng(0))
    >>> len(D), len(H)
    (5, 5)
    """
    if not 0.0 < fraction < 1.0:
        raise CensusReconError(f"holdout fraction must lie in (0, 1), got {fraction}")
    n = len(data)
    if n < 2:
        raise CensusReconError(f"cannot split {n} row(s) into a private part and a holdout; need at least 2")
    n_hold = min(max(1, int(round(n * fraction))), n - 1)
    perm = rng.permutation(n)
    return data.take(np.sort(perm[n_hold:])), data.take(np.sort(perm[:n_hold]))
