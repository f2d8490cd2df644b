"""Publishing one release of one unit: what a release is (:class:`Published`), what a mechanism is given
(:class:`ReleaseInputs`), and the built-in mechanisms' publishing functions, each the single code path an
evaluation attacks, the auditor audits and an agency would publish through."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from censusrecon.microdata.dataset import Dataset
from censusrecon.microdata.errors import CensusReconError
from censusrecon.microdata.marginals import Workload, answer, marginal_counts
from censusrecon.reconstruct.settings import RAPSettings
from censusrecon.synth.cellkey import NOT_DP as CELL_KEY_NOT_DP
from censusrecon.synth.cellkey import cell_key_tables, perturbation_table
from censusrecon.synth.histogram import DENSE_LIMIT, SparseHistogram, perturbed_histogram, smoothed_histogram
from censusrecon.synth.mechanism import Mechanism, Relation, parse_relation
from censusrecon.synth.release import (TOTAL_PUBLIC_BY_RELATION, NoisyTables, estimate_total, fit_synthetic,
                                       fit_synthetic_each, laplace_tables, release_total, workload_counts)
from censusrecon.synth.swapping import NOT_DP as SWAPPING_NOT_DP
from censusrecon.synth.swapping import TARGETED_NOT_DP, SwapRule, swap_records, targeted_swap


class ReleaseError(CensusReconError):
    """A release cannot be made as asked (a relation its mechanism is not DP under, missing inputs)."""


@dataclass
class Published:
    """One release as published, and what an attacker computes from it.

    ``structure`` is the shape of what is published (table cells, histogram size): it must come
    from public inputs only, so it is the same for any two neighbouring datasets (the auditor
    checks). ``answers`` are the workload's answers the attacker derives (fractions; None for a
    batch of runs)."""

    mechanism: str
    record: Mechanism | None
    output: object
    answers: np.ndarray | None
    structure: tuple
    for_publication: bool
    publication_note: str
    counts: np.ndarray | None = None  # the published table counts in persons (workload order)
    facts: dict = field(default_factory=dict)
    rows: Dataset | None = None  # the microdata published, when the release publishes rows


@dataclass(frozen=True)
class Draw:
    """How one call of a publishing function draws: its noise (``backend``: OpenDP's, or keyed simulation noise)
    and its generator for what is not noise (a fit's sampling), and, for the auditor and the evaluation, ``runs``
    (that many releases at once, or the listed release numbers: additive mechanisms only), ``cells`` (only those
    table cells), ``key`` (a fit's JAX key), ``dense_limit`` (the largest domain a histogram is drawn densely over),
    ``pool`` (the persons targeted swapping may bring in) and ``shared`` (a release made once for several units,
    TopDown's root, returning this unit's share); ``fitted``: with ``runs``, a release that fits rows publishes
    every release of the batch whole, its rows fitted in shared compiled calls (the membership game's), instead
    of the tables it fits (the auditor's)."""

    backend: Any = None
    rng: np.random.Generator | None = None
    key: Any = None
    runs: Any = None
    cells: np.ndarray | None = None
    dense_limit: int = DENSE_LIMIT
    pool: Callable[[], Dataset] | None = None
    shared: Callable[["ReleaseInputs"], "Published"] | None = None
    fitted: bool = False


@dataclass(frozen=True)
class ReleaseInputs:
    """Everything a mechanism's publishing function is given for one release of one unit, and nothing else.

    ``data`` is the unit's private D; its domain (attributes, BLOCK from the public block list) and
    ``workload`` are public. ``setting`` is the mechanism's setting (ε, a swap rate, a ptable variance).
    ``relation`` and ``declared`` (the invariants the agency declared it publishes exactly) decide which
    totals are public. ``fit`` is (fit for publication, note), from the mechanism and the noise backend.
    ``options`` is the mechanism's own section of the release config. ``runs``/``cells`` are the auditor's
    batches and cell subsets (additive mechanisms only); ``key`` and ``rap`` a fit's JAX key and RAP settings;
    ``pool`` (targeted swapping) the persons it may swap in; ``shared`` (a release made once for several
    units, TopDown's root) returns this unit's share of it; ``fitted`` (with ``runs``): fit the rows of every
    release of the batch (:class:`Draw`)."""

    data: Dataset
    workload: Any
    setting: float
    rng: np.random.Generator
    backend: Any = None
    relation: str = "replace_one"
    declared: tuple[str, ...] = ()
    fit: tuple[bool, str] = (False, "")
    options: Any = None
    key: Any = None
    rap: RAPSettings | None = None
    runs: Any = None
    cells: np.ndarray | None = None
    dense_limit: int = DENSE_LIMIT
    pool: Callable[[], Dataset] | None = None
    shared: Callable[["ReleaseInputs"], Published] | None = None
    fitted: bool = False


def answers_of(data: Dataset, workload) -> np.ndarray:
    """Q(data) as fractions of its rows, for a marginal workload or a census one."""
    return answer(data, workload) if isinstance(workload, Workload) else workload.answer(data)


def table_labels(workload) -> tuple:
    """What a workload's tables are, in order: the structure of a release of tables."""
    if isinstance(workload, Workload):
        return tuple((m, workload.shape(m)) for m in workload.marginals)
    return tuple(workload.labels)


def rows_published(name: str, rows: Dataset, workload, note: str, facts: dict) -> Published:
    """A microdata file published with its exact tables (consistent, integer): swapping's."""
    return Published(name, None, rows, answers_of(rows, workload), ("tables", table_labels(workload)), False, note,
                     workload_counts(rows, workload).astype(np.float64), facts=facts, rows=rows)


def tables_published(name: str, counts: np.ndarray, workload, note: str, **facts) -> Published:
    """Tables whose noise censusrecon did not draw (a file's, a program's, the cell key method's): the
    counts, and the answers RAP-Rank fits: negatives clipped, divided by the total estimated from the
    tables themselves (post-processing). ``facts["kind"] == "tables"`` marks them for the
    least-deviation attack, every cell weighing the same."""
    total = estimate_total(workload, counts)
    answers = np.clip(counts, 0, None).astype(np.float64) / max(total, 1)
    return Published(name, None, counts, answers, ("tables", table_labels(workload)), False, note,
                     np.asarray(counts, dtype=np.float64), facts={**facts, "kind": "tables", "total": int(total)})


def histogram_answers(hist: SparseHistogram, workload) -> np.ndarray:
    """The workload's answers on the normalised noisy histogram itself (post-processing): no rows
    are sampled from it, so no row count, and no n, enters what the attacker sees."""
    domain = workload.domain
    total = hist.counts.sum()
    if total <= 0:  # nothing left after clipping: the uniform distribution over the domain
        if isinstance(workload, Workload):
            return np.concatenate([np.full(n, 1.0 / n) for n in workload.sizes])
        return np.array([np.prod([len(workload.value_sets[j][q[j]]) / domain.sizes[j] for j in range(len(domain))])
                         for q in workload.queries])
    keys, weights = hist.keys, hist.counts.astype(np.float64) / total
    rows = Dataset(domain, domain.decode(keys))
    if isinstance(workload, Workload):
        return np.concatenate([marginal_counts(rows, m, weights) for m in workload.marginals])
    return workload.counts(rows, weights)


# ---- the built-in mechanisms' publishing functions (registered in synth.registry) -------------------------


def _laplace(x: ReleaseInputs) -> tuple:
    return laplace_tables(x.data, x.workload, x.setting, x.backend, x.relation,
                          declared_total="unit_total" in x.declared, runs=x.runs, cells=x.cells)


def publish_laplace_tables(x: ReleaseInputs) -> Published:
    """Discrete Laplace noise on every published cell (:func:`synth.release.laplace_tables`)."""
    tables, rec = _laplace(x)
    answers = tables.answers() if x.runs is None else None
    counts = tables.counts.astype(np.float64) if x.runs is None else None
    return Published("laplace_tables", rec, tables, answers, ("tables", table_labels(x.workload)), *x.fit, counts)


def publish_synthetic(x: ReleaseInputs) -> Published:
    """Microdata fitted by relaxed projection to the Laplace tables (post-processing: no further ε). With
    ``runs`` (the auditor's batches) the tables alone: the fit adds nothing to audit in them; with ``runs`` and
    ``fitted`` (the membership game's), every release of the batch whole: ``output`` its rows, one Dataset per
    release, ``counts`` their tables (one row per release)."""
    if x.runs is not None and not x.fitted:
        return publish_laplace_tables(x)
    if x.rap is None:
        raise ReleaseError("the synthetic release fits rows by RAP and was given no RAP settings")
    if x.runs is not None:
        return _synthetic_batch(x)
    tables, rec = _laplace(x)
    synth = fit_synthetic(tables, x.key, dataclasses.replace(x.rap, rows=int(tables.total), batch=1))
    rec = dataclasses.replace(rec, name="synthetic", details={
        **rec.details, "fitted_to": "laplace_tables (post-processing: no further ε)",
        "rows": len(synth), "rows_are": tables.total_source})
    return Published("synthetic", rec, synth, answers_of(synth, x.workload),
                     ("rows over", tuple(x.data.domain.names), x.data.domain.sizes), *x.fit,
                     workload_counts(synth, x.workload).astype(np.float64), rows=synth,
                     facts={"noisy_tables": tables.counts})  # what it fitted: the auditor checks the call that publishes


def _synthetic_batch(x: ReleaseInputs) -> Published:
    """Every release of a batch of synthetic files, each fitted to its own noisy tables with the published fit's
    key and settings (:func:`synth.release.fit_synthetic_each`)."""
    if x.cells is not None:
        raise ReleaseError("a batch of fitted releases fits every cell of its tables: give no cells")
    batch, rec = _laplace(x)
    relation = parse_relation(x.relation)
    tables = [NoisyTables(x.workload, c, *release_total(x.workload, c, len(x.data), relation, "unit_total" in x.declared))
              for c in batch.counts]
    rows = fit_synthetic_each(tables, x.key, dataclasses.replace(x.rap, batch=None))
    counts = np.stack([workload_counts(r, x.workload) for r in rows]).astype(np.float64)
    return Published("synthetic", rec, rows, None, ("rows over", tuple(x.data.domain.names), x.data.domain.sizes),
                     *x.fit, counts, facts={"noisy_tables": batch.counts})


def publish_perturbed_histogram(x: ReleaseInputs) -> Published:
    """Wasserman & Zhou 4.1: the noisy full histogram; the attacker's answers computed on it."""
    D = x.data
    hist, rec = perturbed_histogram(D, x.setting, x.backend, x.relation, rng=x.rng, runs=x.runs,
                                    dense_limit=x.dense_limit, cells=x.cells)
    answers = histogram_answers(hist, x.workload) if x.runs is None else None
    counts = None if x.runs is not None else answers * float(max(hist.counts.sum(), 0))
    return Published("perturbed_histogram", rec, hist, answers, ("histogram", D.domain.total_size), *x.fit, counts)


def publish_smoothed_histogram(x: ReleaseInputs) -> Published:
    """Wasserman & Zhou 4.2: n rows drawn from a mix of the data and the uniform (n public: replace-one)."""
    D = x.data
    if parse_relation(x.relation) is not Relation.REPLACE_ONE:
        raise ReleaseError("the smoothed histogram is DP only under replace_one neighbours (n public)")
    keys, rec = smoothed_histogram(D, x.setting, len(D), x.rng, runs=x.runs)  # k = n draws: n is public here
    rec = dataclasses.replace(rec, details={**rec.details, "rows_are": TOTAL_PUBLIC_BY_RELATION})
    drawn = None if x.runs is not None else Dataset(D.domain, D.domain.decode(keys))
    answers = None if drawn is None else answers_of(drawn, x.workload)
    counts = None if drawn is None else workload_counts(drawn, x.workload).astype(np.float64)
    return Published("smoothed_histogram", rec, keys, answers, ("draws from a histogram of", D.domain.total_size),
                     *x.fit, counts, rows=drawn)


def publish_shared(x: ReleaseInputs) -> Published:
    """A release made once for several units (TopDown's, of a root): this unit's share, from the caller."""
    if x.shared is None:
        raise ReleaseError("this mechanism releases a whole tree at once: its unit's share comes from the "
                           "evaluation (ReleaseInputs.shared)")
    return x.shared(x)


def publish_swapping(x: ReleaseInputs) -> Published:
    """Swap about ``setting`` of D's records between its blocks and publish the swapped file's exact
    tables (consistent, integer, and not differentially private)."""
    swapped, facts = swap_records(x.data, x.setting, x.rng, list(x.options))
    return rows_published("swapping", swapped, x.workload, SWAPPING_NOT_DP, facts)


def publish_targeted_swapping(x: ReleaseInputs) -> Published:
    """D with its records at risk swapped first for matching records of another area (``pool``), then
    others, up to ``setting``; the swapped file's exact tables published. Not DP."""
    t = x.options
    if x.pool is None:
        raise ReleaseError("targeted swapping swaps with persons of another area and was given none (pool)")
    risk = t.risk or [a for a in x.data.domain.names if a != "BLOCK"]
    swapped, facts = targeted_swap(x.data, x.pool(), x.setting, x.rng, SwapRule(tuple(risk), tuple(t.match), t.threshold))
    return rows_published("targeted_swapping", swapped, x.workload, TARGETED_NOT_DP, facts)


def publish_cell_key(x: ReleaseInputs) -> Published:
    """D's tables perturbed by the cell key method (the ptable of this variance): integers, a cell's
    perturbation the same in every table, tables no longer adding up. Not DP."""
    ck = x.options
    table = perturbation_table(ck.max_perturbation, x.setting, ck.key_range)
    counts, facts = cell_key_tables(x.data, x.workload, table, x.rng)
    return tables_published("cell_key", counts, x.workload, CELL_KEY_NOT_DP, **facts)
