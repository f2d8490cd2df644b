"""Laplace release of published tables (discrete noise on int64 cell counts) and synthetic data fitted to them."""

from __future__ import annotations

from dataclasses import dataclass

import jax
import numpy as np

from microdata.dataset import Dataset
from microdata.marginals import Workload, marginal_counts
from reconstruct.queries import plan_for
from reconstruct.rap import RAPSettings, run_rap
from synth.mechanism import Mechanism, Relation, laplace_scale, marginal_sensitivity, parse_relation


@dataclass(frozen=True)
class NoisyTables:
    """Noisy int64 cell counts of every marginal of ``workload`` (negative values kept, as released)."""

    workload: Workload
    counts: np.ndarray  # concatenated over the workload's marginals, int64
    total: int  # n if the relation makes it public, else an estimate from the noisy tables

    def answers(self) -> np.ndarray:
        """Post-processed fractions for the attack or a fit: each table's negatives clipped and the
        table normalised to sum to one (uniform if nothing is left); costs no privacy. Census
        cells overlap (totals and their parts), so they are clipped and divided by the total."""
        if not isinstance(self.workload, Workload):
            return np.clip(self.counts, 0, None).astype(np.float64) / max(self.total, 1)
        out = []
        for part in np.split(self.counts, self.workload.offsets()[1:-1]):
            c = np.clip(part, 0, None).astype(np.float64)
            out.append(c / c.sum() if c.sum() > 0 else np.full(c.size, 1.0 / c.size))
        return np.concatenate(out)


def laplace_tables(data: Dataset, workload: Workload, epsilon: float, backend,
                   relation: Relation | str = Relation.REPLACE_ONE, levels: int = 1) -> tuple[NoisyTables, Mechanism]:
    """Discrete Laplace noise on every cell of every table of ``workload``.

    Privacy unit: one person. Relation: as given; the L1 sensitivity of all the tables
    together is computed from it (:func:`synth.mechanism.marginal_sensitivity`: #tables
    under add/remove, 2·#tables under replace-one, times the geographic ``levels`` the
    tables are published at) and the noise scale is Δ/ε. Counts are int64 from the data
    to the release; no noise ever touches a float.
    """
    relation = parse_relation(relation)
    if not isinstance(workload, Workload):
        return _laplace_census(data, workload, epsilon, backend, relation, levels)
    delta_l1 = marginal_sensitivity(workload.domain, workload.marginals, relation, levels)
    scale = laplace_scale(delta_l1, epsilon)
    exact = np.concatenate([marginal_counts(data, m) for m in workload.marginals]).astype(np.int64)
    noisy = backend.add(exact, scale)
    if relation is Relation.REPLACE_ONE:
        total = len(data)  # n is public under replace-one neighbours
    else:  # post-processing: the median over tables of each table's noisy total
        sums = [s.sum() for s in np.split(noisy, workload.offsets()[1:-1])]
        total = int(max(1, np.median(sums)))
    # each table's share of ε: its own L1 sensitivity over the scale (they add up to ε)
    per_table = {"×".join(m): marginal_sensitivity(workload.domain, [m], relation, levels) / scale
                 for m in workload.marginals}
    mech = Mechanism("laplace_tables", relation, delta_l1, epsilon, scale,
                     details={"tables": len(workload.marginals), "cells": workload.num_queries, "levels": levels,
                              "epsilon_per_table": per_table})
    return NoisyTables(workload, noisy, total), mech


def _laplace_census(data: Dataset, workload, epsilon: float, backend, relation: Relation,
                    levels: int) -> tuple[NoisyTables, Mechanism]:
    """Census table cells: a person is counted in several cells of a table (totals, subtotals),
    so the L1 sensitivity is the most cells one person lies in (an upper bound, see
    ``CensusWorkload.max_cells_per_person``) under add/remove, twice that under replace-one
    (the person leaves their cells and enters others'), times the geographic levels."""
    per_person = workload.max_cells_per_person()
    delta_l1 = per_person * (1 if relation is Relation.ADD_REMOVE else 2) * levels
    scale = laplace_scale(delta_l1, epsilon)
    noisy = backend.add(workload.counts(data), scale)
    total = len(data) if relation is Relation.REPLACE_ONE else int(max(1, noisy[0]))
    mech = Mechanism("laplace_tables", relation, delta_l1, epsilon, scale,
                     details={"cells": workload.num_queries, "cells_per_person": per_person, "levels": levels,
                              "sensitivity_is_upper_bound": True})
    return NoisyTables(workload, noisy, total), mech


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
