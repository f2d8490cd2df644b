"""The best guess of a person's secret attribute without the release: its most common value, among persons of
outside data who share the person's other attributes."""

from __future__ import annotations

import numpy as np

from censusrecon.microdata.dataset import Dataset
from censusrecon.microdata.errors import CensusReconError


def best_guess_secret(reference: Dataset, names: tuple[str, ...], codes: np.ndarray, secret: str) -> np.ndarray:
    """Per person (a row of ``codes``, over the attributes ``names``), the secret value most common among the
    ``reference`` persons who match them on every attribute both have (the secret aside). Where no reference
    person matches, the last such attribute is dropped, and so on, down to the reference's most common value.
    Ties go to the smaller code. The reference is outside data: it never holds the persons guessed.

    >>> from censusrecon.microdata.domain import Domain
    >>> ref = Dataset(Domain.from_sizes({"A": 3, "S": 2}), np.array([[0, 1], [0, 1], [1, 0], [0, 0]]))
    >>> best_guess_secret(ref, ("A", "S"), np.array([[0, 0], [1, 1], [2, 1]]), "S").tolist()
    [1, 0, 0]
    """
    if secret not in reference.domain.names or secret not in names:
        raise CensusReconError(f"the secret {secret!r} must be an attribute of both the persons ({', '.join(names)}) "
                               f"and the reference ({', '.join(reference.domain.names)})")
    if not len(reference):
        raise CensusReconError("the best guess of a secret needs outside data: the reference has no persons")
    codes = np.asarray(codes, dtype=np.int64)
    s_ref = reference.column(secret)
    V = reference.domain.size(secret)
    shared = [a for a in names if a in reference.domain.names and a != secret]
    guess = np.full(len(codes), -1, dtype=np.int64)
    for keep in range(len(shared), -1, -1):
        left = guess < 0
        if not left.any():
            break
        attrs = shared[:keep]
        ref_key = _keys(reference.codes[:, [reference.domain.index(a) for a in attrs]])
        who_key = _keys(codes[left][:, [names.index(a) for a in attrs]])
        keys, inv = np.unique(ref_key, return_inverse=True)
        table = np.zeros((len(keys), V), dtype=np.int64)
        np.add.at(table, (inv.ravel(), s_ref), 1)
        pos = np.searchsorted(keys, who_key)
        found = (pos < len(keys)) & (keys[np.minimum(pos, len(keys) - 1)] == who_key)
        idx = np.flatnonzero(left)
        guess[idx[found]] = np.argmax(table[pos[found]], axis=1)
    return guess


def _keys(codes: np.ndarray) -> np.ndarray:
    """One comparable key per row of ``codes`` (rows as bytes: any widths)."""
    codes = np.ascontiguousarray(codes, dtype=np.int64)
    return codes.view(np.dtype((np.void, codes.dtype.itemsize * codes.shape[1]))).ravel() if codes.shape[1] else \
        np.zeros(len(codes), dtype="V1")
