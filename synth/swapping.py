"""2010-style record swapping: persons swapped between blocks of one unit, paired on matching variables,
records unique in their block first; the swapped file's exact tables are published. Not DP."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from censusrecon.microdata.census import P12_GROUP_OF_AGE as _AGE_GROUP
from censusrecon.microdata.dataset import Dataset
from censusrecon.synth.mechanism import PrivacyError

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


TARGETED_NOT_DP = ("targeted record swapping is not differentially private: the records at risk are chosen from the "
                   "data, and no ε bounds what the swapped tables reveal")


@dataclass(frozen=True)
class SwapRule:
    """Which records targeted swapping puts at risk and whom it swaps them with: a record is at risk when at most
    ``threshold`` persons of its ``block`` share its values of ``risk``; its partner matches it on ``match``."""

    risk: tuple[str, ...]
    match: tuple[str, ...] = ("SEX", "AGE")
    threshold: int = 1
    block: str = "BLOCK"


def targeted_swap(data: Dataset, pool: Dataset, rate: float, rng: np.random.Generator, rule: SwapRule
                  ) -> tuple[Dataset, dict]:
    """Targeted record swapping in the manner of the ONS's 2021 Census: records at risk of
    identification (at most ``threshold`` persons of their block share their values of ``risk``)
    are swapped first, then others at random, until about ``rate`` × n records are swapped; each
    swapped record is exchanged with a record of another area (``pool``: persons of the enclosing
    area outside this unit, over the same attributes without BLOCK) that matches it on ``match``
    (AGE by P12 age group): the outside record takes the block and the unit's record leaves it.
    Records without a partner stay. Persons, not households: the data here has no household ids.
    Returns the swapped unit and facts (records swapped, at risk, at risk swapped, unpaired); ``rule``: the
    :class:`SwapRule` (``risk``, ``match``, ``threshold``, ``block``)."""
    risk, match, threshold, block = list(rule.risk), list(rule.match), rule.threshold, rule.block
    if not 0 <= rate <= 1:
        raise PrivacyError(f"swap rate must lie in [0, 1], got {rate}")
    if block not in data.domain:
        raise PrivacyError("targeted swapping moves persons between areas' blocks: the data has no BLOCK attribute")
    missing = [a for a in [*risk, *match] if a not in data.domain or a == block]
    if missing:
        raise PrivacyError(f"targeted swapping: {missing} are not attributes of the data (it has "
                           f"{[a for a in data.domain.names if a != block]})")
    n = len(data)
    codes = data.codes.copy()
    jb = data.domain.index(block)
    cols = [data.domain.index(a) for a in risk]
    _, inv, cnt = np.unique(codes[:, [jb, *cols]], axis=0, return_inverse=True, return_counts=True)
    at_risk = cnt[inv.ravel()] <= threshold
    want = int(round(rate * n))
    order = np.concatenate([rng.permutation(np.flatnonzero(at_risk)), rng.permutation(np.flatnonzero(~at_risk))])
    other = [a for a in data.domain.names if a != block]
    if list(pool.domain.names) != other:
        raise PrivacyError(f"the outside pool's attributes {list(pool.domain.names)} differ from the unit's {other}")
    both = Dataset(pool.domain, np.concatenate([pool.codes, codes[:, [data.domain.index(a) for a in other]]]))
    keys = _match_keys(both, list(match))
    pool_key, unit_key = keys[:len(pool)], keys[len(pool):]
    free = {k: rng.permutation(np.flatnonzero(pool_key == k)).tolist() for k in np.unique(pool_key)}
    swapped, risk_swapped, unpaired = 0, 0, 0
    for i in order:
        if swapped >= want:
            break
        partners = free.get(unit_key[i], [])
        if not partners:
            unpaired += 1
            continue
        j = partners.pop()
        codes[i, [data.domain.index(a) for a in other]] = pool.codes[j]  # the outside record takes the block
        swapped += 1
        risk_swapped += int(at_risk[i])
    return Dataset(data.domain, codes), {"rate": rate, "records_swapped": swapped, "share_swapped": swapped / max(n, 1),
                                         "records_at_risk": int(at_risk.sum()), "at_risk_swapped": risk_swapped,
                                         "unpaired_targets": unpaired, "matched_on": list(match),
                                         "risk_on": list(risk), "risk_threshold": threshold}
