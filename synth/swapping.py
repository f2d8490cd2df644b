"""2010-style record swapping: persons swapped between blocks of one unit, paired on matching variables,
records unique in their block first; the swapped file's exact tables are published. Not DP."""

from __future__ import annotations

import numpy as np

from microdata.census import P12_GROUP_OF_AGE as _AGE_GROUP
from microdata.dataset import Dataset
from synth.mechanism import PrivacyError

NOT_DP = "record swapping is not differentially private: no ε bounds what the swapped tables reveal"


def _match_keys(data: Dataset, match: list[str]) -> np.ndarray:
    cols = []
    for name in match:
        if name not in data.domain:
            raise PrivacyError(f"swapping matches on {name!r}, which the data lacks (it has {list(data.domain.names)})")
        c = data.column(name)
        if name == "AGE" and data.domain.size("AGE") == len(_AGE_GROUP):
            c = _AGE_GROUP[c]  # age matched by P12 age group
        cols.append(c)
    if not cols:
        return np.zeros(len(data), np.int64)
    return np.unique(np.stack(cols, axis=1), axis=0, return_inverse=True)[1].ravel()


def swap_records(data: Dataset, rate: float, rng: np.random.Generator, match: list[str] = ("SEX", "AGE"),
                 block: str = "BLOCK") -> tuple[Dataset, dict]:
    """Swap about ``rate`` × n records between blocks: pairs of persons in different blocks with
    the same matching variables (``AGE`` by P12 age group) exchange their blocks. Records unique in
    their block on every other attribute are taken first (they are the ones tables expose), then
    the rest at random; a record without a partner is left in place. Returns the swapped data and
    facts (records swapped, the share, targets that found no partner)."""
    if not 0 <= rate <= 1:
        raise PrivacyError(f"swap rate must lie in [0, 1], got {rate}")
    if block not in data.domain:
        raise PrivacyError("swapping moves persons between blocks: the data has no BLOCK attribute")
    n = len(data)
    want = int(round(rate * n / 2))  # pairs: each swap moves two records
    codes = data.codes.copy()
    if want == 0 or n < 2:
        return Dataset(data.domain, codes), {"rate": rate, "records_swapped": 0, "share_swapped": 0.0,
                                             "unpaired_targets": 0}
    jb = data.domain.index(block)
    blocks = codes[:, jb]
    key = _match_keys(data, [m for m in match if m != block])
    rest = [j for j in range(len(data.domain)) if j != jb]
    _, inv, cnt = np.unique(codes[:, [jb, *rest]], axis=0, return_inverse=True, return_counts=True)
    unique_in_block = cnt[inv.ravel()] == 1
    order = np.concatenate([rng.permutation(np.flatnonzero(unique_in_block)),
                            rng.permutation(np.flatnonzero(~unique_in_block))])
    used = np.zeros(n, dtype=bool)
    pairs, unpaired = [], 0
    by_key = {k: rng.permutation(np.flatnonzero(key == k)).tolist() for k in np.unique(key)}
    for i in order:
        if len(pairs) >= want:
            break
        if used[i]:
            continue
        partner = next((j for j in by_key[key[i]] if not used[j] and blocks[j] != blocks[i]), None)
        if partner is None:
            unpaired += 1
            continue
        used[i] = used[partner] = True
        pairs.append((i, partner))
    for i, j in pairs:
        codes[i, jb], codes[j, jb] = blocks[j], blocks[i]
    swapped = 2 * len(pairs)
    return Dataset(data.domain, codes), {"rate": rate, "records_swapped": swapped, "share_swapped": swapped / n,
                                         "unpaired_targets": unpaired, "matched_on": list(match),
                                         "targets_first": "records unique in their block"}
