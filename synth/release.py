"""Laplace release of published tables (discrete noise on int64 cell counts) and synthetic data fitted to them."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from censusrecon.microdata.dataset import Dataset
from censusrecon.microdata.marginals import Workload, marginal_counts
from censusrecon.reconstruct.settings import RAPSettings
from censusrecon.synth.mechanism import Mechanism, PrivacyError, Relation, marginal_sensitivity, parse_relation
from censusrecon.synth.keyed import noisy, releases_of
from censusrecon.synth.noise import noise_scale


#: How the total n of a release was obtained, as the ledger records it.
TOTAL_PUBLIC_BY_RELATION = "public: under replace-one neighbours n is the same for every neighbour"
TOTAL_DECLARED = "published exactly: an invariant the agency declared (release.invariants: unit_total)"
TOTAL_ESTIMATED = "estimated from the noisy tables (post-processing; the true n is never used)"


@dataclass(frozen=True)
class NoisyTables:
    """Noisy int64 cell counts of every table of ``workload`` (negative values kept, as released),
    and the total n the attacker or a fit divides by, with how it was obtained. With ``runs``,
    ``counts`` has one row per independent release (the auditor's batches) and no total."""

    workload: object
    counts: np.ndarray  # concatenated over the workload's tables, int64
    total: int | None
    total_source: str = TOTAL_ESTIMATED

    def answers(self) -> np.ndarray:
        """Post-processed fractions for the attack or a fit: each table's negatives clipped and the
        table normalised to sum to one (uniform if nothing is left); costs no privacy. Census
        cells overlap (totals and their parts), so they are clipped and divided by the total."""
        if self.counts.ndim != 1:
            raise PrivacyError("answers() takes one release, not a batch of runs")
        if not isinstance(self.workload, Workload):
            return np.clip(self.counts, 0, None).astype(np.float64) / max(self.total, 1)
        out = []
        for part in np.split(self.counts, self.workload.offsets()[1:-1]):
            c = np.clip(part, 0, None).astype(np.float64)
            out.append(c / c.sum() if c.sum() > 0 else np.full(c.size, 1.0 / c.size))
        return np.concatenate(out)


def laplace_tables(data: Dataset, workload, epsilon: float, backend,
                   relation: Relation | str = Relation.REPLACE_ONE, levels: int = 1,
                   declared_total: bool = False, runs=None, cells: np.ndarray | None = None
                   ) -> tuple[NoisyTables, Mechanism]:
    """Discrete Laplace noise on every cell of every table of ``workload``.

    Privacy unit: one person. Relation: as given; the L1 sensitivity of all the tables
    together is computed from it (:func:`synth.mechanism.marginal_sensitivity`: #tables
    under add/remove, 2·#tables under replace-one, times the geographic ``levels`` the
    tables are published at; census tables: see :func:`_census_sensitivity`) and the noise
    scale is Δ/ε, rounded up (:func:`synth.noise.noise_scale`). Counts are int64 from the
    data to the release; no noise ever touches a float.

    The total n reaches the output only as the relation allows: under replace-one it is
    public (every neighbour has the same n); under add/remove it is estimated from the noisy
    tables, unless ``declared_total`` (the agency declares the unit's total an invariant and
    publishes it exactly; the ledger says so). ``runs`` releases that many times at once, or the
    listed release numbers (the auditor's: the same code path, one row of counts per release; a
    single release is the batch of the backend's one release).
    """
    relation = parse_relation(relation)
    if isinstance(workload, Workload):
        delta_l1 = marginal_sensitivity(workload.domain, workload.marginals, relation, levels)
        exact = np.concatenate([marginal_counts(data, m) for m in workload.marginals]).astype(np.int64)
        details = {"tables": len(workload.marginals), "cells": workload.num_queries, "levels": levels}
    else:
        per_person = workload.max_cells_per_person()
        delta_l1 = _census_sensitivity(per_person, relation, levels)
        exact = workload.counts(data)
        details = {"cells": workload.num_queries, "cells_per_person": per_person, "levels": levels,
                   "sensitivity_is": "the most released cells one person lies in, over every person type"
                                  + (", twice (the person leaves theirs and enters another's)"
                                     if relation is Relation.REPLACE_ONE else "")}
    scale, backend_epsilon = noise_scale(delta_l1, epsilon, backend)
    if cells is not None:
        if runs is None:
            raise PrivacyError("cells are drawn for a batch of releases (the auditor's), not for one release")
        exact = exact[np.asarray(cells, dtype=np.int64)]
    batch = noisy(backend, exact, scale, releases=releases_of(runs), cells=cells)  # a single release: a batch of one
    noisy_counts = batch[0] if runs is None else batch
    if backend_epsilon is not None:
        details["backend_epsilon"] = backend_epsilon
    if runs is not None:
        total, source = None, "not computed for a batch of runs"
    else:
        total, source = release_total(workload, noisy_counts, len(data), relation, declared_total)
    if isinstance(workload, Workload):  # each table's share of ε: its own sensitivity over the scale
        details["epsilon_per_table"] = {"×".join(m): marginal_sensitivity(workload.domain, [m], relation, levels) / scale
                                        for m in workload.marginals}
    details["total"] = source
    mech = Mechanism("laplace_tables", relation, delta_l1, epsilon, scale, details=details)
    return NoisyTables(workload, noisy_counts, total, source), mech


def release_total(workload, noisy_counts: np.ndarray, n: int, relation: Relation, declared_total: bool
                  ) -> tuple[int, str]:
    """The total n one release of noisy tables divides by, and how it was obtained: the true n where the relation
    makes it public (replace-one) or the agency declared it, else estimated from the noisy counts."""
    if relation is Relation.REPLACE_ONE:
        return n, TOTAL_PUBLIC_BY_RELATION
    if declared_total:
        return n, TOTAL_DECLARED
    return estimate_total(workload, noisy_counts), TOTAL_ESTIMATED


def _census_sensitivity(per_person: int, relation: Relation, levels: int) -> int:
    """Census (product-query) tables: a person lies in ``per_person`` released cells at most;
    add/remove changes each by one, replace-one moves the person out of theirs and into
    another's (at most twice as many), times the geographic levels published separately."""
    return per_person * (1 if relation is Relation.ADD_REMOVE else 2) * levels


def total_queries(workload) -> list[np.ndarray]:
    """Groups of query indices whose counts add up to n: the unit's total cell, or all the block
    totals, or every table whose cells partition the persons (each person type, in each block, in
    exactly one of its cells). Raises when the workload has none: n cannot then be estimated."""
    if isinstance(workload, Workload):
        return [np.arange(a, b) for a, b in zip(workload.offsets()[:-1], workload.offsets()[1:])]
    names = list(workload.domain.names)
    q = np.array(workload.queries, dtype=np.int64).reshape(len(workload.queries), len(names))
    member = [workload.membership(j).astype(bool) for j in range(len(names))]
    jb = names.index("BLOCK") if "BLOCK" in names else None
    free = [j for j in range(len(names)) if j != jb]
    sizes = [workload.domain.sizes[j] for j in free]
    n_types = int(np.prod(sizes))
    if n_types > 500_000:
        free_types = None
    else:
        free_types = np.stack(np.unravel_index(np.arange(n_types), sizes), axis=1) if sizes else np.zeros((1, 0), int)
    tables, levels = workload.tables(), workload.levels()
    groups = []
    for t in dict.fromkeys(tables.tolist()):
        for lv in reversed(workload.level_order()):  # the unit first
            idx = np.flatnonzero((tables == t) & (levels == lv))
            if idx.size == 0 or free_types is None:
                continue
            # block 0 (and its area) stands for all: every block and area publishes the same cells
            one = idx if jb is None or lv == "unit" else idx[member[jb][0, q[idx, jb]]]
            hit = np.ones((len(free_types), len(one)), dtype=bool)
            for col, j in enumerate(free):
                hit &= member[j][free_types[:, col]][:, q[one, j]]
            if np.all(hit.sum(axis=1) == 1):
                groups.append(idx)
    if not groups:
        raise PrivacyError("these tables publish neither a total nor a table whose cells add up to everyone, so under "
                           "add/remove neighbours n cannot be estimated from them: add a total table, or declare the "
                           "unit total an invariant (release.invariants: [unit_total])")
    return sorted(groups, key=len)


def estimate_total(workload, noisy: np.ndarray) -> int:
    """n from noisy tables alone (post-processing): the median over the groups of
    :func:`total_queries` (a published total, all block totals, each partitioning table) of their
    noisy sums. The smallest group (the total itself, when published) has the least noise."""
    groups = total_queries(workload)
    sums = [int(np.asarray(noisy)[g].sum()) for g in groups]
    if len(groups[0]) == 1:  # the total is published: it alone has the least noise
        return int(max(1, sums[0]))
    return int(max(1, np.median(sums)))


def fit_synthetic(tables: NoisyTables, key, settings: RAPSettings) -> Dataset:
    """Synthetic microdata fitted to noisy tables by relaxed projection (one RAP run, rounded; ``key`` a JAX key).

    Post-processing of the noisy tables: it costs no privacy. ``settings.rows`` is n'.
    """
    # JAX starts when a fit runs, not when the release code is imported (a config is checked without it)
    from censusrecon.reconstruct.queries import plan_for
    from censusrecon.reconstruct.rap import run_rap

    w = tables.workload
    plan = plan_for(w)
    codes, _, _ = run_rap(plan, tables.answers(), key, np.arange(1), settings)
    return Dataset(w.domain, codes[0].astype(np.int64))


def fit_synthetic_each(batch: list[NoisyTables], key, settings: RAPSettings) -> list[Dataset]:
    """:func:`fit_synthetic` of every release of ``batch`` (each its own noisy tables and total; the same ``key``,
    as each would be published), releases of the same total fitted together in shared compiled calls."""
    from censusrecon.reconstruct.queries import plan_for
    from censusrecon.reconstruct.rap import run_rap_each

    out: list[Dataset | None] = [None] * len(batch)
    by_total: dict[int, list[int]] = {}
    for i, t in enumerate(batch):
        by_total.setdefault(int(t.total), []).append(i)
    for total, idx in by_total.items():
        w = batch[idx[0]].workload
        codes = run_rap_each(plan_for(w), np.stack([batch[i].answers() for i in idx]), key,
                             dataclasses.replace(settings, rows=total, batch=None))
        for i, c in zip(idx, codes):
            out[i] = Dataset(w.domain, c.astype(np.int64))
    return out


def workload_counts(data: Dataset, workload) -> np.ndarray:
    """Exact int64 counts of every published cell of ``workload`` on ``data`` (workload order)."""
    if isinstance(workload, Workload):
        return np.concatenate([marginal_counts(data, m) for m in workload.marginals]).astype(np.int64)
    return workload.counts(data)


def table_utility(published: np.ndarray, exact: np.ndarray, workload) -> list[dict]:
    """Error of each published table in units a statistician reads, per table and level: the mean
    absolute error per cell, in persons, and the share of cells off by more than 10% of their
    true count (an empty cell is off as soon as anything other than 0 is published there)."""
    published, exact = np.asarray(published, dtype=np.float64), np.asarray(exact, dtype=np.float64)
    if isinstance(workload, Workload):
        cuts = workload.offsets()
        groups = [("×".join(m), "unit", slice(cuts[i], cuts[i + 1])) for i, m in enumerate(workload.marginals)]
    else:
        tables, levels = workload.tables(), workload.levels()
        groups = [(t, lv, (tables == t) & (levels == lv)) for t in dict.fromkeys(tables.tolist())
                  for lv in workload.level_order() if ((tables == t) & (levels == lv)).any()]
    out = []
    for name, level, idx in groups:
        err = np.abs(published[idx] - exact[idx])
        out.append({"table": name, "level": level, "cells": int(err.size), "mae_per_cell": float(err.mean()),
                    "share_off_10pct": float(np.mean(err > 0.1 * exact[idx] + 1e-9))})
    return out


#: the rows of :func:`totals_utility`: not published tables but figures derived from them (sums of
#: cells already counted), left out of the table error and shown on their own
DERIVED_ROWS = ("block totals", "unit total")


def totals_utility(published: np.ndarray, exact: np.ndarray, workload) -> list[dict]:
    """Block and unit totals as an agency checks them: mean absolute error of each block's total and
    of the unit's, and the share of blocks whose total is off by more than 5 persons. Totals are the
    sums of the smallest group of cells that adds up to everyone (:func:`total_queries`) per block;
    empty when the tables publish none."""
    if isinstance(workload, Workload):
        return []
    try:
        groups = total_queries(workload)
    except PrivacyError:
        return []
    published, exact = np.asarray(published, dtype=np.float64), np.asarray(exact, dtype=np.float64)
    levels = workload.levels()
    out = []
    unit_group = next((g for g in groups if (levels[g] == "unit").all()), None)
    block_group = next((g for g in groups if (levels[g] == "block").all()), None)
    if block_group is not None:
        block_of = np.array([workload.labels[i].split("@", 1)[1] for i in block_group])
        names = list(dict.fromkeys(block_of.tolist()))
        pub = np.array([published[block_group][block_of == b].sum() for b in names])
        ex = np.array([exact[block_group][block_of == b].sum() for b in names])
        err = np.abs(pub - ex)
        out.append({"table": "block totals", "level": "block", "cells": len(names), "mae_per_cell": float(err.mean()),
                    "share_off_10pct": float(np.mean(err > 0.1 * ex + 1e-9)),
                    "share_off_5_persons": float(np.mean(err > 5))})
    g = unit_group if unit_group is not None else block_group
    if g is not None:
        err = abs(float(published[g].sum()) - float(exact[g].sum()))
        out.append({"table": "unit total", "level": "unit", "cells": 1, "mae_per_cell": err,
                    "share_off_10pct": float(err > 0.1 * float(exact[g].sum()) + 1e-9)})
    return out
