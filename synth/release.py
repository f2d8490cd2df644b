"""Laplace release of published tables (discrete noise on int64 cell counts) and synthetic data fitted to them."""

from __future__ import annotations

from dataclasses import dataclass

import jax
import numpy as np

from microdata.dataset import Dataset
from microdata.marginals import Workload, marginal_counts
from reconstruct.queries import plan_for
from reconstruct.rap import RAPSettings, run_rap
from synth.mechanism import Mechanism, PrivacyError, Relation, marginal_sensitivity, parse_relation
from synth.noise import noise_scale


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


def _noised(backend, exact: np.ndarray, scale: float, runs: int | None) -> np.ndarray:
    """``exact`` plus discrete Laplace noise, once or ``runs`` times independently (one row each)."""
    if runs is None:
        return backend.add(exact, scale)
    return backend.add(np.broadcast_to(exact, (int(runs), exact.size)), scale)


def laplace_tables(data: Dataset, workload, epsilon: float, backend,
                   relation: Relation | str = Relation.REPLACE_ONE, levels: int = 1,
                   declared_total: bool = False, runs: int | None = None) -> tuple[NoisyTables, Mechanism]:
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
    publishes it exactly; the ledger says so). ``runs`` releases that many times at once
    (for the auditor: the same code path, one row of counts per release).
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
    noisy = _noised(backend, exact, scale, runs)
    if backend_epsilon is not None:
        details["backend_epsilon"] = backend_epsilon
    if runs is not None:
        total, source = None, "not computed for a batch of runs"
    elif relation is Relation.REPLACE_ONE:
        total, source = len(data), TOTAL_PUBLIC_BY_RELATION
    elif declared_total:
        total, source = len(data), TOTAL_DECLARED
    else:
        total, source = estimate_total(workload, noisy), TOTAL_ESTIMATED
    if isinstance(workload, Workload):  # each table's share of ε: its own sensitivity over the scale
        details["epsilon_per_table"] = {"×".join(m): marginal_sensitivity(workload.domain, [m], relation, levels) / scale
                                        for m in workload.marginals}
    details["total"] = source
    mech = Mechanism("laplace_tables", relation, delta_l1, epsilon, scale, details=details)
    return NoisyTables(workload, noisy, total, source), mech


def _census_sensitivity(per_person: int, relation: Relation, levels: int) -> int:
    """Census (product-query) tables: a person lies in ``per_person`` released cells at most;
    add/remove changes each by one, replace-one moves the person out of theirs and into
    another's (at most twice as many), times the geographic levels published separately."""
    return per_person * (1 if relation is Relation.ADD_REMOVE else 2) * levels


def estimate_total(workload, noisy: np.ndarray) -> int:
    """n from noisy tables alone (post-processing). Marginals: the median over tables of each
    table's noisy sum. Product-query tables: the unit's noisy total if it is published, else the
    sum of the noisy block totals; a workload that publishes neither has no total to estimate."""
    if isinstance(workload, Workload):
        sums = [part.sum() for part in np.split(noisy, workload.offsets()[1:-1])]
        return int(max(1, np.median(sums)))
    full = [frozenset(range(s)) for s in workload.domain.sizes]
    names = list(workload.domain.names)
    unit_total, block_totals = [], []
    for i, query in enumerate(workload.queries):
        sets = [workload.value_sets[j][query[j]] for j in range(len(names))]
        if all(sets[j] == full[j] for j, a in enumerate(names) if a != "BLOCK"):
            if "BLOCK" not in names or sets[names.index("BLOCK")] == full[names.index("BLOCK")]:
                unit_total.append(i)
            elif len(sets[names.index("BLOCK")]) == 1:
                block_totals.append(i)
    if unit_total:
        return int(max(1, noisy[unit_total[0]]))
    if block_totals:
        return int(max(1, noisy[block_totals].sum()))
    raise PrivacyError("these tables publish no total (no cell counts everyone), so under add/remove neighbours "
                       "n cannot be estimated from them: add a total table, or declare the unit total an invariant "
                       "(release.invariants: [unit_total])")


def fit_synthetic(tables: NoisyTables, key: jax.Array, settings: RAPSettings) -> Dataset:
    """Synthetic microdata fitted to noisy tables by relaxed projection (one RAP run, rounded).

    Post-processing of the noisy tables: it costs no privacy. ``settings.rows`` is n'.
    """
    w = tables.workload
    plan = plan_for(w)
    codes, _, _ = run_rap(plan, tables.answers(), key, np.arange(1), settings)
    return Dataset(w.domain, codes[0].astype(np.int64))


def table_errors(released: np.ndarray, exact: np.ndarray, workload) -> tuple[list[str], np.ndarray]:
    """Half the L1 distance between each released table (fractions of persons) and the exact
    one: the total variation for a marginal; for census tables, whose cells overlap, the
    same formula over the table's cells. Returns (table names, errors)."""
    if isinstance(workload, Workload):
        cuts = workload.offsets()[1:-1]
        names = ["×".join(m) for m in workload.marginals]
        errs = [0.5 * np.abs(a - b).sum() for a, b in zip(np.split(released, cuts), np.split(exact, cuts))]
        return names, np.array(errs)
    tables = workload.tables()
    names = list(dict.fromkeys(tables.tolist()))
    return names, np.array([0.5 * np.abs(released[tables == t] - exact[tables == t]).sum() for t in names])
