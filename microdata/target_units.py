"""Which units of a geography level are attacked (and released): those a config's ``target`` names, or a seeded choice
among the units whose persons number between its bounds; and which of them anybody lives in."""

from __future__ import annotations

import logging

import numpy as np
import pandas as pd

from censusrecon.microdata.dataset import Dataset
from censusrecon.microdata.errors import ConfigError
from censusrecon.microdata.geography import plural
from censusrecon.microdata.seeds import stable_seed

log = logging.getLogger(__name__)


def eligible_units(pop: Dataset, target) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every unit of ``target.level`` with its persons, and which are eligible (between ``min_rows`` and
    ``max_rows`` persons, with siblings where required); ``target``: a :class:`~microdata.data_settings.TargetConfig`."""
    geo = pop.geography
    level = target.level
    ids, counts = np.unique(geo.units(level), return_counts=True)
    ok = counts >= target.min_rows
    if target.max_rows is not None:
        ok &= counts <= target.max_rows
    if target.require_siblings:
        parent_level = geo.coarser(level)[0]
        pairs = pd.DataFrame({"unit": geo.units(level), "parent": geo.units(parent_level)}).drop_duplicates()
        siblings = pairs.groupby("parent")["unit"].transform("size")
        ok &= np.isin(ids, pairs.loc[siblings > 1, "unit"].to_numpy())
    return ids, counts, ok


def choose_units(pop: Dataset, target, seed: int) -> list[str]:
    """The units ``target`` asks for (a :class:`~microdata.data_settings.TargetConfig`): explicit ``unit_ids``, one per
    state, at random or spread over the sizes, among units with between ``min_rows`` and ``max_rows`` persons; seeded
    by ``seed``."""
    geo = pop.geography
    level = target.level
    ids, counts, ok = eligible_units(pop, target)
    eligible = ids[ok]
    if target.unit_ids is not None:
        # a unit is known if someone lives in it or the public unit list names it (empty ones too)
        known = set(ids.tolist())
        unknown = [u for u in target.unit_ids if u not in known and not geo.listed(level, u)]
        if unknown:
            raise ConfigError(f"target.unit_ids {unknown} are neither {plural(level)} of the data nor in its public unit list "
                              f"(e.g. {ids[:3].tolist()})")
        return list(target.unit_ids)
    size_words = (f"between {target.min_rows} and {target.max_rows} persons" if target.max_rows
                  else f"at least {target.min_rows} persons")
    if eligible.size == 0:
        raise ConfigError(f"no {level} has {size_words}")
    wanted = eligible.size if target.units == "all" else target.units
    if wanted > eligible.size:
        raise ConfigError(f"target.units asks for {wanted} {plural(level)}, but the data has only {eligible.size} with "
                          f"{size_words} (of {ids.size} {plural(level)}); ask for at most {eligible.size}, or units: all")
    rng = np.random.default_rng(stable_seed("units", seed))
    by_parent_level = geo.coarser(level)[-2] if len(geo.coarser(level)) > 1 else "national"  # the state
    if target.selection == "size_quantiles":  # units spread evenly over the size distribution
        sizes = counts[ok]
        order = np.argsort(sizes, kind="stable")
        n = wanted
        picks = np.unique(np.round(np.linspace(0, eligible.size - 1, n)).astype(int))
        return sorted(eligible[order[picks]].tolist())
    if target.selection == "random":
        pick = rng.choice(eligible.size, size=wanted, replace=False)
        return sorted(eligible[pick].tolist())
    # one per state, round-robin over states until enough units
    state_of = dict(zip(geo.units(level).tolist(), geo.units(by_parent_level).tolist()))
    by_state: dict[str, list[str]] = {}
    for u in eligible.tolist():
        by_state.setdefault(state_of[u], []).append(u)
    for s in by_state:
        rng.shuffle(by_state[s])
    chosen: list[str] = []
    while len(chosen) < wanted and any(by_state.values()):
        for s in sorted(by_state):
            if by_state[s] and len(chosen) < wanted:
                chosen.append(by_state[s].pop())
    return sorted(chosen)


def occupied_units(pop: Dataset, level: str, units: list[str]) -> tuple[list[str], list[str]]:
    """``units`` split into those someone lives in and the listed ones nobody does. An empty
    unit may be named (the public list has it), but it has nothing to reconstruct and all its
    tables are zero: it is reported as empty, not attacked and not averaged into a verdict."""
    present = set(np.unique(pop.geography.units(level)).tolist())
    occupied = [u for u in units if u in present]
    empty = [u for u in units if u not in present]
    if not occupied:
        raise ConfigError(f"nobody lives in any of the {plural(level)} named in target.unit_ids ({', '.join(empty)}): "
                          "there is nothing to reconstruct")
    if empty:
        log.warning("%s %s listed but nobody lives there: reported as empty, not attacked (nothing to reconstruct)",
                    level, ", ".join(empty))
    return occupied, empty
