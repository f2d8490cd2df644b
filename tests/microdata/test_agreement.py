"""The Bureau's agreement measure by block size (microdata.agreement) on hand-made files with known answers."""

import numpy as np

from censusrecon.microdata.agreement import agreement_by_size, shares, size_class

BIN = np.arange(120) // 5  # a hand-made age grouping: 0-4, 5-9, ...


def _block(block: int, ages: list[int], sex: int = 0) -> list[list[int]]:
    return [[block, a, sex] for a in ages]


def test_counts_by_size_class_exact_and_binned():
    """Block 0 has 12 persons aged 20..31 (size 10-49), block 1 has 3 aged 0, 1, 2 (size 1-9). The other file
    has block 0's ages 20..25 exactly and two persons aged 33 and 34 (the group 30-34 of the truth's 30 and 31),
    26..31 missing, one person of block 1 with the wrong sex, and two persons in block 7 (nobody in the truth there).
    Exact: 6 in 10-49, 2 in 1-9 (ages 0 and 1). Binned: 8 in 10-49; 1-9 still 2."""
    truth = np.array(_block(0, list(range(20, 32))) + _block(1, [0, 1, 2]))
    other = np.array(_block(0, list(range(20, 26)) + [33, 34]) + _block(1, [0, 1]) + _block(1, [2], sex=1)
                     + _block(7, [20, 21]))
    rows = {r["block_size"]: r for r in agreement_by_size(truth, other, block=0, age=1, bin_of_age=BIN)}
    assert (rows["1-9"]["blocks"], rows["1-9"]["persons"], rows["1-9"]["agree_exact"], rows["1-9"]["agree_binned"]) \
        == (1, 3, 2, 2)
    assert (rows["10-49"]["persons"], rows["10-49"]["agree_exact"], rows["10-49"]["agree_binned"]) == (12, 6, 8)
    assert rows["all"] == {"block_size": "all", "blocks": 2, "persons": 15, "agree_binned": 10, "agree_exact": 8}
    assert rows["100+"]["persons"] == 0
    got = {r["block_size"]: r for r in shares(agreement_by_size(truth, other, 0, 1, BIN))}
    assert got["all"]["binned"] == 10 / 15 and got["all"]["exact"] == 8 / 15 and got["100+"]["binned"] is None


def test_matching_is_one_to_one_and_ages_already_binned_give_no_exact_figure():
    """Three identical persons in the truth, five in the other file: three match, not five. With the ages the
    bins already (bin_of_age None) only the binned count is given."""
    truth = np.array(_block(4, [3, 3, 3]))
    other = np.array(_block(4, [3, 3, 3, 3, 3]))
    (small, *_, total) = agreement_by_size(truth, other, 0, 1, None)
    assert small["agree_binned"] == 3 and small["agree_exact"] is None and total["persons"] == 3


def test_size_classes_are_the_bureaus():
    assert size_class(np.array([1, 9, 10, 49, 50, 99, 100, 101])).tolist() == [0, 0, 1, 1, 2, 2, 3, 3]
