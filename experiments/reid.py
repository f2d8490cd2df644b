"""Reidentification as the Census Bureau ran it (Abowd et al., HDSR 2025, and its replication code):
an attacker file of named records (block, sex, age) is linked (:mod:`reconstruct.linkage`, the attacker's step,
which reads no truth) one to one, without replacement and in
random order, to a reconstructed file within each block, first on {sex, single-year age}, then the
records left on {sex, 38-bin age}; each link attaches the reconstructed record's race and ethnicity
to a name: a putative reidentification. It is confirmed, as the Bureau's code confirms every link
(on exact age, failing that on the age bin), when the named person's confidential record has that
block, sex, 38-bin age group, race and ethnicity. The vulnerable group of an attacker file is the
Bureau's universe (HDSR Table 6's notes): records naming a vulnerable person *in that person's block*.

Two attacker files: the *perfect* one (every person of D, exactly right: the Bureau's CEF
attacker) and a *commercial-like* one, simulated with the structure the Bureau reports for its
commercial file (HDSR Table 4: about 104 records per 100 persons, only 37.1% right on person,
block, sex and age bin): missing persons, records in another occupied block, records of persons not
in the tables, and rare sex and age errors. Each rate is a config knob
(``reidentification.commercial``); at 0 the commercial file is the perfect one.
"""

from __future__ import annotations

import zlib

import numpy as np
import pandas as pd

from censusrecon.microdata.census import AGE_BIN38_OF_AGE
from censusrecon.reconstruct.linkage import AttackerFile, link_one_to_one


def perfect_file(block: np.ndarray, sex: np.ndarray, age: np.ndarray) -> AttackerFile:
    """Every person of D with their own block, sex and age (the Bureau's CEF attacker)."""
    n = len(block)
    return AttackerFile("perfect", np.arange(n), np.asarray(block), np.asarray(sex), np.asarray(age))


def commercial_file(truth: AttackerFile, blocks: np.ndarray, rng: np.random.Generator, rates, n_sexes: int = 2,
                    n_ages: int | None = None) -> AttackerFile:
    """A commercial-like file made from ``truth`` (D's persons as :func:`perfect_file` has them) at ``rates``
    (:class:`experiments.config.CommercialFileConfig`): a ``coverage`` share of D's persons, each record
    independently in another of ``blocks`` (the unit's occupied blocks, which its published totals show: a
    commercial file's addresses are residences) with probability ``wrong_block``, with the other sex
    (``wrong_sex``), with an age off by 1 to ``age_error_years`` years either way (``age_error``); plus ``extra`` ×
    |D| records of nobody in D (identity errors: a random occupied block, and the sex and age of a random person of
    D). Every rate 0 and coverage 1 give the perfect file."""
    block, sex, age = truth.block, truth.sex, truth.age
    coverage, wrong_block, wrong_sex = rates.coverage, rates.wrong_block, rates.wrong_sex
    age_error, age_error_years, extra = rates.age_error, rates.age_error_years, rates.extra
    n = len(block)
    n_ages = n_ages or int(np.max(age, initial=0)) + 1
    blocks = np.unique(np.asarray(blocks, dtype=np.int64))
    keep = np.flatnonzero(rng.random(n) < coverage)
    b, s, a = block[keep].copy(), sex[keep].copy(), age[keep].copy()
    if len(blocks) > 1:
        moved = np.flatnonzero(rng.random(len(keep)) < wrong_block)
        at = np.searchsorted(blocks, b[moved])  # each moved record to another occupied block, uniformly
        b[moved] = blocks[(at + rng.integers(1, len(blocks), len(moved))) % len(blocks)]
    flip = rng.random(len(keep)) < wrong_sex
    s[flip] = (s[flip] + rng.integers(1, max(n_sexes, 2), flip.sum())) % max(n_sexes, 2)
    off = rng.random(len(keep)) < age_error
    if age_error_years > 0:
        delta = rng.integers(1, age_error_years + 1, off.sum()) * rng.choice([-1, 1], off.sum())
        a[off] = np.clip(a[off] + delta, 0, n_ages - 1)
    m = int(round(extra * n))
    pick = rng.integers(0, max(n, 1), m) if n else np.zeros(0, np.int64)
    where = blocks[rng.integers(0, len(blocks), m)] if len(blocks) else np.zeros(m, np.int64)
    return AttackerFile("commercial", np.concatenate([keep, np.full(m, -1)]),
                        np.concatenate([b, where]), np.concatenate([s, sex[pick]]), np.concatenate([a, age[pick]]))


def confirmed(file: AttackerFile, linked: np.ndarray, rec: tuple, truth: tuple) -> np.ndarray:
    """Which links are confirmed: the named person exists and their confidential block, sex, race and
    ethnicity are the linked record's, and so is their age, exactly or failing that in its 38-bin group,
    whichever pass made the link (the Bureau's code confirms every link on exact age, then on the bin:
    a commercial record a year off links on that wrong year and is confirmed on the bin). ``rec``: the
    reconstructed file's (block, sex, age, race/eth) arrays; ``truth``: D's."""
    rec_block, rec_sex, rec_age, rec_re = rec
    block, sex, age, re = truth
    ok = (linked >= 0) & (file.person >= 0)
    i = np.flatnonzero(ok)
    p, j = file.person[i], linked[i]
    same_age = AGE_BIN38_OF_AGE[age[p]] == AGE_BIN38_OF_AGE[rec_age[j]]  # exact age is in the same bin too
    good = (block[p] == rec_block[j]) & (sex[p] == rec_sex[j]) & same_age & (re[p] == rec_re[j])
    out = np.zeros(len(file), bool)
    out[i[good]] = True
    return out


def block_modes(block: np.ndarray, re: np.ndarray, group_of_block: np.ndarray | None = None) -> dict[int, int]:
    """Each block's modal race/ethnicity by the Bureau's rule (``findModalRE`` of its
    recon_replication code, as :func:`microdata.describe.block_modes`): the block's most common
    value; if its count is 1 or values tie, one level up, its block group's mode (``group_of_block``:
    each BLOCK code's group; the whole unit without it) under the same condition; failing that,
    code 0 (not Hispanic, White alone)."""
    from censusrecon.microdata.describe import block_modes as modes

    group = np.zeros(len(block), np.int64) if group_of_block is None else np.asarray(group_of_block)[block]
    m = modes(block, group, re, fallback=0)
    first = np.unique(block, return_index=True)
    return {int(b): int(m[i]) for b, i in zip(*first)}


def vulnerable_persons(block: np.ndarray, sex: np.ndarray, age: np.ndarray, re: np.ndarray,
                       zero_variability_blocks: set | None, mode: dict[int, int] | None = None) -> np.ndarray:
    """The Bureau's vulnerable group: persons whose race/ethnicity is not their block's mode
    (:func:`block_modes`), unique in D on {block, sex, 38-bin age}, in a block whose reconstruction
    has zero solution variability (when that is known: None skips the condition). ``mode``: the
    blocks' modes when already computed."""
    mode = block_modes(block, re) if mode is None else mode
    nonmodal = re != np.array([mode[int(b)] for b in block], dtype=re.dtype)
    key = pd.DataFrame({"b": block, "s": sex, "a": AGE_BIN38_OF_AGE[age]})
    unique = key.groupby(["b", "s", "a"])["b"].transform("size").to_numpy() == 1
    out = nonmodal & unique
    if zero_variability_blocks is not None:
        out &= np.isin(block, np.array(sorted(zero_variability_blocks), dtype=np.int64))
    return out


def guesser_files(block: np.ndarray, sex: np.ndarray, age: np.ndarray, re: np.ndarray,
                  rng: np.random.Generator, mode: dict[int, int] | None = None,
                  group_of_block: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """The Bureau's two guessers as reconstructed files, from the published block tables alone:
    every person's block, sex and age with their block's modal race/ethnicity (``modal``), or one
    drawn from the block's race/ethnicity shares (``proportional``). ``mode`` as in
    :func:`vulnerable_persons`."""
    mode = block_modes(block, re, group_of_block) if mode is None else mode
    modal = np.array([mode[int(b)] for b in block], dtype=np.int64)
    prop = np.empty(len(block), np.int64)
    for b in np.unique(block):
        at = np.flatnonzero(block == b)
        vals, cnt = np.unique(re[at], return_counts=True)
        prop[at] = rng.choice(vals, size=len(at), p=cnt / cnt.sum())
    return {"modal": modal, "proportional": prop}


def reidentify(files: list[AttackerFile], reconstructions: dict[str, tuple], truth: tuple, vulnerable: np.ndarray,
               seed: int) -> pd.DataFrame:
    """Putative and confirmed reidentifications and precision, per reconstructed file × attacker
    file × group (``all``; ``vulnerable``: records naming a person of the group in that person's own
    block, the Bureau's universe: a record that puts them elsewhere is not counted). ``reconstructions``
    maps a name to (block, sex, age, race/eth) arrays; ``truth`` is D's (block, sex, age, race/eth).
    The linkage's random order comes from ``seed`` and the method's name only, so two attacker
    files that are the same record for record link the same way."""
    block, sex, age, re = truth
    rows = []
    for name, (rb, rs, ra, rre) in reconstructions.items():
        for f in files:
            rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
            linked, _ = link_one_to_one(f, rb, rs, ra, rng)
            conf = confirmed(f, linked, (rb, rs, ra, rre), truth)
            put = linked >= 0
            in_group = np.zeros(len(f), bool)
            named = f.person >= 0
            in_group[named] = vulnerable[f.person[named]] & (f.block[named] == block[f.person[named]])
            for group, sel in (("all", np.ones(len(f), bool)), ("vulnerable", in_group)):
                p, c = int(put[sel].sum()), int(conf[sel].sum())
                rows.append({"method": name, "attacker_file": f.name, "group": group,
                             "attacker_records": int(sel.sum()), "putative": p, "confirmed": c,
                             "precision": c / p if p else float("nan")})
    return pd.DataFrame(rows)
