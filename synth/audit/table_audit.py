"""The tables families: noisy tables, and a file fitted to them, on each audited unit's own data."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from censusrecon.microdata.dataset import Dataset
from censusrecon.microdata.marginals import Workload
from censusrecon.microdata.seeds import stable_seed
from censusrecon.synth import registry
from censusrecon.synth.audit.checks import (
    Release,
    WholeNoise,
    band_groups,
    bound_noise,
    combine_units,
    contract_failure,
    independence_columns,
    keyed_release,
    opendp_accounting,
    publication_noise,
    release_tail_stats,
    replay_pairs,
    structure_check,
    unit_instance,
    whole_checks,
)
from censusrecon.synth.audit.families import AuditFamily, FamilyCall, register_family
from censusrecon.synth.audit.measured import laplace_white_box
from censusrecon.synth.audit.neighbours import far_datasets, replay_neighbours
from censusrecon.synth.audit.source import AuditSource
from censusrecon.synth.audit.statistics import AuditResult, NoiseGroups, audit_outputs, laplace_scale_upper
from censusrecon.synth.mechanism import parse_relation
from censusrecon.synth.topdown import Budget
from censusrecon.synth.publishing import Draw


def _audit_tables_unit(src: AuditSource, mech: str, unit: str, wb: bool, eps: float, seed: int, cache: dict) -> AuditResult:
    """Noisy tables (the ``tables`` family: Laplace's) or a file fitted to noisy tables (``fitted_tables``: synthetic)
    of one unit, on its own D, every draw through ``mech``'s own publishing function: the bound over the real pairs,
    the whole-release checks, the replay over many pairs, the structure. A fitted file's draws are the tables it
    fits (its function's batch branch); its releases as published (one call, the fit included) must have fitted
    exactly those tables (``single_release``), its structure and its fit must read nothing but them."""
    spec = src.spec
    a = spec.audit
    t = _Tables(mech, eps, registry.mechanism(mech).audit == "fitted_tables", np.random.default_rng(0),
                *unit_instance(src, unit, wb, cache))
    pair_conf = 1 - (1 - a.confidence) / max(len(t.pairs), 1)
    bound, backend = bound_noise(seed, "tables", unit, wb, eps), publication_noise(spec, seed, "tables", unit, wb, eps)
    # the family's contract: noisy counts of every published cell, one row a release (a fitted file's batch branch)
    probe = t.publish(src, Draw(bound, t.rng0, runs=[0])).output
    if np.shape(getattr(probe, "counts", None)) != (1, t.exact.size):
        family = "fitted_tables" if t.fitted else "tables"
        return AuditResult(mech, eps, 0.0, 0, a.confidence, "none", {"family_contract": contract_failure(
            mech, family, f"noisy counts of the workload's {t.exact.size} cells (NoisyTables)", probe)}, {"unit": unit})
    bounds, pair_tail = _table_bounds(src, t, bound, backend, pair_conf)
    # whole releases of the real D, each the very call that publishes one (a single release; a fitted file's, the
    # tables it fits: a batch of one), numbered after every pair's releases under the audit's key
    start = 2 * len(t.pairs) * a.runs
    whole = np.stack([t.release(src, backend, start + r) for r in range(a.whole_releases)])
    noise = whole - t.exact[None, :]
    rng = np.random.default_rng(stable_seed("audit-sample", seed, unit))
    groups, cols = _noise_groups(t, noise, rng)
    checks, info = whole_checks(spec, WholeNoise(groups.sums, np.concatenate(groups.sample), [noise], noise[:, cols],
                                                 pair_tail), {"tables": t.sens.l1}, False, eps)
    info["sensitivity"] = t.sens.as_dict()
    info["white_box"] = laplace_white_box(
        info["epsilon_from_noise_scale"], eps, f"the noise of {a.whole_releases} whole releases of the unit's D: the "
        "tables' one Laplace scale bounded above from its least-noised table, band of true counts or place, the "
        "tables' L1 sensitivity over it", info["noise_draws"]).as_dict()
    # the replay: recorded whole releases, many neighbours of the real data (a fitted file's tables: its batch branch)
    far = far_datasets(t.D, a.replay_far, rng)
    neighbours = replay_neighbours(t.D, parse_relation(spec.relation), t.areas, a.replay_pairs, rng) + far
    values = [whole[i] for i in range(min(a.replay_draws, len(whole)))]
    checks["post_processing"] = replay_pairs(src, t.case, neighbours, values, batch=t.fitted)
    record = (t.publish(src, Draw(backend, t.rng0, runs=[start])) if t.fitted else
              t.publish(src, Draw(keyed_release(backend, start), t.rng0))).record
    checks["accounting"], acc = _tables_accounting(record, eps, t.sens.l1)
    info.update(acc)
    checks["structure"] = structure_check(src, t.case, t.pairs[0][1], batch=t.fitted) if t.pairs else "not run"
    details = {}
    if t.fitted:
        key = src.fit_key("fit", unit, eps)  # the key the published fit uses (public: unit and ε)
        fits = far[:1] + neighbours[:SYNTHETIC_REPLAY_FITS - min(len(far), 1)]
        checks["single_release"] = _single_release_check(src, t, (backend, start), whole[0], key, pair_conf)
        checks["synthetic_structure"] = (structure_check(src, t.case, t.pairs[0][1], key=key) if t.pairs
                                         else "not run")
        checks["synthetic_post_processing"] = replay_pairs(src, t.case, fits, values[:1], key=key)
        details = {"synthetic_replay_fits": len(fits),
                   "audited_as": "the noisy tables it fits, drawn through its own publishing function; the fit is "
                                 "post-processing of them"}
    best = max(bounds, default=(0.0, "none", 0))
    details.update(info, unit=unit, neighbours=[w for w, _ in t.pairs], differing_cells=[b[2] for b in bounds],
                   bound_per_pair={w: round(b[0], 6) for (w, _), b in zip(t.pairs, bounds)},
                   replay_pairs=len(neighbours), replay_draws=len(values),
                   audited_on="the unit's own D (its private half), every cell")
    details.setdefault("audited_as", "the published noisy counts")
    return AuditResult(mech, eps, best[0], a.runs, a.confidence, best[1], checks, details)


@dataclass(frozen=True)
class _Tables:
    """One mechanism of the tables families at one ε on one unit's real instance (:func:`checks.unit_instance`): its
    D, areas, workload and exact counts, its worst-case pairs and their counts, the tables' sensitivity."""

    mech: str
    eps: float
    fitted: bool  # a file fitted to noisy tables (fitted_tables), audited through the tables it fits
    rng0: np.random.Generator  # the generator every draw of the audit's calls is given (the noise is the backend's)
    D: Dataset
    areas: dict | None
    workload: object
    exact: np.ndarray
    pairs: list
    pair_counts: list
    sens: object

    @property
    def case(self) -> Release:
        """The mechanism at this ε on D, as the structure and replay checks publish it."""
        return Release(self.mech, self.eps, self.workload, self.D)

    def publish(self, src: AuditSource, draw: Draw):
        """A release of D (or a batch of them) through the mechanism's own publishing function."""
        return self.case.publish(src, draw)

    def release(self, src: AuditSource, backend, r: int) -> np.ndarray:
        """Whole release ``r`` of D's noisy counts under ``backend``'s key: the very call that publishes one (a fitted
        file's, the tables it fits: a batch of one)."""
        if self.fitted:
            return self.publish(src, Draw(backend, self.rng0, runs=[r])).output.counts[0]
        return self.publish(src, Draw(keyed_release(backend, r), self.rng0)).output.counts


def _table_bounds(src: AuditSource, t: _Tables, bound, backend, pair_conf: float) -> tuple[list, list]:
    """The statistical bound of each worst-case pair over the cells it moves (``runs`` releases of each side with the
    bound's noise, releases 0, 1, ... split between the pairs), and the far-tail statistics of those draws where they
    are publication noise."""
    a, rng0 = src.spec.audit, t.rng0
    bounds, pair_tail = [], []  # the pairs' draws are publication noise too: the far tail is checked over them
    for i, (what, D2) in enumerate(t.pairs):
        c2 = t.pair_counts[i]
        idx = np.flatnonzero(c2 - t.exact)
        if not idx.size:
            continue
        r1 = range(2 * i * a.runs, (2 * i + 1) * a.runs)
        r2 = range((2 * i + 1) * a.runs, (2 * i + 2) * a.runs)
        y1 = t.publish(src, Draw(bound, rng0, runs=r1, cells=idx)).output.counts
        y2 = t.case.publish(src, Draw(bound, rng0, runs=r2, cells=idx), D2).output.counts
        res = audit_outputs(y1, y2, t.exact[idx], (c2 - t.exact)[idx], t.eps, t.mech, pair_conf)
        bounds.append((res.epsilon_lower_bound, f"{what}: {res.event}", int(idx.size)))
        if bound is backend or not backend.for_publication:  # the far tail over publication noise only
            pair_tail += [release_tail_stats(y1 - t.exact[idx][None, :], False),
                          release_tail_stats(y2 - c2[idx][None, :], False)]
    return bounds, pair_tail


def _noise_groups(t: _Tables, noise: np.ndarray, rng: np.random.Generator) -> tuple[NoiseGroups, np.ndarray]:
    """Whole releases' noise grouped per table, band of true counts and place (a scale that depends on the node
    shows), with a sample kept for the shape; and the cells followed for independence."""
    workload, exact = t.workload, t.exact
    if isinstance(workload, Workload):
        cuts = workload.offsets()
        table = np.repeat(np.arange(len(workload.marginals)), np.diff(cuts)).astype(str)
        place = np.full(exact.size, "unit")
        cell_label = np.concatenate([np.arange(n) for n in np.diff(cuts)]).astype(str)
    else:
        table = np.array([f"{t}@{lv}" for t, lv in zip(workload.tables(), workload.levels())])
        place = np.array([lab.split("@", 1)[1] if "@" in lab else "unit" for lab in workload.labels])
        cell_label = np.array([lab.split("@", 1)[0] for lab in workload.labels])
    groups = NoiseGroups()
    for g in np.unique(table):
        groups.add(("tables", str(g)), noise[:, table == g])
    for g, sel in band_groups(exact).items():
        groups.add(("tables", g), noise[:, sel])
    for p in np.unique(place):  # per block (and area): a scale that depends on the node shows
        groups.add(("tables", f"place {p}"), noise[:, place == p])
    groups.keep(noise, 2_000_000, rng)
    return groups, independence_columns(cell_label, rng)


def _single_release_check(src: AuditSource, t: _Tables, keyed: tuple, drawn: np.ndarray, key, confidence: float) -> str:
    """A fitted file as it is published (one call: its noisy tables, then the fit) must fit the tables the audit
    drew through its batch branch: with the audit's keyed noise (``keyed``: the backend and the release number),
    that release of the key exactly (``drawn``); with a publishing backend, which never repeats a draw, tables whose
    noise spends at most ε (the scale of its cells' noise bounded above, at the tables' L1 sensitivity)."""
    backend, release = keyed
    eps, sensitivity = t.eps, t.sens.l1
    one = t.publish(src, Draw(keyed_release(backend, release), np.random.default_rng(0), key=key))
    tables = one.facts.get("noisy_tables")
    if tables is None:
        return "fail: the release as published does not say which noisy tables it fitted (Published.facts['noisy_tables'])"
    tables = np.asarray(tables)
    if getattr(backend, "keyed", False):
        if tables.shape == drawn.shape and np.array_equal(tables, drawn):
            return "pass"
        return ("fail: the release as published (one call) fitted other noisy tables than its batch branch draws with "
                "the same key: the call that publishes is not the call the audit checks")
    scale = laplace_scale_upper(tables - t.exact, confidence)
    spent = sensitivity / scale if scale > 0 else math.inf
    return ("pass" if spent <= eps else f"fail: the noisy tables of the release as published (one call) spend ε ≥ "
            f"{spent:.4g} (the L1 sensitivity {sensitivity} over an upper bound {scale:.4g} on their noise scale), over "
            f"the declared {eps:g}")


#: Neighbours whose synthetic files are fitted again in the replay (each fit is a RAP run; every replay pair
#: of the tables checks the fit's inputs, the published noisy counts and their total).
SYNTHETIC_REPLAY_FITS = 5


def _tables_accounting(record, eps: float, sensitivity: int) -> tuple[str, dict]:
    """The Laplace tables' one measurement through :func:`opendp_accounting` (its scale, at the tables' L1
    sensitivity as the yardstick finds it)."""
    from fractions import Fraction

    b = Budget("unit", "tables", Fraction(repr(float(eps))), int(record.sensitivity), float(record.scale))
    return opendp_accounting([b], False, eps, lambda _: sensitivity)


def audit_tables(call: FamilyCall) -> AuditResult:
    """The ``tables`` and ``fitted_tables`` families: each audited unit on its own D, one result."""
    return combine_units(call.mechanism, call.epsilon, [
        _audit_tables_unit(call.src, call.mechanism, u, call.with_block, call.epsilon, call.seed, call.cache)
        for u in call.units])


register_family(AuditFamily("tables", (0, 6), audit_tables,
                            "noisy tables of each unit's own D: the bound over real pairs, the noise's scale, shape, "
                            "tail and independence, the accounting, the replay, the structure"))
register_family(AuditFamily("fitted_tables", (0, 7), audit_tables,
                            "a file fitted to noisy tables: the tables as above, drawn through its batch branch, and "
                            "its single release's tables; its fit replayed"))
