"""The attacker's step of a reidentification as the Census Bureau ran it (Abowd et al., HDSR 2025): a file of named
records (block, sex, age) linked one to one, without replacement and in random order, to a reconstructed file within
each block, first on {sex, single-year age}, then the records left on {sex, 38-bin age}. It reads the attacker's
file and the reconstruction only; which links name the right person is confirmed against D in
:mod:`experiments.reid`."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from censusrecon.microdata.census import AGE_BIN38_OF_AGE


@dataclass(frozen=True)
class AttackerFile:
    """Named records: ``person`` is the row of D each names (-1: a record of nobody); ``block``,
    ``sex`` and ``age`` are what the file says (codes of D's domain)."""

    name: str
    person: np.ndarray
    block: np.ndarray
    sex: np.ndarray
    age: np.ndarray

    def __len__(self) -> int:
        return len(self.person)


def link_one_to_one(file: AttackerFile, rec_block: np.ndarray, rec_sex: np.ndarray, rec_age: np.ndarray,
                    rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """For each attacker record, the reconstructed record it links to (-1: none) and whether the
    link was made on the binned age. Within each {block, sex, age} cell, attacker and reconstructed
    records are paired in random order without replacement (min of the two counts); the records
    left on both sides are then paired the same way within {block, sex, 38-bin age}. No
    reconstructed record is ever linked twice."""
    linked = np.full(len(file), -1, np.int64)
    binned = np.zeros(len(file), bool)
    free_rec = np.ones(len(rec_block), bool)
    for on_bin in (False, True):
        atk = np.flatnonzero(linked < 0)
        rec = np.flatnonzero(free_rec)
        if not len(atk) or not len(rec):
            break
        age_a = AGE_BIN38_OF_AGE[file.age[atk]] if on_bin else file.age[atk]
        age_r = AGE_BIN38_OF_AGE[rec_age[rec]] if on_bin else rec_age[rec]
        left = pd.DataFrame({"b": file.block[atk], "s": file.sex[atk], "a": age_a, "i": atk,
                             "r": rng.random(len(atk))})
        right = pd.DataFrame({"b": rec_block[rec], "s": rec_sex[rec], "a": age_r, "j": rec,
                              "r": rng.random(len(rec))})
        left, right = (side.sort_values(["b", "s", "a", "r"], kind="stable") for side in (left, right))
        for side in (left, right):  # a random rank within each cell
            side["k"] = side.groupby(["b", "s", "a"]).cumcount()
        pairs = left.merge(right, on=["b", "s", "a", "k"])
        linked[pairs["i"].to_numpy()] = pairs["j"].to_numpy()
        binned[pairs["i"].to_numpy()] = on_bin
        free_rec[pairs["j"].to_numpy()] = False
    return linked, binned
