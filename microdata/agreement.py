"""The Census Bureau's agreement measure (Abowd et al., HDSR 2025), by the Bureau's block-size classes: the
persons of a true file matched one to one, within their block, by persons of another file (a reconstruction,
a release's microdata) with every attribute the same, age exact (the same single year) or binned (the same
SF1 age group of 38). One function for every caller: the Bureau's extracts side by side
(:func:`microdata.bureau.agreement_by_block_size`) and each release's published rows in ``evaluate-release``.

Matching the exact keys first and then the leftovers on the binned keys (the Bureau's order) matches as many
persons as matching the binned keys directly: per binned key, min(t − u, o − u) + u = min(t, o) where u is
what the exact step used, so the binned count is computed directly.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

#: The Bureau's block-size classes (persons in the block of the true file), as its Table 7 prints them.
SIZE_CLASSES = ((1, 9), (10, 49), (50, 99), (100, None))


def size_label(lo: int | None, hi: int | None) -> str:
    """'1-9', '100+', or 'all' for the row over every block."""
    return "all" if lo is None else f"{lo}+" if hi is None else f"{lo}-{hi}"


def size_class(sizes: np.ndarray) -> np.ndarray:
    """The index into :data:`SIZE_CLASSES` of each block size (sizes ≥ 1).

    >>> size_class(np.array([1, 9, 10, 49, 50, 99, 100, 4000])).tolist()
    [0, 0, 1, 1, 2, 2, 3, 3]
    """
    return np.searchsorted(np.array([lo for lo, _ in SIZE_CLASSES[1:]]), np.asarray(sizes), side="right")


def _shared_by_class(truth: np.ndarray, other: np.ndarray, cls_of_block: dict, block: int) -> np.ndarray:
    """Per size class, the persons of ``truth`` matched one to one by rows of ``other`` on every column."""
    t, o = Counter(map(tuple, truth.tolist())), Counter(map(tuple, other.tolist()))
    out = np.zeros(len(SIZE_CLASSES), dtype=np.int64)
    for key, n in t.items():
        out[cls_of_block[key[block]]] += min(n, o.get(key, 0))
    return out


def agreement_by_size(truth: np.ndarray, other: np.ndarray, block: int, age: int,
                      bin_of_age: np.ndarray | None) -> list[dict]:
    """Agreement counts of ``other`` with ``truth``, per block-size class and over all blocks.

    ``truth`` and ``other`` are (persons × columns) integer codes with the same columns: ``block`` is the
    column of each person's block, ``age`` of its age. ``bin_of_age`` maps an age code to its 38-bin code
    (single-year ages: both the exact and the binned counts); None where the ages are the 38 bins already
    (the binned count only; ``agree_exact`` None). A block's size is its persons in ``truth``; persons of
    ``other`` in blocks ``truth`` has nobody in match nobody. Counts, so units pool by adding them.

    >>> t = np.array([[0, 30, 1], [0, 31, 1], [1, 5, 0]])    # block, age, sex
    >>> o = np.array([[0, 30, 1], [0, 32, 0], [1, 4, 0], [2, 5, 0]])
    >>> rows = agreement_by_size(t, o, 0, 1, np.arange(40) // 2)
    >>> [(r["block_size"], r["persons"], r["agree_exact"], r["agree_binned"]) for r in rows]
    [('1-9', 3, 1, 2), ('10-49', 0, 0, 0), ('50-99', 0, 0, 0), ('100+', 0, 0, 0), ('all', 3, 1, 2)]
    """
    truth, other = np.asarray(truth, dtype=np.int64), np.asarray(other, dtype=np.int64).reshape(-1, np.shape(truth)[1])
    blocks, sizes = np.unique(truth[:, block], return_counts=True)
    cls = dict(zip(blocks.tolist(), size_class(sizes).tolist()))
    other = other[np.isin(other[:, block], blocks)]
    persons = np.bincount(size_class(sizes), weights=sizes, minlength=len(SIZE_CLASSES)).astype(np.int64)
    n_blocks = np.bincount(size_class(sizes), minlength=len(SIZE_CLASSES)).astype(np.int64)
    if bin_of_age is None:
        exact, binned = None, _shared_by_class(truth, other, cls, block)
    else:
        exact = _shared_by_class(truth, other, cls, block)
        tb, ob = truth.copy(), other.copy()
        tb[:, age], ob[:, age] = bin_of_age[tb[:, age]], bin_of_age[ob[:, age]]
        binned = _shared_by_class(tb, ob, cls, block)
    out = []
    for i, (lo, hi) in enumerate(SIZE_CLASSES):
        out.append({"block_size": size_label(lo, hi), "blocks": int(n_blocks[i]), "persons": int(persons[i]),
                    "agree_binned": int(binned[i]), "agree_exact": None if exact is None else int(exact[i])})
    out.append({"block_size": "all", "blocks": int(n_blocks.sum()), "persons": int(persons.sum()),
                "agree_binned": int(binned.sum()), "agree_exact": None if exact is None else int(exact.sum())})
    return out


def shares(rows: list[dict]) -> list[dict]:
    """Counts from :func:`agreement_by_size` (pooled or not) as shares of each class's persons (None where a
    class has nobody, or the exact count was not measured)."""
    def share(n, p):
        return None if n is None or not p else n / p
    return [{"block_size": r["block_size"], "persons": r["persons"], "binned": share(r["agree_binned"], r["persons"]),
             "exact": share(r["agree_exact"], r["persons"])} for r in rows]
