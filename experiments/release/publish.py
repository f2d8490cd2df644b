"""Publishing one release: every mechanism's single code path, the one evaluate-release attacks, the
auditor audits and an agency would publish through."""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field

import numpy as np

from experiments.config import ConfigError, ExperimentConfig
from experiments.problem import Study, stable_seed, exact_answers, rap_settings
from microdata.dataset import Dataset
from microdata.geography import FROM_ROWS
from microdata.marginals import Workload, marginal_counts
from synth.histogram import DENSE_LIMIT, SparseHistogram, perturbed_histogram, smoothed_histogram
from synth.mechanism import Mechanism, Relation, parse_relation
from synth.keyed import KeyedNoise
from synth.noise import make_backend
from synth.release import TOTAL_PUBLIC_BY_RELATION, fit_synthetic, laplace_tables, workload_counts
from synth.swapping import NOT_DP, swap_records
from synth.cellkey import cell_key_tables, NOT_DP as CELL_KEY_NOT_DP, perturbation_table
from synth.release import estimate_total
from synth.swapping import TARGETED_NOT_DP, targeted_swap

log = logging.getLogger(__name__)


def release_backend(cfg: ExperimentConfig, *parts):
    """The noise of one release: OpenDP's (publication), or counter-based simulation noise keyed by the
    experiment's seed and the release (:class:`synth.keyed.KeyedNoise`, the auditor's key schedule)."""
    r = cfg.release
    if r.backend == "opendp":
        return make_backend("opendp")
    return KeyedNoise(stable_seed("noise", cfg.seed, *parts))


@dataclass
class Published:
    """One release as published, and what an attacker computes from it.

    ``structure`` is the shape of what is published (table cells, histogram size): it must come
    from public inputs only, so it is the same for any two neighbouring datasets (the auditor
    checks). ``answers`` are the workload's answers the attacker derives (fractions; None for a
    batch of runs)."""

    mechanism: str
    record: Mechanism
    output: object
    answers: np.ndarray | None
    structure: tuple
    for_publication: bool
    publication_note: str
    counts: np.ndarray | None = None  # the published table counts in persons (workload order)
    facts: dict = field(default_factory=dict)
    rows: Dataset | None = None  # the microdata published, when the release publishes rows


def fit_note(backend, mechanism: str) -> tuple[bool, str]:
    if mechanism == "smoothed_histogram":
        return False, "numpy sampling whatever the backend: a study mechanism, not for publication"
    if backend.for_publication:
        return True, f"{backend.name} discrete Laplace (vetted sampler)"
    return False, "seeded simulation noise: for studies, not for publication"


def publish(cfg: ExperimentConfig, mechanism: str, epsilon: float, D: Dataset, workload, backend,
            rng: np.random.Generator, key=None, runs=None, dense_limit: int = DENSE_LIMIT,
            cells: np.ndarray | None = None) -> Published:
    """Release D's tables by ``mechanism`` at ``epsilon``: the one code path evaluate-release
    attacks, the auditor audits and an agency would publish through.

    D's domain (attributes, BLOCK from the public block list) and the workload are public
    inputs. The true n of D reaches the release only where the neighbouring relation makes it
    public (replace-one) or the agency declared it (``release.invariants: [unit_total]``);
    otherwise totals come from the noisy tables. ``runs`` releases that many times at once, or the
    listed release numbers (the auditor's batches; additive mechanisms only), through the same code
    as one release (a batch of one); ``cells`` draws only those table cells (the auditor's pairs:
    with a keyed backend, equal to the same cells of the whole release).
    """
    r = cfg.release
    declared_total = "unit_total" in r.invariants
    ok, note = fit_note(backend, mechanism)
    if mechanism in ("laplace_tables", "synthetic"):
        tables, rec = laplace_tables(D, workload, epsilon, backend, r.relation, declared_total=declared_total,
                                     runs=runs, cells=cells)
        structure = ("tables", table_labels(workload))
        if mechanism == "laplace_tables" or runs is not None:
            answers = tables.answers() if runs is None else None
            counts = tables.counts.astype(np.float64) if runs is None else None
            return Published("laplace_tables", rec, tables, answers, structure, ok, note, counts)
        synth = fit_synthetic(tables, key, rap_settings(cfg, rows=int(tables.total), batch=1))
        rec = dataclasses.replace(rec, name="synthetic", details={
            **rec.details, "fitted_to": "laplace_tables (post-processing: no further ε)",
            "rows": len(synth), "rows_are": tables.total_source})
        return Published("synthetic", rec, synth, exact_answers(synth, workload),
                         ("rows over", tuple(D.domain.names), D.domain.sizes), ok, note,
                         workload_counts(synth, workload).astype(np.float64), rows=synth)
    if mechanism == "perturbed_histogram":
        hist, rec = perturbed_histogram(D, epsilon, backend, r.relation, rng=rng, runs=runs, dense_limit=dense_limit)
        answers = histogram_answers(hist, workload) if runs is None else None
        counts = None if runs is not None else answers * float(max(hist.counts.sum(), 0))
        return Published(mechanism, rec, hist, answers, ("histogram", D.domain.total_size), ok, note, counts)
    if mechanism == "smoothed_histogram":
        if parse_relation(r.relation) is not Relation.REPLACE_ONE:
            raise ConfigError("the smoothed histogram is DP only under replace_one neighbours (n public)")
        keys, rec = smoothed_histogram(D, epsilon, len(D), rng, runs=runs)  # k = n draws: n is public here
        rec = dataclasses.replace(rec, details={**rec.details, "rows_are": TOTAL_PUBLIC_BY_RELATION})
        drawn = None if runs is not None else Dataset(D.domain, D.domain.decode(keys))
        answers = None if drawn is None else exact_answers(drawn, workload)
        counts = None if drawn is None else workload_counts(drawn, workload).astype(np.float64)
        return Published(mechanism, rec, keys, answers, ("draws from a histogram of", D.domain.total_size), ok, note,
                         counts, rows=drawn)
    raise ConfigError(f"unknown mechanism {mechanism!r}")


def publish_swapping(cfg: ExperimentConfig, rate: float, D: Dataset, workload, rng: np.random.Generator) -> Published:
    """Swap about ``rate`` of D's records between its blocks and publish the swapped file's exact
    tables (consistent, integer, and not differentially private)."""
    swapped, facts = swap_records(D, rate, rng, list(cfg.release.swap_match))
    pub = Published("swapping", None, swapped, exact_answers(swapped, workload), ("tables", table_labels(workload)),
                    False, NOT_DP, workload_counts(swapped, workload).astype(np.float64), rows=swapped)
    pub.facts = facts
    return pub


def swap_pool(study: Study, unit: str) -> Dataset:
    """The persons targeted swapping may bring in: those of the unit's enclosing area (its county, for a
    tract) outside the unit, over the attack attributes."""
    pop = study.pop
    geo = pop.geography
    level = study.level
    parents = geo.coarser(level)
    if not parents:
        raise ConfigError(f"targeted swapping swaps with another area of the enclosing unit, and a {level} has none")
    parent = geo.parent(level, unit, parents[0])
    rows = np.flatnonzero((geo.units(parents[0]) == parent) & (geo.units(level) != unit))
    return pop.take(rows).project([a for a in study.attributes if a != "BLOCK"])


def publish_targeted_swapping(cfg: ExperimentConfig, rate: float, D: Dataset, workload, rng: np.random.Generator,
                              pool: Dataset) -> Published:
    """D with its records at risk swapped first for matching records of another area (``pool``), then
    others, up to ``rate``; the swapped file's exact tables published. Not DP."""
    t = cfg.release.targeted_swap
    risk = t.risk or [a for a in D.domain.names if a != "BLOCK"]
    swapped, facts = targeted_swap(D, pool, rate, rng, risk, list(t.match), t.threshold)
    pub = Published("targeted_swapping", None, swapped, exact_answers(swapped, workload),
                    ("tables", table_labels(workload)), False, TARGETED_NOT_DP,
                    workload_counts(swapped, workload).astype(np.float64), rows=swapped)
    pub.facts = facts
    return pub


def tables_published(mechanism: str, counts: np.ndarray, workload, note: str, **facts) -> Published:
    """Tables whose noise censusrecon did not draw (a file's, a program's, the cell key method's): the
    counts, and the answers RAP-Rank fits: negatives clipped, divided by the total estimated from the
    tables themselves (post-processing). ``facts["kind"] == "tables"`` marks them for the
    least-deviation attack, every cell weighing the same."""
    total = estimate_total(workload, counts)
    answers = np.clip(counts, 0, None).astype(np.float64) / max(total, 1)
    return Published(mechanism, None, counts, answers, ("tables", table_labels(workload)), False, note,
                     np.asarray(counts, dtype=np.float64), facts={**facts, "kind": "tables", "total": int(total)})


def publish_cell_key(cfg: ExperimentConfig, variance: float, D: Dataset, workload, rng: np.random.Generator
                     ) -> Published:
    """D's tables perturbed by the cell key method (``release.cell_key``; the ptable of this variance):
    integers, a cell's perturbation the same in every table, tables no longer adding up. Not DP."""
    ck = cfg.release.cell_key
    counts, facts = cell_key_tables(D, workload, perturbation_table(ck.max_perturbation, variance, ck.key_range), rng)
    return tables_published("cell_key", counts, workload, CELL_KEY_NOT_DP, **facts)


def table_labels(workload) -> tuple:
    if isinstance(workload, Workload):
        return tuple((m, workload.shape(m)) for m in workload.marginals)
    return tuple(workload.labels)


def histogram_answers(hist: SparseHistogram, workload) -> np.ndarray:
    """The workload's answers on the normalised noisy histogram itself (post-processing): no rows
    are sampled from it, so no row count, and no n, enters what the attacker sees."""
    domain = workload.domain
    total = hist.counts.sum()
    if total <= 0:  # nothing left after clipping: the uniform distribution over the domain
        keys = None
    else:
        keys, weights = hist.keys, hist.counts.astype(np.float64) / total
    if keys is None:
        if isinstance(workload, Workload):
            return np.concatenate([np.full(n, 1.0 / n) for n in workload.sizes])
        return np.array([np.prod([len(workload.value_sets[j][q[j]]) / domain.sizes[j] for j in range(len(domain))])
                         for q in workload.queries])
    rows = Dataset(domain, domain.decode(keys))
    if isinstance(workload, Workload):
        return np.concatenate([marginal_counts(rows, m, weights) for m in workload.marginals])
    return workload.counts(rows, weights)


def own_invariants(cfg: ExperimentConfig, mechanism: str, with_block: bool) -> list[str]:
    """The declared invariants a mechanism's release really publishes, for its ledger entry: the
    root total for TopDown only, the unit total where the tables' n is taken as declared
    (Laplace tables and what is fitted to them), the block list wherever blocks are published."""
    uses = {"root_total": mechanism == "topdown",
            "unit_total": mechanism in ("laplace_tables", "synthetic"),
            "occupied_blocks": with_block}
    return [i for i in cfg.release.invariants if uses.get(i, True)]


def neighbours_of(cfg: ExperimentConfig, mechanism: str) -> tuple[str, str]:
    """What one mechanism's ε protects: the dataset whose neighbours it is DP for, and what it publishes
    exactly (by the relation or declared), so that releases compared side by side say how they differ.

    >>> from experiments.config import parse_config
    >>> neighbours_of(parse_config({"name": "x", "release": {"relation": "replace_one"}}), "laplace_tables")[1]
    "the unit's n (replace_one: the same for every neighbour)"
    """
    r = cfg.release
    replace = parse_relation(r.relation) is Relation.REPLACE_ONE
    level = cfg.target.level
    if mechanism == "topdown":
        what = (f"every person under the {r.topdown.root} around the unit (the release's root): one person "
                + ("replaced anywhere in it, moving between its units" if replace else "added or removed"))
        exact = [f"the {r.topdown.root}'s n" + (" (replace_one: the same for every neighbour)" if replace else "")]
        if not replace and "root_total" in r.invariants:
            exact = [f"the {r.topdown.root}'s n (declared invariant)"]
        if not replace and "root_total" not in r.invariants:
            exact = []
    else:
        what = f"the persons of one {level}: one person " + ("replaced within it" if replace else "added or removed")
        exact = (["the unit's n (replace_one: the same for every neighbour)"] if replace else
                 ["the unit's n (declared invariant)"] if "unit_total" in r.invariants and
                 mechanism in ("laplace_tables", "synthetic") else [])
    exact += [i for i in own_invariants(cfg, mechanism, True) if i not in ("unit_total", "root_total")]
    return what, "; ".join(exact) or "nothing"


def check_block_list(study: Study, unit: str) -> None:
    """Tables per block may be released only over a public block list, or a list from the persons
    that the agency declares it publishes as it is (``release.invariants: [occupied_blocks]``)."""
    _, source = study.blocks(unit)
    if source == FROM_ROWS and "occupied_blocks" not in study.cfg.release.invariants:
        raise ConfigError(
            "this data has no public block list: its blocks would be "
            f"{FROM_ROWS}. Publishing tables per block over that list reveals which blocks have anyone in them, "
            "which no ε accounts for (replace a block's only resident and the block disappears). Give the public "
            "list of blocks (a units file), or declare release.invariants: [occupied_blocks] to publish it as an "
            "invariant, recorded in the ledger")
