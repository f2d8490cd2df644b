"""The ε audit of evaluate-release's own publishing path (experiments.release.publish), on worst-case
neighbouring datasets under the declared relation, at every ε the config releases at."""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import time
from pathlib import Path

import numpy as np

from censusrecon.experiments.config import ConfigError, ExperimentConfig, ReleaseProgramConfig, parse_config
from censusrecon.experiments.problem import Study, stable_seed, build_workload, resolve, unit_key
from censusrecon.microdata.dataset import Dataset
from censusrecon.microdata.domain import Attribute, Domain
from censusrecon.microdata.geography import FROM_ROWS, Geography
from censusrecon.experiments.metrics import lookup
from censusrecon.synth.audit.yardstick import (cells_of, detailed_sensitivity, node_table_sensitivity, opendp_epsilon,
                                           person_types, smoothed_mixing, table_sensitivity, zcdp_rho)
from censusrecon.microdata.marginals import Workload
from censusrecon.synth.release import workload_counts
from censusrecon.synth.audit.statistics import (AuditResult, NoiseGroups, ReplayNoise, ReplaySequence, audit_outputs, check_state,
                         clipped_upper_excess, gaussian_shape_pvalue, gaussian_sigma_upper_stats, geometric_scale_upper,
                         geometric_scale_upper_exact, geometric_shape_pvalue, independence_pvalue, laplace_scale_upper, laplace_scale_upper_stats,
                         laplace_shape_pvalue, overall_outcome, tail_pvalue, tail_threshold)
from censusrecon.synth.histogram import SparseHistogram
from censusrecon.synth.publishing import publish_shared
from censusrecon.synth import registry
from censusrecon.synth.mechanism import PrivacyError, Relation, parse_relation
from censusrecon.synth.registry import PROGRAM_PREFIX
from censusrecon.synth.keyed import KeyedNoise
from censusrecon.synth.noise import OpenDPNoise
from censusrecon.experiments.progress import UnitProgress
from censusrecon.experiments.release.files import unit_layout
from censusrecon.experiments.release.program import (one_way_inputs, program_inputs, program_seed, run_program,
                                                      stop_workers)
from censusrecon.experiments.release.publish import ReleaseSpec, publish
from censusrecon.experiments.release.topdown_release import publish_topdown, topdown_root, topdown_shape, topdown_tree
from censusrecon.synth.audit.statistics import clopper_pearson, gaussian_rho_spent, opendp_rho
from censusrecon.synth.audit.spending import WIDTH, check_spending
from censusrecon.synth.topdown import Budget, QUERIES
from censusrecon.experiments.results import check_backend, on_ray

log = logging.getLogger(__name__)

#: Cells of the small domain the histograms are audited on (their sensitivity does not depend on
#: the domain's size; the auditor needs every cell's value in every run).
HISTOGRAM_CELLS = 64
#: Cells of the smoothed histogram's audit domain: its δ grows with the number of cells, and on a
#: few cells the whole privacy loss is reached by an event of reasonable probability.
SMOOTHED_CELLS = 4
#: Runs of the large-domain histogram path (one Python call per release).
SPARSE_RUNS = 20_000
#: Noise values drawn per compiled chunk of releases.
CHUNK_VALUES = 20_000_000


def audit_release(study: Study, units: list[str] | None = None, progress: bool = False,
                  seed: int | None = None, backend: str | None = None, address: str | None = None,
                  history: Path | None = None) -> list[AuditResult]:
    """Audit every configured mechanism at every audited ε of the config through the functions that publish
    (:func:`experiments.release.publish.publish`, :func:`experiments.release.topdown_release.publish_topdown`), on
    the real units' private data.

    Laplace tables (and the synthetic file fitted to them) are audited on every audited unit's own D, and
    TopDown on its production tree (every level and node): neighbours of the real data under the declared
    relation (a person moved between blocks of different areas or units, a person's type changed to the
    rarest and to the commonest, the type in most cells, added and removed), each pair drawn ``runs``
    times on the cells it touches by the same code and key schedule as a whole release; whole releases
    for the scale per node, table and band of true counts, the shape and far tail, and independence;
    the replay of recorded releases over many pairs; the structure checks. The histograms are audited
    on small worst-case domains (their sensitivity does not depend on the data). ``seed`` keys the
    audit's noise (default ``release.audit.seed``, else fresh), recorded in every result.

    Each (BLOCK variant, ε) is one job (:func:`audit_job`): run here in turn, sharing the real instances
    between the ε of a variant, or, ``backend="ray"``, one Ray task per job and mechanism or program
    (``address`` to join a cluster; default a local one with ``sweep.num_cpus`` CPUs), each resolving the
    config again: the same results, in the same order (every draw is keyed by the seed, the unit and the ε,
    never by what ran before). ``backend`` None: ``release.audit.backend``. ``history``: the config's audit
    history (:func:`record_audit`), whose last audit of the same plan gives the time printed before any work.
    """
    import secrets

    cfg = study.cfg
    r = cfg.release
    if r is None:
        raise ConfigError("this config has no 'release' section: nothing to audit")
    backend = backend or r.audit.backend
    check_backend(backend)
    if seed is None:
        seed, seed_source = (r.audit.seed, "given") if r.audit.seed is not None else (secrets.randbits(31), "fresh")
    else:
        seed_source = "given"
    if units is None:
        roles = unit_roles(study, study.units, seed)
        units = list(roles)
    else:
        roles = {u: "given" for u in units}
    eps_list = r.audited_epsilons()
    mechanisms = r.dp_mechanisms  # swapping is not DP: there is no ε to audit
    programs = list(r.programs)  # run by the tool, audited as black boxes
    shipped = shipped_timing(cfg)  # the config as given: the digest a record names
    cfg = audit_level(cfg, len(units))
    study = dataclasses.replace(study, cfg=cfg)  # the audit's own settings for this family of results
    per_job = len(mechanisms) + len(programs)
    jobs = [(wb, eps) for wb in cfg.target.with_block for eps in eps_list]
    cpus = (cfg.sweep.num_cpus or os.cpu_count() or 1) if backend == "ray" and address is None else 1
    timed = last_timing(history, _task_order(cfg, jobs), units, shipped)
    tasks = _task_order(cfg, jobs, timed)
    # a line per mechanism and ε audited, with an estimate of the time left (an audit takes minutes): where an
    # earlier audit timed each, from when each was expected to end on this audit's workers
    ends = {}
    if timed is not None:  # cpus is 1 unless the tasks share a local Ray cluster's workers
        secs = [float(timed["seconds_by_audit"][_timing_key(name, eps, wb)]) for wb, eps, name in tasks]
        ends = {f"{name} at ε = {eps:g}": f for (wb, eps, name), f in zip(tasks, expected_finish(secs, cpus))}
    bar = UnitProgress(len(jobs) * per_job, "audits", progress, estimate=True, expected_ends=ends)
    if progress:
        bar.say(f"audit: {len(jobs) * per_job} (mechanism, ε) pairs on {len(units)} units ({', '.join(units)}), "
                f"seed {seed}" + (f", {len(jobs) * per_job} Ray tasks" if backend == "ray" else ""))
        bar.say("audit: " + expected_time(timed, tasks, backend, cpus, address))
    plan = AuditPlan(list(units), roles, seed, seed_source)
    out = []
    try:
        if backend == "local":
            caches: dict = {}  # per variant: the real instances, shared by every ε
            for wb, eps in jobs:
                out += audit_job(study, plan, wb, eps, caches.setdefault(wb, {}), bar)
        else:
            out = _audit_on_ray(study, plan, jobs, tasks, address, bar)
    finally:
        bar.close()
    return out


@dataclasses.dataclass(frozen=True)
class AuditPlan:
    """What every job of one audit shares: the audited units and their roles, and the audit's seed."""

    units: list[str]
    roles: dict[str, str]
    seed: int
    seed_source: str

    @property
    def anchor(self) -> str:
        """The unit whose frame the histograms are audited on: the largest audited unit."""
        return next((u for u, role in self.roles.items() if role == "largest"), self.units[0])


def audit_job(study: Study, plan: AuditPlan, wb: bool, eps: float, cache: dict, bar=None,
              only: str | None = None) -> list[AuditResult]:
    """One (BLOCK variant, ε) of an audit: every DP mechanism, then every release program, in config order, each
    audited on its own through its own publishing function (two mechanisms of one family never share a result);
    every result says which function drew it (``published_through``), the variant and the units. ``cache``
    holds the variant's real instances (its frame, its tables' pairs, its trees), shared by the ε of one
    process; a fresh one gives the same results. ``only``: that mechanism or program (by its result's name)
    alone, as a Ray task audits it."""
    cfg = study.cfg
    r = cfg.release
    seed, units = plan.seed, plan.units
    mechanisms = [m for m in r.dp_mechanisms if only in (None, m)]
    programs = [p for p in r.programs if only in (None, PROGRAM_PREFIX + p.name)]
    common = {"audit_seed": seed, "audit_seed_source": plan.seed_source, "audited_units": list(units),
              "unit_roles": plan.roles, "with_block": wb}
    if r.backend == "opendp":
        common["noise_drawn"] = ("whole releases, the structure and the replay through OpenDP, as published; the "
                                 "bound's releases per neighbour through the same code with the audit's keyed noise")
    if "audit_frame" not in cache and mechanisms:  # programs use neither the frame nor the block list
        frame, _ = _frame(study, plan.anchor, wb)
        relation = parse_relation(r.relation)
        cache["audit_frame"] = (_block_list_check(study, plan.anchor) if wb else None,
                                _histogram_pair(frame, relation), _histogram_pair(frame, relation, cells=SMOOTHED_CELLS))
    blocks_check, small, smallest = cache.get("audit_frame", (None, None, None))
    out = []
    for mech in mechanisms:
        t0 = time.perf_counter()
        family = registry.mechanism(mech).audit
        if family in ("tables", "fitted_tables"):
            res = _combine_units(mech, eps, [_audit_tables_unit(study, mech, u, wb, eps, seed, cache) for u in units])
        elif family == "histogram":  # the real workload first: a release that is no histogram fails its contract
            real = [_histogram_law_unit(study, mech, u, wb, eps, seed, cache) for u in units]
            res = _broken_contract(mech, eps, r.audit.confidence, real) or _with_real_law(
                _audit_perturbed(cfg, mech, eps, small, seed), real)
        elif family == "tree" and registry.mechanism(mech).publish is not publish_shared:
            res = AuditResult(mech, eps, 0.0, 0, r.audit.confidence, "none", {"family_contract": (
                f"fail: {mech} is registered in the tree audit family, which draws TopDown's release of a whole tree "
                "(experiments.release.topdown_release.publish_topdown, shared by its units through synth.publishing."
                f"publish_shared); {mech} publishes through {registry.mechanism(mech).publish.__name__}, which this "
                "family never draws")}, {})
        elif family == "tree":
            res = _combine_units(mech, eps, [_audit_topdown_root(study, mech, root_units, wb, eps, seed, cache)
                                             for root_units in _roots(study, units, wb)])
        elif family == "smoothed":
            real = [_smoothed_law_unit(study, mech, u, wb, eps, seed, cache) for u in units]
            res = _broken_contract(mech, eps, r.audit.confidence, real) or _with_real_law(
                _audit_smoothed(cfg, mech, eps, smallest, seed), real)
        else:
            raise ConfigError(f"{mech}: no audit family {family!r}; a DP mechanism names one of "
                              f"{', '.join(registry.AUDIT_FAMILIES)}")
        if blocks_check is not None:
            res.checks["block_list"] = blocks_check
        res.details.update(published_through=mech, audit_seconds=round(time.perf_counter() - t0, 1), **common)
        out.append(res)
        if bar is not None:
            bar.update(1, f"{mech} at ε = {eps:g}")
    for spec in programs:
        t0 = time.perf_counter()
        res = _combine_units(PROGRAM_PREFIX + spec.name, eps,
                             [audit_program(study, spec, u, wb, eps, seed, cache, index=k) for k, u in enumerate(units)])
        res.details.update(published_through=PROGRAM_PREFIX + spec.name,
                           audit_seconds=round(time.perf_counter() - t0, 1), **common)
        out.append(res)
        if bar is not None:
            bar.update(1, f"{PROGRAM_PREFIX + spec.name} at ε = {eps:g}")
    return out


def audit_task(cfg_json: dict, base_dir: str | None, plan: AuditPlan, job: tuple[bool, float, str]
               ) -> list[AuditResult]:
    """One audit job where the config is all there is (a Ray worker): the config (at the audit's level)
    resolved again against its data, :func:`audit_job` of one mechanism or program with a cache of its own."""
    study = resolve(parse_config(cfg_json).with_base_dir(base_dir))
    try:
        return audit_job(study, plan, job[0], job[1], {}, only=job[2])
    finally:  # a Ray worker outlives its task: the program's worker (a Spark JVM, a SmartNoise fit) must not
        stop_workers()


def _audit_on_ray(study: Study, plan: AuditPlan, jobs: list, tasks: list, address: str | None, bar
                  ) -> list[AuditResult]:
    """Each (BLOCK variant, ε, mechanism or program) a Ray task (through the loop the long commands share),
    submitted in the order of ``tasks`` (:func:`_task_order`); results in :func:`audit_job`'s order."""
    cfg = study.cfg
    r = cfg.release
    got = {}
    for task, results in on_ray(audit_task, (cfg.model_dump(mode="json"), cfg.base_dir, plan), tasks, address,
                                cfg.sweep.num_cpus, with_item=True):
        got[task] = results
        for res in results:
            bar.update(1, f"{res.mechanism} at ε = {task[1]:g}")
    order = list(r.dp_mechanisms) + [PROGRAM_PREFIX + p.name for p in r.programs]
    return [res for wb, eps in jobs for name in order for res in got[(wb, eps, name)]]


def _task_order(cfg: ExperimentConfig, jobs: list, timed: dict | None = None) -> list[tuple]:
    """The (variant, ε, mechanism or program) tasks in the order the Ray backend submits them: the longest first
    by ``timed`` (an earlier audit's :func:`last_timing`), so that the last to end on few cores is a short one;
    without it the programs first (a program's calls are most of an audit's time), in the config's order."""
    r = cfg.release
    names = [PROGRAM_PREFIX + p.name for p in r.programs] + list(r.dp_mechanisms)
    return _task_order_by([(wb, eps, name) for name in names for wb, eps in jobs], timed)


def _task_order_by(tasks: list[tuple], timed: dict | None) -> list[tuple]:
    """``tasks`` the longest first by ``timed``'s seconds (stable), or as they are without it."""
    if not timed:
        return list(tasks)
    return sorted(tasks, key=lambda t: -float(timed["seconds_by_audit"][_timing_key(t[2], t[1], t[0])]))


def last_timing(history: Path | None, tasks: list[tuple], units: list[str], shipped: dict | None = None
                ) -> dict | None:
    """The last audit in ``history`` (:func:`record_audit`'s lines) of the same ``units`` that timed every one of
    ``tasks``; without one, ``shipped`` (:func:`shipped_timing`) where it covers them; else None."""
    import json

    keys = [_timing_key(name, eps, wb) for wb, eps, name in tasks]

    def covers(e: dict) -> bool:
        return e.get("units") == list(units) and all(k in (e.get("seconds_by_audit") or {}) for k in keys)

    entries = ([json.loads(x) for x in history.read_text().splitlines() if x.strip()]
               if history is not None and history.exists() else [])
    own = [e for e in entries if covers(e)]
    return own[-1] if own else (shipped if shipped is not None and covers(shipped) else None)


def shipped_timing(cfg: ExperimentConfig, results: Path | None = None) -> dict | None:
    """The per-(mechanism, ε) times of this very config's audit as the repository records them
    (``bench/results/*.json`` with ``figures.audit_timing``, its ``digest`` the config's own): what a first audit
    on a machine says its time from, naming the record and its machine. None outside a checkout, or where no
    record times this config as it is (any change to it, an override included, changes its digest)."""
    import json

    import censusrecon

    root = results or Path(censusrecon.__file__).resolve().parents[1] / "bench" / "results"
    if not root.is_dir():
        return None
    digest, found = cfg.digest(), None
    for p in sorted(root.glob("*.json")):
        try:
            rec = json.loads(p.read_text())
        except (OSError, ValueError):
            continue
        t = (rec.get("figures") or {}).get("audit_timing") if isinstance(rec, dict) else None
        if isinstance(t, dict) and t.get("digest") == digest:
            found = dict(t, record=p.name, machine=(rec.get("machine") or {}).get("cpu", "another machine"))
    return found


def _timing_key(name: str, eps: float, wb: bool) -> str:
    return f"{name} ε={eps:g}" + (" with BLOCK" if wb else "")


def expected_time(last: dict | None, tasks: list[tuple], backend: str, cpus: int, address: str | None = None) -> str:
    """The audit's time, said before it starts, from ``last`` (:func:`last_timing`: an earlier audit of the same
    units that timed every (mechanism, ε, variant) of ``tasks``): their sum here, or under Ray their schedule in
    submission order on ``cpus`` workers (each task to the first free one, as Ray does); else why it cannot be
    said.

    >>> import json, tempfile
    >>> h = Path(tempfile.mkdtemp()) / "audit_history.jsonl"
    >>> h.write_text(json.dumps({"when": "2026-12-05T21:04:00+00:00", "units": ["u"], "seconds_by_audit":
    ...     {"a ε=1": 400, "b ε=1": 500, "c ε=1": 600}})) and None
    >>> tasks = [(False, 1.0, n) for n in "abc"]
    >>> expected_time(last_timing(h, tasks, ["u"]), tasks, "local", 1)[:63]
    'expected about 25 min (the audit of 2026-12-05T21:04:00+00:00 o'
    >>> expected_time(last_timing(h, tasks, ["u"]), tasks, "ray", 2)[:17]  # a and b at once, c after a: 1,000 s
    'expected about 17'
    >>> [t[2] for t in _task_order_by(tasks, last_timing(h, tasks, ["u"]))]  # the longest first
    ['c', 'b', 'a']
    >>> expected_time(last_timing(h, tasks, ["v"]), tasks, "local", 1)[:40]
    'time not known ahead: no earlier audit o'
    """
    keys = [_timing_key(name, eps, wb) for wb, eps, name in tasks]
    if last is None:
        return ("time not known ahead: no earlier audit of these units here timed every one of its "
                f"{len(keys)} (mechanism, ε) audits; the lines below estimate the rest as audits end")
    seconds = [float(last["seconds_by_audit"][k]) for k in keys]
    if backend == "ray" and address is None:
        total, how = max(expected_finish(seconds, cpus)), f"as {len(keys)} Ray tasks on {cpus} CPUs"
    elif backend == "ray":
        total, how = sum(seconds), "summed: the cluster's CPUs are not known here, so the time is at most this"
    else:
        total, how = sum(seconds), "one after another"
    longest = max(zip(seconds, keys))
    source = (f"the audit of {last['when']} of the same units" if "record" not in last else
              f"no audit here yet: bench/results/{last['record']} times this config's audit of {last['when']} on "
              f"{last['machine']}, a machine this one may not match")
    return (f"expected about {_duration(total)} ({source}; {_duration(sum(seconds))} of work, {how}; the longest, "
            f"{longest[1]}, {_duration(longest[0])})")


def expected_finish(seconds: list[float], workers: int) -> list[float]:
    """When each task ends if they are given in this order to the first free of ``workers`` (as Ray does, and
    one worker in turn as the local backend does).

    >>> expected_finish([600, 500, 400], 2), expected_finish([600, 500, 400], 1)
    ([600.0, 500.0, 900.0], [600.0, 1100.0, 1500.0])
    """
    import heapq

    free, out = [0.0] * max(workers, 1), []
    for t in seconds:
        end = heapq.heappop(free) + float(t)
        heapq.heappush(free, end)
        out.append(end)
    return out


def _duration(seconds: float) -> str:
    """Seconds as a person reads them: "40 s", "17 min".

    >>> _duration(40.2), _duration(1040)
    ('40 s', '17 min')
    """
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"


def record_audit(history: Path, results: list[AuditResult], code: str) -> list[dict]:
    """Append one audit to ``history`` (JSON lines: when, seed, code, passed, what failed) and return the
    earlier audits of the same code that failed: a re-run under another seed is recorded beside a failed
    one, never in its place."""
    import datetime as _dt
    import json

    earlier = failed_audits(history, code)
    d = results[0].details if results else {}
    entry = {"when": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), "code": code,
             "seed": d.get("audit_seed"), "seed_source": d.get("audit_seed_source"),
             "passed": all(r.passed for r in results),
             "outcome": overall_outcome(results),
             "failed": sorted({f"{r.mechanism} ε={r.declared_epsilon:g}: " + ", ".join(r.failed_checks() or ["bound"])
                               for r in results if r.outcome == "failed"}),
             "inconclusive": sorted({f"{r.mechanism} ε={r.declared_epsilon:g}: " + ", ".join(r.unchecked())
                                     + " not run" for r in results if r.outcome == "inconclusive"}),
             "units": d.get("audited_units"),
             # each (mechanism, ε, variant)'s own time: the next audit of the same plan says its time ahead from them
             "seconds_by_audit": {_timing_key(r.mechanism, r.declared_epsilon, r.details.get("with_block", False)):
                                  r.details["audit_seconds"] for r in results if "audit_seconds" in r.details}}
    history.parent.mkdir(parents=True, exist_ok=True)
    with history.open("a") as fh:
        fh.write(json.dumps(entry) + "\n")
    return earlier


def failed_audits(history: Path, code: str, besides: str | None = None) -> list[dict]:
    """The failed audits of the same ``code`` recorded in ``history`` (:func:`record_audit`'s JSON
    lines), but the one recorded at ``besides``."""
    import json

    if not history.exists():
        return []
    entries = [json.loads(x) for x in history.read_text().splitlines() if x.strip()]
    return [e for e in entries if e.get("outcome", "passed" if e["passed"] else "failed") == "failed"
            and e.get("code") == code and e.get("when") != besides]


def unit_roles(study: Study, units: list[str], seed: int = 0) -> dict[str, str]:
    """The units an audit checks, in the order audited, each with its role in the choice: all of them
    ("all"), or ``release.audit.units`` of them chosen to cover the size range: the smallest, the median
    and the largest (by persons; ties by id), then one drawn with the audit's ``seed`` ("random"), then
    the rest drawn likewise. A bug that shows only on small units, or only on large ones, falls inside
    what is audited."""
    cfg, pop = study.cfg, study.pop
    k = cfg.release.audit.units
    if k == "all" or k >= len(units):
        return {u: "all" for u in units}
    sizes = {u: int(pop.geography.mask(cfg.target.level, u).sum()) for u in units}
    by_size = sorted(units, key=lambda u: (sizes[u], u))
    roles: dict[str, str] = {}
    for role, u in (("smallest", by_size[0]), ("median", by_size[(len(by_size) - 1) // 2]),
                    ("largest", by_size[-1])):
        roles.setdefault(u, role)
    rest = sorted((u for u in units if u not in roles), key=lambda u: stable_seed("audit-sample", seed, u))
    for u in rest[:k - len(roles)]:
        roles[u] = "random"
    return roles


def _combine_units(mech: str, eps: float, results: list) -> AuditResult:
    """One result for a mechanism at one ε from its audits per unit (or root): the largest bound, every
    unit's failed checks, details per unit."""
    worst = max(results, key=lambda x: x.epsilon_lower_bound)
    checks = {}
    rank = {"fail": 3, "not run": 2, "pass": 1, "informational": 0}  # a unit's failure, then a check it could not run
    for res in results:
        unit = res.details.get("unit") or res.details.get("root")
        for k, v in res.checks.items():
            state = check_state(v)
            if k not in checks or rank[state] > rank[check_state(checks[k])]:
                checks[k] = f"{v} [{unit}]" if state in ("fail", "not run") else v
    details = {"per_unit": {str(x.details.get("unit") or x.details.get("root")): x.as_dict() for x in results},
               "event_unit": str(worst.details.get("unit") or worst.details.get("root"))}
    needed = [x.details["runs_to_certify"] for x in results if x.details.get("runs_to_certify")]
    if needed:  # the releases per neighbour that would let the bound certify ε on every unit
        details["runs_to_certify"] = max(needed)
    return AuditResult(mech, eps, worst.epsilon_lower_bound, worst.runs, worst.confidence, worst.event, checks, details)


#: Statistical tests per audit result, by family: (on the small worst-case domain, per audited unit). Tables: the
#: certified bound, the noise scale, shape, tail and independence, the accounting; a fitted file the same and its
#: single release's tables; TopDown the same per root; the perturbed histogram: its bound, scale and shape on a small
#: domain, and the scale and shape of its releases of each unit's own D; the smoothed histogram: its bound, and the
#: mixing of its draws of each unit's own D; a program: its bound, noise scale, shape, tail, independence, repeats and
#: call shape; a program's first measurements: their bound and their noise's ρ; a synthesizer's spending ledger (counted
#: like a program with first measurements, as a multiple of them): its spending, its measurements' noise, its selections.
TESTS = {"tables": (0, 6), "fitted_tables": (0, 7), "tree": (0, 6), "histogram": (3, 2), "smoothed": (1, 1),
         "program": (0, 7), "measurements": (0, 2), "spending": (0, 2)}


def audit_level(cfg: ExperimentConfig, units: int) -> ExperimentConfig:
    """``cfg`` at the confidence every check of its audit over ``units`` units runs at (:func:`_family_level`
    over every audited ε, variant, mechanism and program)."""
    r = cfg.release
    programs = list(r.programs)
    return _family_level(cfg, len(r.audited_epsilons()) * len(cfg.target.with_block),
                         list(r.dp_mechanisms) + [PROGRAM_PREFIX + p.name for p in programs], units,
                         sum(p.measurements is not None for p in programs)
                         + sum(TESTS["spending"]) * sum(p.spending is not None for p in programs))


def _family_level(cfg: ExperimentConfig, results: int, mechanisms: list[str], units: int = 1,
                  staged: int = 0) -> ExperimentConfig:
    """The config every check of one audit runs at: each statistical test at confidence
    1 − false_alarm / K, K the tests of the whole audit (every ε, variant and mechanism, each audited on its own;
    ``staged``: programs whose first measurements are audited too), so that an audit of correct mechanisms fails
    with probability at most ``release.audit.false_alarm`` (Bonferroni); never below ``release.audit.confidence``."""
    a = cfg.release.audit

    def tests(m: str) -> int:
        fixed, per_unit = TESTS["program" if registry.is_program(m) else registry.mechanism(m).audit]
        return fixed + per_unit * units

    count = results * (sum(tests(m) for m in mechanisms) + sum(TESTS["measurements"]) * staged * units)
    level = max(a.confidence, 1 - a.false_alarm / max(count, 1))
    audit = a.model_copy(update={"confidence": level})
    return cfg.model_copy(update={"release": cfg.release.model_copy(update={"audit": audit})})


# ---- inputs: a small frame of public inputs and worst-case neighbours in it ------------------------


def _frame(study: Study, unit: str, with_block: bool) -> tuple[Domain, dict | None]:
    """The attack domain of ``unit`` (BLOCK from its public block list), cut to two blocks, and
    the areas inside the unit (the tracts of a county) of those blocks: every block publishes the
    same tables and a person lives in one; when the unit has areas the second block is in another
    area than the first where one exists, so that a person moving between them changes the
    areas' tables too."""
    prob = study.prepare(unit, with_block, pad_blocks=False)
    dom = prob.private.domain
    if not with_block:
        return dom, None
    names = dom.attribute("BLOCK").values
    finest = prob.areas[list(prob.areas)[-1]] if prob.areas else []
    area_of = {b: i for i, (_, members) in enumerate(finest) for b in members}
    other = next((b for b in range(1, len(names)) if area_of.get(b) != area_of.get(0)), 1)
    keep = [0, other][:len(names)]
    areas = {lv: [(a, [keep.index(b) for b in members if b in keep]) for a, members in listed
                  if any(b in keep for b in members)] for lv, listed in (prob.areas or {}).items()}
    frame = Domain((Attribute("BLOCK", tuple(names[b] for b in keep)),)
                   + tuple(a for a in dom.attributes if a.name != "BLOCK"))
    return frame, areas


def _worst_pair(domain: Domain, workload, relation: Relation) -> tuple[Dataset, Dataset]:
    """Neighbours D, D′ whose released counts are as far apart as one person can make them:
    add/remove adds the person type counted in the most cells; replace-one replaces that person
    by the type, in another block, whose cells differ from theirs the most."""
    has_block = "BLOCK" in domain
    a_types = person_types(domain, 0 if has_block else None)
    counts = np.concatenate([cells_of(workload, a_types[i:i + 2000]).sum(axis=1) for i in range(0, len(a_types), 2000)])
    a = a_types[int(np.argmax(counts))]
    base = np.array([[(i + 2) % s for s in domain.sizes] for i in range(3)], dtype=np.int64)
    if relation is Relation.ADD_REMOVE:
        return Dataset(domain, base), Dataset(domain, np.vstack([base, a]))
    other = 1 if has_block and domain.size("BLOCK") > 1 else 0
    b_types = person_types(domain, other if has_block else None)
    cells_a = cells_of(workload, a[None, :])[0]
    diff = np.concatenate([(cells_of(workload, b_types[i:i + 2000]) != cells_a[None, :]).sum(axis=1)
                           for i in range(0, len(b_types), 2000)])
    b = b_types[int(np.argmax(diff))]
    return Dataset(domain, np.vstack([base, a])), Dataset(domain, np.vstack([base, b]))


def _histogram_pair(frame: Domain, relation: Relation, cells: int = HISTOGRAM_CELLS
                    ) -> tuple[Dataset, Dataset, tuple[int, int]]:
    """Neighbours over a small domain (the smallest attack attributes, at most ``cells`` cells): D
    has one person alone in cell a and one in cell c; D′ moves the first to the empty cell b
    (replace-one) or adds a person in b (add/remove). Returns D, D′ and the keys (a, b)."""
    attrs, size = [], 1
    for at in sorted(frame.attributes, key=lambda x: x.size):
        if size * at.size <= cells:
            attrs.append(at)
            size *= at.size
    if size < 3:
        attrs, size = [Attribute.range("CELL", 4)], 4
    dom = Domain(tuple(attrs))
    a, b, c = 0, 1, size - 1
    D = Dataset(dom, dom.decode(np.array([a, c])))
    D2 = Dataset(dom, dom.decode(np.array([b, c] if relation is Relation.REPLACE_ONE else [a, c, b])))
    return D, D2, (a, b)


# ---- the audits ---------------------------------------------------------------------------------


def _noise(cfg: ExperimentConfig, seed: int, *parts):
    """The noise of the releases the audit draws as publication draws them (whole releases, the structure, the
    replay): OpenDP's where the config publishes with it, else the keyed simulation noise publishing uses, under
    the audit's own key."""
    if cfg.release.backend == "opendp":
        return OpenDPNoise()
    return _bound_noise(seed, *parts)


def _bound_noise(seed: int, *parts):
    """The noise of the statistical bound's many releases per neighbour (``release.audit.runs``, on the cells a pair
    touches): the audit's keyed discrete Laplace (Gaussian) whatever the backend, through the same publishing code.
    Under the simulation backend it is the publishing noise itself; under OpenDP, whose exact sampler takes about
    8 µs a draw (10⁵ releases of a pair's cells: minutes each), the sampler is what the whole releases, drawn
    through OpenDP, check: its scale, shape, tail and independence (:func:`_noise`)."""
    return KeyedNoise(stable_seed("audit-noise", seed, *parts))


def _publish(cfg, mech, eps, D, workload, backend, rng, **kw):
    return publish(ReleaseSpec.of(cfg), mech, eps, D, workload, backend, rng, **kw)


def _structure_check(cfg, mech, eps, workload, D, D2, batch: bool = False, **kw) -> str:
    """The shape of what is published must be the same for neighbours (``batch``: a release of one run through
    the mechanism's batch branch, for a fitted file: its tables)."""
    rng = np.random.default_rng(0)
    if batch:
        kw = dict(kw, runs=[0])
    try:
        s1 = _publish(cfg, mech, eps, D, workload, _noise(cfg, 0, "structure", 1), rng, **kw).structure
        s2 = _publish(cfg, mech, eps, D2, workload, _noise(cfg, 0, "structure", 2), rng, **kw).structure
    except PrivacyError as e:
        return f"fail: {e}"
    return "pass" if s1 == s2 else "fail: the shape of the release differs between neighbours"


def _replay_check(cfg, mech, eps, workload, D, D2, **kw) -> str:
    """Release D; replay the same noisy counts for D and D′: what follows the noise must agree (a small
    domain's pair, over ``release.audit.replay_draws`` recorded releases)."""
    source = registry.mechanism(mech).fitted_to or mech  # the synthetic rows are fitted to these counts
    tables_kw = {k: v for k, v in kw.items() if k != "key"}
    values = []
    for i in range(cfg.release.audit.replay_draws):
        first = _publish(cfg, source, eps, D, workload, _noise(cfg, i, "replay"), np.random.default_rng(0), **tables_kw)
        if isinstance(first.output, SparseHistogram):
            v = np.zeros(first.output.domain_size, dtype=np.int64)
            v[first.output.keys] = first.output.counts
        else:
            v = first.output.counts
        values.append(v)
    far = _far_datasets(D, cfg.release.audit.replay_far, np.random.default_rng(stable_seed("audit-far", len(D), mech)))
    return _replay_pairs(cfg, mech, eps, workload, D, [("the audit's pair", D2)] + far, values, **kw)


def _replay_pairs(cfg, mech, eps, workload, D, pairs: list, values: list, batch: bool = False, **kw) -> str:
    """For each recorded release ``values`` (noisy counts), publish D and every neighbour of ``pairs``
    replaying them: answers, rows and totals must be identical (the release reads the data only through
    its noisy counts). ``batch``: through the mechanism's batch branch, a release of one run (a fitted file's
    tables, without fitting them: the fit's own replay is separate)."""
    if batch:
        kw = dict(kw, runs=[0])
    for v in values:
        try:
            p1 = _publish(cfg, mech, eps, D, workload, ReplayNoise(v), np.random.default_rng(1), **kw)
        except PrivacyError as e:
            return f"fail: {e}"
        for what, D2 in pairs:
            try:
                p2 = _publish(cfg, mech, eps, D2, workload, ReplayNoise(v), np.random.default_rng(1), **kw)
            except PrivacyError as e:
                return f"fail: {e} ({what})"
            same = np.array_equal(p1.answers, p2.answers) and (
                not isinstance(p1.output, Dataset) or np.array_equal(p1.output.codes, p2.output.codes)) and (
                not batch or np.array_equal(p1.output.counts, p2.output.counts))
            t1, t2 = getattr(p1.output, "total", None), getattr(p2.output, "total", None)
            if not same or t1 != t2:
                return ("fail: with the same noisy counts, the neighbours' releases differ "
                        f"(totals {t1} and {t2}; {what}): the release reads the data beyond its noisy counts")
    return "pass"


def _batches(runs: int, values_per_run: int):
    """Batch sizes adding up to ``runs``, each batch at most :data:`CHUNK_VALUES` noise values."""
    chunk = int(max(100, min(runs, CHUNK_VALUES // max(values_per_run, 1))))
    done = 0
    while done < runs:
        n = min(chunk, runs - done)
        yield n
        done += n


def noise_epsilon(noise: np.ndarray, distance: np.ndarray, confidence: float) -> tuple[float, float]:
    """The ε the noise really added spends for a pair: Σ_c |Δ_c| / t_c over the differing cells, each
    cell's discrete Laplace scale t_c bounded above from its own draws (so one table noised for a
    larger ε shows, even among many), at ``confidence`` jointly (Bonferroni over cells). Returns the
    ε and the smallest scale bound."""
    k = noise.shape[1]
    level = 1 - (1 - confidence) / max(k, 1)
    scales = np.array([laplace_scale_upper(noise[:, j], level) for j in range(k)])
    with np.errstate(divide="ignore"):
        eps = float(np.sum(np.where(scales > 0, distance / scales, np.inf)))
    return eps, float(scales.min())


def _histogram_workload(D: Dataset) -> Workload:
    return Workload(D.domain, tuple((a,) for a in D.domain.names))


def _audit_perturbed(cfg: ExperimentConfig, mech: str, eps: float, small, seed: int) -> AuditResult:
    """Both paths of the perturbed histogram: dense (every cell noised) and the large-domain one
    (empty cells' positive noise drawn directly), the latter by lowering the dense limit below
    the small domain's size; the larger of the two bounds is reported."""
    a = cfg.release.audit
    D, D2, (ka, kb) = small
    keys = np.array([ka, kb])
    c1 = np.bincount(D.keys(), minlength=D.domain.total_size)[keys]
    c2 = np.bincount(D2.keys(), minlength=D.domain.total_size)[keys]
    w = _histogram_workload(D)
    results = {}
    for path, limit, runs in (("dense", D.domain.total_size, a.runs), ("large-domain", 1, min(a.runs, SPARSE_RUNS))):
        ys = []
        for which, data in ((0, D), (1, D2)):
            backend = _bound_noise(seed, "hist", eps, path, which)
            if path == "large-domain" and cfg.release.backend == "opendp":
                break  # publishing with OpenDP noises every cell: it never takes the large-domain path
            rng = np.random.default_rng(stable_seed("audit-hist", seed, eps, path, which))
            out = _publish(cfg, mech, eps, data, w, backend, rng, runs=runs, dense_limit=limit).output
            if isinstance(out, list):
                out = np.stack([lookup(h.keys, h.counts, keys, missing=0) for h in out])
            else:
                out = out[:, keys]
            ys.append(out)
        if len(ys) == 2:  # two paths, the larger bound reported: each certified at (1 + confidence) / 2
            results[path] = audit_outputs(ys[0], ys[1], c1, c2 - c1, eps, mech,
                                          (1 + a.confidence) / 2)
            if path == "dense":
                dense = ys
    path, best = max(results.items(), key=lambda kv: kv[1].epsilon_lower_bound)
    # the noise really added, on the side the clip at zero never touches (per differing cell, both
    # datasets' draws): its scale bounds the ε spent, its shape must be discrete Laplace
    excess = [np.concatenate([clipped_upper_excess(dense[0][:, j], c1[j]), clipped_upper_excess(dense[1][:, j], c2[j])])
              for j in range(2)]
    diff = np.abs(c2 - c1)
    cells = [j for j in range(2) if diff[j] > 0]
    level = 1 - (1 - a.confidence) / max(len(cells), 1)  # jointly over the differing cells
    scales = {j: geometric_scale_upper(excess[j], level) for j in cells}
    with np.errstate(divide="ignore"):
        eps_noise = float(sum(diff[j] / scales[j] if scales[j] > 0 else np.inf for j in cells))
    p_shape = min((geometric_shape_pvalue(excess[j]) for j in cells), default=1.0)
    checks = {"structure": _structure_check(cfg, mech, eps, w, D, D2),
              "post_processing": _replay_check(cfg, mech, eps, w, D, D2),
              "noise_scale": "pass" if eps_noise <= eps else
              f"fail: the noise added gives ε ≥ {eps_noise:.4g} for this pair (each differing cell's distance over an "
              "upper bound on its noise scale, from the draws above the clip at zero; assumes discrete Laplace noise, "
              "which noise_shape checks)",
              "noise_shape": "pass" if p_shape >= (1 - a.confidence) / max(len(cells), 1) else
              f"fail: the noise added is not discrete Laplace (chi-square of its upper side, geometric, over the whole "
              f"range: p = {p_shape:.2g})"}
    details = {f"epsilon_lower_bound_{p.replace('-', '_')}_path": round(r.epsilon_lower_bound, 6) for p, r in results.items()}
    details.update(histogram_cells=D.domain.total_size, epsilon_from_noise_scale=round(eps_noise, 6),
                   noise_shape_p_value=p_shape)
    return AuditResult(mech, eps, best.epsilon_lower_bound, best.runs, a.confidence,
                       f"{path} path: {best.event}", checks, details)


def _audit_smoothed(cfg: ExperimentConfig, mech: str, eps: float, small, seed: int) -> AuditResult:
    """The smoothed histogram's worst case: a person alone in their cell moves to an empty one,
    in a dataset of two persons released as two draws (k = n), where the whole privacy loss is
    reached by an event of reasonable probability (both draws in the cell the person moved to)."""
    a = cfg.release.audit
    D, D2, (ka, kb) = small
    if parse_relation(cfg.release.relation) is not Relation.REPLACE_ONE:
        raise ConfigError("the smoothed histogram is DP only under replace_one neighbours")
    w = _histogram_workload(D)
    ys = []
    for which, data in ((0, D), (1, D2)):
        rng = np.random.default_rng(stable_seed("audit-smooth", seed, eps, which))
        draws = _publish(cfg, mech, eps, data, w, None, rng, runs=a.runs).output
        ys.append(np.stack([(draws == ka).sum(axis=1), (draws == kb).sum(axis=1)], axis=1))
    res = audit_outputs(ys[0], ys[1], np.zeros(2, np.int64), np.array([-1, 1]), eps, mech,
                        a.confidence)
    checks = {"structure": _structure_check(cfg, mech, eps, w, D, D2)}
    return AuditResult(mech, eps, res.epsilon_lower_bound, a.runs, a.confidence, res.event, checks,
                       {"histogram_cells": D.domain.total_size, "draws": len(D)})


def _topdown_structure(study: Study, unit: str, wb: bool, nodes: dict) -> str:
    """Neighbours that empty a block (its last resident removed) and a whole unit of the target level
    (likewise) must publish trees of the same shape and measurements of the same shapes, through
    the production functions from the population on. ``nodes``: the units of the target level in the
    real tree (:func:`topdown_root`'s)."""
    cfg, pop = study.cfg, study.pop
    geo = pop.geography
    level = cfg.target.level
    inside = np.flatnonzero(np.isin(geo.units(level), list(nodes)))
    if not len(inside):
        return "not applicable: nobody lives under the root"
    cases = []
    other = [u for u in nodes if u != unit and (geo.units(level) == u).any()]
    if other:  # a whole unit down to one resident, and then none
        rows = np.flatnonzero(geo.units(level) == other[0])
        keep = np.setdiff1d(np.arange(len(pop)), rows[1:])
        cases.append(("a unit", keep, rows[0]))
    if wb:  # a block of the audited unit down to one resident, and then none
        rows = np.flatnonzero(geo.units(level) == unit)
        blocks = geo.units("block")[rows]
        first = rows[blocks == blocks[0]]
        keep = np.setdiff1d(np.arange(len(pop)), first[1:])
        cases.append(("a block", keep, first[0]))
    for what, keep, last in cases:
        shapes = []
        for rows in (keep, np.setdiff1d(keep, [last])):
            sub = pop.take(rows)
            g = Geography(sub.geography.levels, sub.geography.ids, catalogue=geo.catalogue)
            people = Dataset(sub.domain, sub.codes, g)
            try:
                t = topdown_root(resolve(cfg, people), unit, wb)
                meas = publish_topdown(cfg, t, min(cfg.release.epsilons), _noise(cfg, 0, "structure", what),
                                       runs=1).measurements
            except (PrivacyError, ConfigError) as e:
                return f"fail: the neighbour that empties {what} could not be released ({e})"
            shapes.append((t.shape.key(), tuple(x.shape for x in meas.detailed + meas.tables)))
        if shapes[0] != shapes[1]:
            return f"fail: emptying {what} changes the shape of the tree or of its measurements"
    return "pass"


def _block_list_check(study: Study, unit: str) -> str:
    """A tract where one block's only resident is replaced by someone in another of its blocks
    (or removed): the attack domain, hence every table's and histogram's shape, must not change."""
    cfg, pop = study.cfg, study.pop
    if "occupied_blocks" in cfg.release.invariants:
        return "declared invariant: occupied_blocks (the block list is published as it is; not audited)"
    geo = pop.geography
    rows = np.flatnonzero(geo.mask(cfg.target.level, unit))
    blocks = sorted(set(geo.units("block")[rows].tolist()))
    if len(blocks) < 2:
        return "not applicable: the unit has fewer than two occupied blocks"
    first = rows[geo.units("block")[rows] == blocks[0]][:1]
    second = rows[geo.units("block")[rows] == blocks[1]][:3]
    template = pop.take(np.concatenate([first, second]))
    moved = pop.take(np.concatenate([second[:1], second]))  # the lone resident replaced by one of block 2

    def domain_of(people: Dataset):
        g = Geography(people.geography.levels, people.geography.ids, catalogue=geo.catalogue)
        return resolve(cfg, Dataset(people.domain, people.codes, g)).prepare(unit, True, pad_blocks=False).private.domain

    try:
        same = domain_of(template) == domain_of(moved)
    except Exception as e:  # noqa: BLE001 - a crash on the neighbour is a failed check, reported as such
        return f"fail: the neighbour could not be prepared ({e})"
    if same:
        return "pass"
    source = geo.catalogue.source if geo.catalogue is not None else FROM_ROWS
    return f"fail: the block list changes when a block's only resident is replaced (block list: {source})"


# ---- every family's contract and law on the real workload: what the mechanism publishes on the unit's own D -----


def _with_real_law(res: AuditResult, per_unit: list[tuple[dict, dict]]) -> AuditResult:
    """A small-domain audit's result with the checks of the same mechanism's releases of every audited unit's own
    D on the real workload (:func:`_histogram_law_unit`, :func:`_smoothed_law_unit`): a unit's failure, then a check
    it could not run, stands for all; each unit's figures kept."""
    checks = dict(res.checks)
    rank = {"fail": 3, "not run": 2, "pass": 1, "informational": 0}
    for unit_checks, info in per_unit:
        for k, v in unit_checks.items():
            state = check_state(v)
            if k not in checks or rank[state] > rank[check_state(checks[k])]:
                checks[k] = f"{v} [{info.get('unit')}]" if state in ("fail", "not run") else v
    details = dict(res.details, real_workload={str(info.get("unit")): info for _, info in per_unit})
    return dataclasses.replace(res, checks=checks, details=details)


def _broken_contract(mech: str, eps: float, confidence: float, per_unit: list[tuple[dict, dict]]) -> AuditResult | None:
    """A failed result when a unit's release does not fit the family's contract (the family's own audit, which
    assumes it, is not run); None when every unit's does."""
    if all(check_state(c.get("family_contract", "pass")) != "fail" for c, _ in per_unit):
        return None
    empty = AuditResult(mech, eps, 0.0, 0, confidence, "none", {}, {})
    return _with_real_law(empty, per_unit)


def _contract_failure(mech: str, family: str, wants: str, got) -> str:
    return (f"fail: {mech} is registered in the {family} audit family, whose releases are {wants}; on the real "
            f"workload it published {type(got).__name__}{getattr(got, 'shape', '') and f' of shape {got.shape}'}: the "
            "family does not check what it publishes (register it with the family that does)")


def _histogram_law_unit(study: Study, mech: str, unit: str, wb: bool, eps: float, seed: int,
                        cache: dict) -> tuple[dict, dict]:
    """A histogram mechanism's releases of the unit's own D over its real domain: each must be a histogram of
    that domain (the family's contract); the noise on its cells, on the side the clip at zero never touches
    (:func:`synth.audit.statistics.clipped_upper_excess`), must be discrete Laplace whose scale spends at most ε at the
    histogram's sensitivity under the declared relation (:func:`yardstick.detailed_sensitivity`), in every band
    of true counts (none, at least 1, 3, 10, 50), over the occupied cells and a sample of the empty ones."""
    cfg = study.cfg
    a = cfg.release.audit
    D, _, workload, *_ = _unit_instance(study, unit, wb, cache)
    m = D.domain.total_size
    backend = _noise(cfg, seed, "histogram-real", unit, wb, eps)
    rng = np.random.default_rng(stable_seed("audit-histogram-real", seed, unit, wb, eps))
    info = {"unit": unit, "cells": int(m)}
    try:
        one = _publish(cfg, mech, eps, D, workload, _keyed_release(backend, 0), rng).output
    except PrivacyError as e:
        return {"family_contract": f"not run: its release of the real domain could not be drawn here ({e})"}, info
    except Exception as e:  # noqa: BLE001 - a release that cannot be made as the family makes it breaks its contract
        return {"family_contract": f"fail: {mech} could not release the unit's own D as the histogram family does "
                                   f"({type(e).__name__}: {e})"}, info
    if not isinstance(one, SparseHistogram) or one.domain_size != m:
        return {"family_contract": _contract_failure(mech, "histogram", f"a noisy histogram of the unit's {m} "
                                                     "cells (SparseHistogram)", one)}, info
    keys, counts = np.unique(D.keys(), return_counts=True)
    n_empty = min(2000, m - keys.size)
    empty = np.zeros(0, np.int64)
    while empty.size < n_empty:
        draw = rng.integers(0, m, 2 * n_empty + 16)
        empty = np.unique(np.concatenate([empty, draw[~np.isin(draw, keys)]]))[:n_empty]
    cols, truth = np.concatenate([keys, empty]), np.concatenate([counts, np.zeros(empty.size, np.int64)])
    out = _publish(cfg, mech, eps, D, workload, backend, rng, runs=list(range(1, a.whole_releases + 1))).output
    if isinstance(out, list):
        y = np.stack([lookup(h.keys, h.counts, cols, missing=0) for h in out])
    else:
        y = np.asarray(out)[:, cols]
    x = y - truth[None, :]
    x0 = np.where(truth > 0, 0, 1)[None, :]  # a count of 0 is seen above the clip from 1 up
    seen = x >= x0
    excess = (x - x0)
    delta = detailed_sensitivity(cfg.release.relation)
    bands = {"band 0": truth == 0, **{f"band ≥ {b}": truth >= b for b in BANDS}}
    bands = {g: sel for g, sel in bands.items() if seen[:, sel].sum() >= MIN_GROUP_DRAWS}
    level = 1 - (1 - a.confidence) / max(len(bands), 1)
    spent = {g: delta / t if (t := geometric_scale_upper_exact(excess[:, sel][seen[:, sel]], level)) > 0 else math.inf
             for g, sel in bands.items()}
    worst = max(spent, key=spent.get) if spent else None
    pooled = excess[seen]
    p_shape = geometric_shape_pvalue(pooled)
    info.update(epsilon_from_noise_scale={g: round(v, 6) for g, v in spent.items()}, noise_shape_p_value=p_shape,
                releases=a.whole_releases, cells_checked=int(cols.size), sensitivity=delta)
    checks = {"family_contract": "pass"}
    checks["real_noise_scale"] = (
        "not run: too few draws above the clip" if worst is None else "pass" if spent[worst] <= eps else
        f"fail: on the unit's own D the histogram's noise spends ε ≥ {spent[worst]:.4g} ({worst}: the sensitivity "
        f"{delta} over an upper bound on its noise scale, from the draws above the clip at zero), over the declared "
        f"{eps:g}")
    checks["real_noise_shape"] = ("pass" if p_shape >= 1 - a.confidence else
                                  f"fail: on the unit's own D the histogram's noise is not discrete Laplace "
                                  f"(geometric above the clip: p = {p_shape:.2g})")
    return checks, info


def _smoothed_law_unit(study: Study, mech: str, unit: str, wb: bool, eps: float, seed: int,
                       cache: dict) -> tuple[dict, dict]:
    """A smoothed histogram's releases of the unit's own D: each must be n draws of cells of the unit's domain (the
    family's contract); the share of draws in cells where D has nobody must reach what the mixing weight ε needs
    puts there (:func:`yardstick.smoothed_mixing`: δ·(cells D leaves empty)/m), or the data's own cells carry more
    weight than ε allows."""
    cfg = study.cfg
    a = cfg.release.audit
    D, _, workload, *_ = _unit_instance(study, unit, wb, cache)
    m, n = D.domain.total_size, len(D)
    rng = np.random.default_rng(stable_seed("audit-smoothed-real", seed, unit, wb, eps))
    info = {"unit": unit, "cells": int(m), "n": n}
    backend = _noise(cfg, seed, "smoothed-real", unit, wb, eps)  # the family draws from rng; a release may not
    try:
        one = _publish(cfg, mech, eps, D, workload, _keyed_release(backend, 0), rng).output
    except Exception as e:  # noqa: BLE001 - a release that cannot be made as the family makes it breaks its contract
        return {"family_contract": f"fail: {mech} could not release the unit's own D as the smoothed family does "
                                   f"({type(e).__name__}: {e})"}, info
    if not (isinstance(one, np.ndarray) and one.ndim == 1 and one.size == n and np.issubdtype(one.dtype, np.integer)
            and (one.size == 0 or (one.min() >= 0 and one.max() < m))):
        return {"family_contract": _contract_failure(mech, "smoothed", f"{n} draws of cells of the unit's {m}", one)}, info
    draws = np.asarray(_publish(cfg, mech, eps, D, workload, backend, rng, runs=a.whole_releases).output).ravel()
    occupied = np.unique(D.keys())
    hits, total = int((~np.isin(draws, occupied)).sum()), int(draws.size)
    need = smoothed_mixing(eps, n, m, n) * (m - occupied.size) / m
    _, high = clopper_pearson(hits, total, 1 - a.confidence)
    info.update(draws=total, share_in_empty_cells=hits / max(total, 1), share_needed=need)
    checks = {"family_contract": "pass",
              "real_mixing": ("pass" if high >= need else
                              f"fail: on the unit's own D {hits:,} of its {total:,} draws fell in cells where nobody "
                              f"lives (at most {high:.3g} of them by a {a.confidence:.4g} bound), below the {need:.3g} "
                              f"ε = {eps:g} needs: the data's cells carry more weight than ε allows")}
    return checks, info


# ---- the real instance: neighbours of a unit's own data, whole releases, the cells a pair touches -----------------


def _types_of(D: Dataset) -> tuple[Domain, np.ndarray]:
    """The person domain (every attribute but BLOCK) and each row's type in it."""
    names = [a for a in D.domain.names if a != "BLOCK"]
    dom = D.domain.project(names)
    return dom, dom.encode(D.project(names).codes) if len(D) else np.zeros(0, np.int64)


def _with_type(D: Dataset, row: int, dom: Domain, t: int) -> Dataset:
    codes = D.codes.copy()
    code = dom.decode(np.array([t]))[0]
    for j, name in enumerate(dom.names):
        codes[row, D.domain.index(name)] = code[j]
    return Dataset(D.domain, codes)


def _add_row(D: Dataset, dom: Domain, t: int, block: int | None) -> Dataset:
    row = np.zeros((1, len(D.domain)), dtype=np.int64)
    code = dom.decode(np.array([t]))[0]
    for j, name in enumerate(dom.names):
        row[0, D.domain.index(name)] = code[j]
    if block is not None:
        row[0, D.domain.index("BLOCK")] = block
    return Dataset(D.domain, np.vstack([D.codes, row]))


def _drop_row(D: Dataset, row: int) -> Dataset:
    return D.take(np.setdiff1d(np.arange(len(D)), [row]))


def _other_area_block(D: Dataset, areas: dict | None, block: int) -> int:
    """A block of another area (the tracts of a county) than ``block``'s where one exists, else the next block."""
    n = D.domain.size("BLOCK")
    finest = areas[list(areas)[-1]] if areas else []
    area_of = {b: i for i, (_, members) in enumerate(finest) for b in members}
    other = [b for b in range(n) if b != block and area_of.get(b) != area_of.get(block)]
    return other[-1] if other else (block + 1) % n


def _real_pairs(D: Dataset, workload, relation: Relation, areas: dict | None) -> list:
    """Neighbours of the real D under ``relation``: replace-one moves a real person to a block of another
    area, changes a person of the commonest type to the rarest and one of the rarest present type to the
    commonest, and replaces a person by the type whose cells differ most from theirs; add/remove adds the
    type in most cells and removes a real person (of the commonest type)."""
    dom, types = _types_of(D)
    counts = np.bincount(types, minlength=dom.total_size) if len(D) else np.zeros(dom.total_size, np.int64)
    common, rare = int(np.argmax(counts)), int(np.argmin(counts))
    has_block = "BLOCK" in D.domain
    pairs = []
    all_types = person_types(D.domain, 0 if has_block else None)
    if relation is Relation.ADD_REMOVE:
        per_type = np.concatenate([cells_of(workload, all_types[i:i + 2000]).sum(axis=1)
                                   for i in range(0, len(all_types), 2000)])
        t_most = int(dom.encode(all_types[int(np.argmax(per_type))][[D.domain.index(a) for a in dom.names]][None, :])[0])
        pairs.append((f"a person of the type in most cells ({int(per_type.max())}) added", _add_row(D, dom, t_most,
                                                                                                   0 if has_block else None)))
        if len(D):
            row = int(np.flatnonzero(types == common)[0])
            pairs.append(("a person of the commonest type removed", _drop_row(D, row)))
        return pairs
    if not len(D):
        return pairs
    row_c = int(np.flatnonzero(types == common)[0])
    pairs.append(("a person of the commonest type changed to the rarest", _with_type(D, row_c, dom, rare)))
    present = np.flatnonzero(counts > 0)
    rarest_present = int(present[np.argmin(counts[present])])
    row_r = int(np.flatnonzero(types == rarest_present)[0])
    if rarest_present != common:
        pairs.append(("a person of the rarest type changed to the commonest", _with_type(D, row_r, dom, common)))
    if has_block:
        codes = D.codes.copy()
        jb = D.domain.index("BLOCK")
        codes[row_c, jb] = _other_area_block(D, areas, int(codes[row_c, jb]))
        pairs.append(("a person moved to a block of another area", Dataset(D.domain, codes)))
    cells_a = cells_of(workload, D.codes[row_c][None, :])[0]
    cand = all_types.copy()
    if has_block:
        cand[:, D.domain.index("BLOCK")] = _other_area_block(D, areas, int(D.codes[row_c, D.domain.index("BLOCK")]))
    diff = np.concatenate([(cells_of(workload, cand[i:i + 2000]) != cells_a[None, :]).sum(axis=1)
                           for i in range(0, len(cand), 2000)])
    b = cand[int(np.argmax(diff))]
    codes = D.codes.copy()
    codes[row_c] = b
    pairs.append((f"a person replaced by the type differing in most cells ({int(diff.max())})", Dataset(D.domain, codes)))
    return pairs


def canary_neighbour(D: Dataset, relation: Relation) -> tuple[str, Dataset]:
    """The worst-case neighbour of D for a synthesizer (Annamalai, Ganev and De Cristofaro 2024: a record in a
    region of the domain the data leaves empty): a person of a type nobody of D has, the one whose values are
    rarest in D (the least sum of its values' counts, one attribute at a time; the first such type breaking
    ties), in the block with the fewest persons. Added under add/remove; under replace-one it replaces a person
    of the commonest type. With every type present, the rarest one."""
    dom, types = _types_of(D)
    counts = np.bincount(types, minlength=dom.total_size) if len(D) else np.zeros(dom.total_size, np.int64)
    empty = np.flatnonzero(counts == counts.min())
    values = dom.decode(empty)
    rarity = np.zeros(len(empty), dtype=np.int64)
    for j, name in enumerate(dom.names):
        rarity += np.bincount(D.column(name), minlength=dom.size(name))[values[:, j]]
    pick = int(np.argmin(rarity))
    t = int(empty[pick])
    block = None
    if "BLOCK" in D.domain:
        block = int(np.argmin(np.bincount(D.column("BLOCK"), minlength=D.domain.size("BLOCK"))))
    label = ", ".join(f"{n}={dom.attribute(n).values[v]}" for n, v in zip(dom.names, values[pick]))
    what = (f"a canary ({label}: a type nobody has"
            + (f", in the block with fewest persons" if block is not None else "") + ")")
    if relation is Relation.ADD_REMOVE or not len(D):
        return what + " added", _add_row(D, dom, t, block)
    common = int(np.argmax(counts))
    row = int(np.flatnonzero(types == common)[0])
    codes = _with_type(D, row, dom, t).codes.copy()
    if block is not None:
        codes[row, D.domain.index("BLOCK")] = block
    return what + " in place of a person of the commonest type", Dataset(D.domain, codes)


def _replay_neighbours(D: Dataset, relation: Relation, areas: dict | None, k: int,
                       rng: np.random.Generator) -> list[tuple[str, Dataset]]:
    """``k`` neighbours of the real D for the replay: in turn a random person moved to a random other block
    (of another area every other time), changed to a random other type, and (add/remove) removed or a
    random type added."""
    dom, _ = _types_of(D)
    has_block = "BLOCK" in D.domain
    out = []
    for i in range(k):
        kind = i % 3
        if not len(D):
            t = int(rng.integers(dom.total_size))
            out.append(("a person added", _add_row(D, dom, t, 0 if has_block else None)))
            continue
        row = int(rng.integers(len(D)))
        if relation is Relation.ADD_REMOVE and kind == 2:
            out.append((f"person {row} removed", _drop_row(D, row)))
        elif relation is Relation.ADD_REMOVE and kind == 1:
            t = int(rng.integers(dom.total_size))
            blk = int(rng.integers(D.domain.size("BLOCK"))) if has_block else None
            out.append((f"a person of type {t} added", _add_row(D, dom, t, blk)))
        elif kind == 0 and has_block and D.domain.size("BLOCK") > 1:
            codes = D.codes.copy()
            jb = D.domain.index("BLOCK")
            cur = int(codes[row, jb])
            codes[row, jb] = (_other_area_block(D, areas, cur) if i % 2 else
                              int((cur + 1 + rng.integers(D.domain.size("BLOCK") - 1)) % D.domain.size("BLOCK")))
            out.append((f"person {row} moved from block {cur} to {int(codes[row, jb])}", Dataset(D.domain, codes)))
        else:
            t = int(rng.integers(dom.total_size))
            out.append((f"person {row} changed to type {t}", _with_type(D, row, dom, t)))
    return out


def _far_datasets(D: Dataset, k: int, rng: np.random.Generator, blocks: int | None = None,
                  n: int | None = None) -> list[tuple[str, Dataset]]:
    """``k`` datasets far from D for the replay: ``n`` persons (default D's: n, and so every total an
    invariant may publish, stays), each attribute of each person drawn uniformly from its domain
    (BLOCK from the first ``blocks`` codes when given: the unit's own blocks). Post-processing reads
    only the measurements and public facts, so these must give D's output from D's measurements too."""
    n = len(D) if n is None else n
    out = []
    for i in range(k):
        codes = np.empty((n, len(D.domain)), dtype=np.int64)
        for j, name in enumerate(D.domain.names):
            size = blocks if name == "BLOCK" and blocks else D.domain.size(name)
            codes[:, j] = rng.integers(0, max(size, 1), n)
        out.append((f"a dataset far from the real one ({i + 1}: {n} persons drawn at random)", Dataset(D.domain, codes)))
    return out


#: Lower ends of the bands of true counts whose noise is bounded apart (nested: "at least b" and "0").
BANDS = (1, 3, 10, 50)
#: The fewest draws of a group whose noise bounds a measurement's scale (its cells are in larger groups too).
MIN_GROUP_DRAWS = 200


def _band_groups(exact: np.ndarray) -> dict:
    """Cells by their true counts: none, and at least 1, 3, 10, 50 (nested, so each band has as many draws
    as it can): a scale that depends on the data shows as one band noised less than the others."""
    x = np.asarray(exact)
    return {"band 0": x == 0, **{f"band ≥ {b}": x >= b for b in BANDS}}


def _whole_checks(cfg: ExperimentConfig, eps: float, groups: dict, shape_sample: np.ndarray, tail_draws: list,
                  indep: np.ndarray, sensitivity: dict, gaussian: bool, budget: float,
                  tail_stats: list | None = None) -> tuple[dict, dict]:
    """The checks over whole releases. ``groups``: (measurement, group) -> (n, Σ|x|, Σx²) of the noise;
    ``sensitivity``: measurement -> the most one person moves its cells (L1; for 0/1 cells also the squared
    L2), found by the audit. Each measurement's noise is bounded above by its least-noised group (a node,
    a table, a band of true counts), so ε (ρ) from noise = Σ Δ / t (Δ / 2σ²) must not exceed ``budget``.
    ``tail_stats``: more draws of the same noise (:func:`_tail_stats` of the pairs' releases, far more
    than whole releases hold), for a far-tail test that reaches deeper (a clip at 10 scales shows)."""
    a = cfg.release.audit
    level = 1 - (1 - a.confidence) / max(len(groups), 1)
    per_meas: dict = {}
    for (meas, group), (n, sa, sq) in groups.items():
        if n < MIN_GROUP_DRAWS and any(m == meas and k[1] != group and v[0] >= MIN_GROUP_DRAWS
                                       for k, v in groups.items() for m in [k[0]]):
            continue  # too few draws for a trustworthy bound; its cells are in larger groups
        t = gaussian_sigma_upper_stats(n, sq, level) if gaussian else laplace_scale_upper_stats(n, sa, sq, level)
        if meas not in per_meas or t < per_meas[meas][0]:
            per_meas[meas] = (t, group)
    spent, details = 0.0, {}
    for meas, (t, group) in per_meas.items():
        d = sensitivity[meas]
        e = (d / (2 * t * t) if gaussian else d / t) if t > 0 else math.inf
        spent += e
        details[str(meas)] = {"sensitivity": d, "least_noised_group": str(group), "scale_upper": round(t, 6),
                              ("rho" if gaussian else "epsilon") + "_at_least": round(e, 6)}
    what = "ρ" if gaussian else "ε"
    checks = {"noise_scale": "pass" if spent <= budget else
              f"fail: the noise added spends {what} ≥ {spent:.4g} (each measurement's sensitivity over an upper bound "
              f"on the noise of its least-noised node, table or band of true counts, summed), over the declared "
              f"{budget:.4g} (assumes discrete {'Gaussian' if gaussian else 'Laplace'} noise, which noise_shape checks)"}
    p_shape = gaussian_shape_pvalue(shape_sample) if gaussian else laplace_shape_pvalue(shape_sample)
    p_tails = [tail_pvalue(x, gaussian) for x in tail_draws] + ([_tail_from_stats(tail_stats, gaussian)]
                                                                if tail_stats else [])
    p_tail = min(1.0, len(p_tails) * min(p_tails)) if p_tails else 1.0  # Bonferroni over the draws' sets
    family = "Gaussian" if gaussian else "Laplace"
    checks["noise_shape"] = ("pass" if p_shape >= 1 - a.confidence else
                             f"fail: the noise added is not discrete {family} (chi-square over its whole range, "
                             f"p = {p_shape:.2g})")
    checks["noise_tail"] = ("pass" if p_tail >= 1 - a.confidence else
                            f"fail: the noise added has too few draws in its far tail for discrete {family} noise "
                            f"(p = {p_tail:.2g}): it is cut off (truncated or clipped)")
    p_ind, where = independence_pvalue(indep)
    checks["noise_independence"] = ("pass" if p_ind >= 1 - a.confidence else
                                    f"fail: the noise is not independent across cells, nodes or releases ({where}: "
                                    f"p = {p_ind:.2g}); correlated or reused noise")
    info = {("rho" if gaussian else "epsilon") + "_from_noise_scale": round(spent, 6), "per_measurement": details,
            "noise_shape_p_value": p_shape, "noise_tail_p_value": p_tail, "independence_p_value": p_ind,
            "whole_releases": a.whole_releases}
    return checks, info


#: Most noise columns the independence check correlates pairwise (every pair of them).
INDEPENDENCE_COLUMNS = 4000


def _independence_columns(labels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """The columns the independence check correlates: all of them up to :data:`INDEPENDENCE_COLUMNS`, else
    that many: every column sharing its cell label with another (a table cell of two blocks), then at
    random."""
    c = len(labels)
    if c <= INDEPENDENCE_COLUMNS:
        return np.arange(c)
    _, inv, counts = np.unique(labels, return_inverse=True, return_counts=True)
    shared = np.flatnonzero(counts[inv] > 1)
    pick = shared if shared.size <= INDEPENDENCE_COLUMNS // 2 else rng.choice(shared, INDEPENDENCE_COLUMNS // 2,
                                                                                replace=False)
    rest = np.setdiff1d(np.arange(c), pick)
    more = rng.choice(rest, min(rest.size, INDEPENDENCE_COLUMNS - pick.size), replace=False)
    return np.sort(np.concatenate([pick, more]))


def _unit_instance(study: Study, unit: str, wb: bool, cache: dict) -> tuple:
    """A unit's real instance, the same at every ε of one audit: D, its areas, the published workload, D's
    exact counts, the real pairs with their counts, and the tables' sensitivity under the declared relation
    (the audit's own yardstick, by brute force over the unit's neighbours: never the release's)."""
    cfg = study.cfg
    key = (unit, wb)
    if key not in cache:
        prob = study.prepare(unit, wb, pad_blocks=False)
        D, areas = prob.private, prob.areas
        workload = build_workload(cfg, cfg.published, D.domain, areas)
        exact = workload_counts(D, workload)
        pairs = _real_pairs(D, workload, parse_relation(cfg.release.relation), areas)
        cache[key] = (D, areas, workload, exact, pairs, [workload_counts(D2, workload) for _, D2 in pairs],
                      table_sensitivity(workload, D.codes, cfg.release.relation))
    return cache[key]


def _audit_tables_unit(study: Study, mech: str, unit: str, wb: bool, eps: float, seed: int, cache: dict) -> AuditResult:
    """Noisy tables (the ``tables`` family: Laplace's) or a file fitted to noisy tables (``fitted_tables``: synthetic)
    of one unit, on its own D, every draw through ``mech``'s own publishing function: the bound over the real pairs,
    the whole-release checks, the replay over many pairs, the structure. A fitted file's draws are the tables it
    fits (its function's batch branch); its releases as published (one call, the fit included) must have fitted
    exactly those tables (``single_release``), its structure and its fit must read nothing but them."""
    cfg = study.cfg
    a = cfg.release.audit
    relation = parse_relation(cfg.release.relation)
    fitted = registry.mechanism(mech).audit == "fitted_tables"
    D, areas, workload, exact, pairs, pair_counts, sens = _unit_instance(study, unit, wb, cache)
    pair_conf = 1 - (1 - a.confidence) / max(len(pairs), 1)
    rng0 = np.random.default_rng(0)
    bound, backend = _bound_noise(seed, "tables", unit, wb, eps), _noise(cfg, seed, "tables", unit, wb, eps)
    # the family's contract: noisy counts of every published cell, one row a release (a fitted file's batch branch)
    probe = _publish(cfg, mech, eps, D, workload, bound, rng0, runs=[0]).output
    if np.shape(getattr(probe, "counts", None)) != (1, exact.size):
        family = "fitted_tables" if fitted else "tables"
        return AuditResult(mech, eps, 0.0, 0, a.confidence, "none", {"family_contract": _contract_failure(
            mech, family, f"noisy counts of the workload's {exact.size} cells (NoisyTables)", probe)}, {"unit": unit})
    bounds, pair_tail = [], []  # the pairs' draws are publication noise too: the far tail is checked over them
    for i, (what, D2) in enumerate(pairs):
        c2 = pair_counts[i]
        idx = np.flatnonzero(c2 - exact)
        if not idx.size:
            continue
        r1 = range(2 * i * a.runs, (2 * i + 1) * a.runs)
        r2 = range((2 * i + 1) * a.runs, (2 * i + 2) * a.runs)
        y1 = _publish(cfg, mech, eps, D, workload, bound, rng0, runs=r1, cells=idx).output.counts
        y2 = _publish(cfg, mech, eps, D2, workload, bound, rng0, runs=r2, cells=idx).output.counts
        res = audit_outputs(y1, y2, exact[idx], (c2 - exact)[idx], eps, mech, pair_conf)
        bounds.append((res.epsilon_lower_bound, f"{what}: {res.event}", int(idx.size)))
        if bound is backend or not backend.for_publication:  # the far tail over publication noise only
            pair_tail += [_tail_stats(y1 - exact[idx][None, :], False), _tail_stats(y2 - c2[idx][None, :], False)]
    # whole releases of the real D, each the very call that publishes one (a single release; a fitted file's, the
    # tables it fits: a batch of one), numbered after every pair's releases under the audit's key
    start = 2 * len(pairs) * a.runs

    def whole_release(r: int):
        if fitted:
            return _publish(cfg, mech, eps, D, workload, backend, rng0, runs=[start + r]).output.counts[0]
        return _publish(cfg, mech, eps, D, workload, _keyed_release(backend, start + r), rng0).output.counts

    whole = np.stack([whole_release(r) for r in range(a.whole_releases)])
    noise = whole - exact[None, :]
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
    for g, sel in _band_groups(exact).items():
        groups.add(("tables", g), noise[:, sel])
    for p in np.unique(place):  # per block (and area): a scale that depends on the node shows
        groups.add(("tables", f"place {p}"), noise[:, place == p])
    rng = np.random.default_rng(stable_seed("audit-sample", seed, unit))
    groups.keep(noise, 2_000_000, rng)
    cols = _independence_columns(cell_label, rng)
    checks, info = _whole_checks(cfg, eps, groups.sums, np.concatenate(groups.sample), [noise], noise[:, cols],
                                 {"tables": sens.l1}, False, eps, pair_tail)
    info["sensitivity"] = sens.as_dict()
    # the replay: recorded whole releases, many neighbours of the real data (a fitted file's tables: its batch branch)
    far = _far_datasets(D, a.replay_far, rng)
    neighbours = _replay_neighbours(D, relation, areas, a.replay_pairs, rng) + far
    values = [whole[i] for i in range(min(a.replay_draws, len(whole)))]
    checks["post_processing"] = _replay_pairs(cfg, mech, eps, workload, D, neighbours, values, batch=fitted)
    record = (_publish(cfg, mech, eps, D, workload, backend, rng0, runs=[start]) if fitted else
              _publish(cfg, mech, eps, D, workload, _keyed_release(backend, start), rng0)).record
    checks["accounting"], acc = _tables_accounting(record, eps, sens.l1)
    info.update(acc)
    checks["structure"] = (_structure_check(cfg, mech, eps, workload, D, pairs[0][1], batch=fitted) if pairs
                           else "not run")
    details = {}
    if fitted:
        key = unit_key(cfg, "fit", unit, eps)  # the key the published fit uses (public: unit and ε)
        fits = far[:1] + neighbours[:SYNTHETIC_REPLAY_FITS - min(len(far), 1)]
        checks["single_release"] = _single_release_check(cfg, mech, eps, workload, D, backend, start, whole[0],
                                                         exact, sens.l1, key, pair_conf)
        checks["synthetic_structure"] = (_structure_check(cfg, mech, eps, workload, D, pairs[0][1], key=key)
                                         if pairs else "not run")
        checks["synthetic_post_processing"] = _replay_pairs(cfg, mech, eps, workload, D, fits, values[:1], key=key)
        details = {"synthetic_replay_fits": len(fits),
                   "audited_as": "the noisy tables it fits, drawn through its own publishing function; the fit is "
                                 "post-processing of them"}
    best = max(bounds, default=(0.0, "none", 0))
    details.update(info, unit=unit, neighbours=[w for w, _ in pairs], differing_cells=[b[2] for b in bounds],
                   bound_per_pair={w: round(b[0], 6) for (w, _), b in zip(pairs, bounds)},
                   replay_pairs=len(neighbours), replay_draws=len(values),
                   audited_on="the unit's own D (its private half), every cell")
    details.setdefault("audited_as", "the published noisy counts")
    return AuditResult(mech, eps, best[0], a.runs, a.confidence, best[1], checks, details)


def _single_release_check(cfg, mech: str, eps: float, workload, D: Dataset, backend, release: int, drawn: np.ndarray,
                          exact: np.ndarray, sensitivity: int, key, confidence: float) -> str:
    """A fitted file as it is published (one call: its noisy tables, then the fit) must fit the tables the audit
    drew through its batch branch: with the audit's keyed noise, release ``release`` of the key exactly (``drawn``);
    with a publishing backend, which never repeats a draw, tables whose noise spends at most ε (the scale of its
    cells' noise bounded above, at the tables' L1 ``sensitivity``)."""
    one = _publish(cfg, mech, eps, D, workload, _keyed_release(backend, release), np.random.default_rng(0), key=key)
    tables = one.facts.get("noisy_tables")
    if tables is None:
        return "fail: the release as published does not say which noisy tables it fitted (Published.facts['noisy_tables'])"
    tables = np.asarray(tables)
    if getattr(backend, "keyed", False):
        if tables.shape == drawn.shape and np.array_equal(tables, drawn):
            return "pass"
        return ("fail: the release as published (one call) fitted other noisy tables than its batch branch draws with "
                "the same key: the call that publishes is not the call the audit checks")
    t = laplace_scale_upper(tables - exact, confidence)
    spent = sensitivity / t if t > 0 else math.inf
    return ("pass" if spent <= eps else f"fail: the noisy tables of the release as published (one call) spend ε ≥ "
            f"{spent:.4g} (the L1 sensitivity {sensitivity} over an upper bound {t:.4g} on their noise scale), over "
            f"the declared {eps:g}")


#: Neighbours whose synthetic files are fitted again in the replay (each fit is a RAP run; every replay pair
#: of the tables checks the fit's inputs, the published noisy counts and their total).
SYNTHETIC_REPLAY_FITS = 5


def _keyed_release(backend, release: int):
    """The backend that draws release ``release`` of the audit's key as a single release (OpenDP's: itself)."""
    return KeyedNoise(backend.seed, release) if getattr(backend, "keyed", False) else backend


def _roots(study: Study, units: list[str], wb: bool) -> list[list[str]]:
    """The audited units grouped by the root of their TopDown release (one production tree each)."""
    by_root: dict = {}
    for u in units:
        by_root.setdefault(topdown_shape(study, u, wb)[0], []).append(u)
    return list(by_root.values())


def _tree_change(halves: dict, unit: str, change) -> dict:
    out = dict(halves)
    out[unit] = change(halves[unit])
    return out


def _topdown_pairs(td, real: dict, unit: str, relation: Relation, wb: bool) -> list[tuple[str, dict]]:
    """Neighbours of the real tree's halves: replace-one moves a person of ``unit`` (of its commonest type)
    to the last block of another unit, changes a person of the commonest type to the tree's rarest type
    and one of the rarest present type to the commonest, and replaces a person by the type whose table
    cells differ most from the type in most cells; add/remove adds the type in most cells and removes a
    person of the commonest type."""
    dom = td.person_domain
    a_mat = td.strategy.tables.tocsc()
    per_type = np.diff(a_mat.indptr)
    most = int(np.argmax(per_type))
    counts = td.tree.hist[0][0]
    D = real[unit]
    _, types = _types_of(D)
    pairs = []
    if relation is Relation.ADD_REMOVE:
        pairs.append((f"a person of the type in most cells ({int(per_type[most])}) added to {unit}",
                      _tree_change(real, unit, lambda d: _add_row(d, dom, most, 0 if wb else None))))
        if len(D):
            row = int(np.argmax(np.bincount(types, minlength=dom.total_size)[types]))
            pairs.append((f"a person of {unit}'s commonest type removed", _tree_change(real, unit, lambda d: _drop_row(d, row))))
        return pairs
    if not len(D):
        return pairs
    local = np.bincount(types, minlength=dom.total_size)
    row_c = int(np.flatnonzero(types == int(np.argmax(local)))[0])
    rare, common = int(np.argmin(counts)), int(np.argmax(counts))
    pairs.append((f"a person of {unit}'s commonest type changed to the tree's rarest",
                  _tree_change(real, unit, lambda d: _with_type(d, row_c, dom, rare))))
    present = np.flatnonzero(local > 0)
    rp = int(present[np.argmin(local[present])])
    row_r = int(np.flatnonzero(types == rp)[0])
    pairs.append((f"a person of {unit}'s rarest type changed to the tree's commonest",
                  _tree_change(real, unit, lambda d: _with_type(d, row_r, dom, common))))
    others = [u for u in td.nodes if u != unit]
    shared = np.asarray((a_mat.T @ a_mat[:, most]).todense()).ravel()
    b = int(np.argmax(per_type + per_type[most] - 2 * shared))
    if others:
        target = others[-1]
        last = (len(td.nodes[target][2]) - 1) if wb else None
        moved = _tree_change(real, unit, lambda d: _drop_row(d, row_c))
        keep_type = int(types[row_c])
        moved = _tree_change(moved, target, lambda d: _add_row(d, dom, keep_type, last))
        pairs.append((f"a person moved from {unit} to {target}" + (f", block {last}" if wb else ""), moved))
        worst = _tree_change(real, unit, lambda d: _with_type(d, row_c, dom, most))
        worst2 = _tree_change(_tree_change(worst, unit, lambda d: _drop_row(d, row_c)), target,
                              lambda d: _add_row(d, dom, b, last))
        pairs.append((f"a person of the type in most cells ({int(per_type[most])}) in {unit} replaced by the type "
                      f"differing most ({int((per_type + per_type[most] - 2 * shared)[b])} cells) in {target}", worst2))
    return pairs


def _tree_neighbours(td, real: dict, relation: Relation, k: int, rng: np.random.Generator) -> list[tuple[str, dict]]:
    """``k`` random neighbours of the real tree for the replay: a person of a random unit moved to a random
    block of another unit, changed to a random type, removed or a random type added."""
    dom = td.person_domain
    units = [u for u in td.nodes if len(real[u])]
    out = []
    for i in range(k):
        u = units[int(rng.integers(len(units)))] if units else next(iter(td.nodes))
        D = real[u]
        kind = i % 3
        if not len(D) or (relation is Relation.ADD_REMOVE and kind == 1):
            t = int(rng.integers(dom.total_size))
            nb = len(td.nodes[u][2])
            blk = int(rng.integers(nb)) if nb else None
            out.append((f"a person of type {t} added to {u}", _tree_change(real, u, lambda d: _add_row(d, dom, t, blk))))
            continue
        row = int(rng.integers(len(D)))
        if relation is Relation.ADD_REMOVE and kind == 2:
            out.append((f"person {row} of {u} removed", _tree_change(real, u, lambda d: _drop_row(d, row))))
        elif kind == 0 and relation is Relation.REPLACE_ONE and len(td.nodes) > 1:
            v = [x for x in td.nodes if x != u][int(rng.integers(len(td.nodes) - 1))]
            nb = len(td.nodes[v][2])
            blk = int(rng.integers(nb)) if nb else None
            t = int(_types_of(D)[1][row])
            moved = _tree_change(_tree_change(real, u, lambda d: _drop_row(d, row)), v, lambda d: _add_row(d, dom, t, blk))
            out.append((f"person {row} moved from {u} to {v}", moved))
        else:
            t = int(rng.integers(dom.total_size))
            out.append((f"person {row} of {u} changed to type {t}", _tree_change(real, u, lambda d: _with_type(d, row, dom, t))))
    return out


def _tables_accounting(record, eps: float, sensitivity: int) -> tuple[str, dict]:
    """The Laplace tables' one measurement through :func:`_opendp_accounting` (its scale, at the tables' L1
    sensitivity as the yardstick finds it)."""
    from fractions import Fraction

    b = Budget("unit", "tables", Fraction(repr(float(eps))), int(record.sensitivity), float(record.scale))
    return _opendp_accounting([b], False, eps, lambda _: sensitivity)


def _opendp_accounting(budgets, gaussian: bool, total, sensitivity) -> tuple[str, dict]:
    """Every measurement's privacy map from OpenDP (:class:`synth.noise.OpenDPNoise`'s) at the scale it was
    drawn with and the sensitivity the audit's yardstick finds for it (``sensitivity(budget)``; never the one
    the release records): pure ε, the discrete Laplace map at that scale and L1 sensitivity; zCDP, the discrete
    Gaussian map at unit L2 distance times the squared L2 sensitivity (the map is quadratic in the distance).
    Their sum must not exceed the budget, nor may the release's own record (OpenDP's maps at the sensitivities it
    records, which must not be below the yardstick's, and must agree with its own sum)."""
    try:
        lib = OpenDPNoise()
    except PrivacyError:
        return "not run: OpenDP is not installed (pip install 'censusrecon[dp]')", {}

    def spent(b, d):
        return lib.gaussian_rho_map(b.scale, 1) * d if gaussian else lib.privacy_map(b.scale, int(d))

    ours, recorded, theirs, under = 0.0, 0.0, 0.0, []
    for b in budgets:
        d = sensitivity(b)
        if not d and not b.sensitivity:
            continue
        theirs += spent(b, d) if d else 0.0
        if b.sensitivity:
            recorded += spent(b, b.sensitivity)
            ours += float(b.spent())
        if b.sensitivity < d:
            under.append(f"{b.level}/{b.query} {b.sensitivity} < {d}")
    what = "ρ" if gaussian else "ε"
    info = {f"opendp_{'rho' if gaussian else 'epsilon'}": theirs, f"exact_{'rho' if gaussian else 'epsilon'}": ours}
    if theirs > float(total) * (1 + 1e-9):
        return (f"fail: OpenDP's privacy maps at the tables' sensitivities add up to {what} = {theirs:.6g}, over the "
                f"budget {float(total):.6g}" + (f" (the release records sensitivities below them: {', '.join(under)})"
                                                if under else "")), info
    if under:
        return f"fail: the release records sensitivities below the tables': {', '.join(under)}", info
    if recorded > float(total) * (1 + 1e-9):  # its own ledger over the budget, whatever the tables' sensitivities
        return (f"fail: the release's own record spends {what} = {recorded:.6g} by OpenDP's maps, over the budget "
                f"{float(total):.6g} that ε = the declared one allows"), info
    if abs(recorded - ours) > 1e-6 * max(ours, 1e-12):
        return f"fail: OpenDP's maps give {what} = {recorded:.6g} for the release's record, its own sum {ours:.6g}", info
    return "pass", info


def shape_subsample(draws: np.ndarray, rng: np.random.Generator, cap: int = 200_000) -> np.ndarray:
    """At most ``cap`` of one release's noise draws for the shape test, drawn WITHOUT replacement: a draw
    taken twice counts twice in the chi-square's bins, which then vary about twice as much as the test
    assumes when the release has barely more than ``cap`` draws (a level of 7 block groups x 29,232 types:
    correct discrete Laplace noise failed at p = 4e-11, 2026-12-03)."""
    flat = np.asarray(draws).ravel()
    return flat if flat.size <= cap else flat[rng.choice(flat.size, cap, replace=False)]


def _audit_topdown_root(study: Study, mech: str, units: list[str], wb: bool, eps: float, seed: int,
                        cache: dict) -> AuditResult:
    """TopDown on its production tree (every level, every node), on the real data of every unit under the
    root: the bound over real pairs (the cells they touch, drawn by the publishing function with the
    production key schedule), the whole-release checks, the OpenDP accounting, the replay over many pairs
    and draws, the structure."""
    cfg = study.cfg
    a = cfg.release.audit
    relation = parse_relation(cfg.release.relation)
    gaussian = cfg.release.topdown.accounting == "zcdp"
    key = ("topdown", units[0], wb)
    if key not in cache:  # the real tree, its pairs and replay neighbours: the same at every ε
        td = topdown_root(study, units[0], wb)
        real = {u: study.private_half(u, wb) for u in td.nodes}
        cache[key] = {"td": td, "real": real}
    td, real = cache[key]["td"], cache[key]["real"]
    n_levels = len(td.shape.levels)

    def tree_of(halves):
        return dataclasses.replace(td, tree=topdown_tree(cfg, td.shape, td.nodes, halves, td.strategy, td.person_domain))

    def exact_of(t):
        return {(li, q): (h if q == "detailed" else t.strategy.tabulate(h)) for li, h in enumerate(t.tree.hist)
                for q in QUERIES}

    if "pairs" not in cache[key]:
        cache[key]["exact"] = exact_of(td)
        cache[key]["pairs"] = [(what, tree_of(h)) for what, h in _topdown_pairs(td, real, units[0], relation, wb)]
        cache[key]["pair_exact"] = [exact_of(t2) for _, t2 in cache[key]["pairs"]]
        rng_n = np.random.default_rng(stable_seed("audit-replay", seed, td.root))
        cache[key]["neighbours"] = [(what, tree_of(h)) for what, h in
                                    _tree_neighbours(td, real, relation, a.replay_pairs, rng_n)]
        names, total = list(real), sum(len(D) for D in real.values())
        for i in range(a.replay_far):  # whole trees far from the real one, the root's total kept (all else random)
            sizes = rng_n.multinomial(total, np.full(len(names), 1 / len(names)))
            far = {u: _far_datasets(real[u], 1, rng_n, blocks=len(td.nodes[u][2]), n=int(m))[0][1]
                   for u, m in zip(names, sizes)}
            cache[key]["neighbours"].append((f"a tree far from the real one ({i + 1}: its {total} persons drawn at "
                                             "random into its units and blocks)", tree_of(far)))
    exact, pairs = cache[key]["exact"], cache[key]["pairs"]
    bound, backend = _bound_noise(seed, "topdown", td.root, wb, eps), _noise(cfg, seed, "topdown", td.root, wb, eps)
    pair_conf = 1 - (1 - a.confidence) / max(len(pairs), 1)
    bounds = []
    for i, (what, t2) in enumerate(pairs):
        e2 = cache[key]["pair_exact"][i]
        cells = {k: np.flatnonzero((e2[k] != exact[k]).ravel()) for k in exact}
        keys = [k for k in exact if cells[k].size]
        if not keys:
            continue
        r1 = range(2 * i * a.runs, (2 * i + 1) * a.runs)
        r2 = range((2 * i + 1) * a.runs, (2 * i + 2) * a.runs)
        ys = []
        for tree, rr in ((td, r1), (t2, r2)):
            m = publish_topdown(cfg, tree, eps, bound, runs=rr, cells=cells).measurements
            ys.append(np.concatenate([(m.detailed if q == "detailed" else m.tables)[li] for li, q in keys], axis=1))
        ref1 = np.concatenate([exact[k].ravel()[cells[k]] for k in keys])
        ref2 = np.concatenate([e2[k].ravel()[cells[k]] for k in keys])
        res = audit_outputs(ys[0], ys[1], ref1, ref2 - ref1, eps, mech, pair_conf)
        bounds.append((res.epsilon_lower_bound, f"{what}: {res.event}", int(ref1.size), what))
    # whole production releases
    start = 2 * len(pairs) * a.runs
    groups = NoiseGroups()
    rng = np.random.default_rng(stable_seed("audit-sample", seed, td.root))
    samples: dict = {k: [] for k in exact}
    tails: dict = {}
    pick = {}
    for (li, q), ex in exact.items():
        nodes = ex.shape[0]
        cs = rng.choice(ex.shape[1], size=min(300, ex.shape[1]), replace=False)
        ns = sorted({0, min(1, nodes - 1), nodes - 1})
        pick[(li, q)] = (np.array([n * ex.shape[1] + c for n in ns for c in cs]), np.array([f"{q}:{c}" for n in ns for c in cs]))
    indep, recorded = [], []
    bands = {k: _band_groups(ex) for k, ex in exact.items()}
    for r in range(a.whole_releases):
        # the single-release call that publishes (its estimation run only for the releases the replay uses)
        m = publish_topdown(cfg, td, eps, _keyed_release(backend, start + r), estimate=r < a.replay_draws).measurements
        row = []
        for (li, q), ex in exact.items():
            y = (m.detailed if q == "detailed" else m.tables)[li]
            x = y - ex
            for node in range(ex.shape[0]):
                groups.add(((li, q), f"node {td.shape.ids[li][node]}"), x[node])
            for g, sel in bands[(li, q)].items():
                groups.add(((li, q), g), x[sel])
            if sum(len(v) for v in samples[(li, q)]) < 1_000_000:
                samples[(li, q)].append(shape_subsample(x, rng))
            tails.setdefault((li, q), []).append(_tail_stats(x, gaussian))
            row.append(x.ravel()[pick[(li, q)][0]])
        indep.append(np.concatenate(row))
        if r < a.replay_draws:
            recorded.append(m)
    # the yardstick: each level's sensitivities from the relation and the tables' definitions over the person
    # domain (never the release's strategy matrix or budgets), and the ρ an (ε, δ) release may spend
    if "sensitivity" not in cache[key]:
        pw = build_workload(cfg, cfg.published, td.person_domain)
        cache[key]["sensitivity"] = [
            node_table_sensitivity(pw, td.person_domain.decode(np.flatnonzero(td.tree.hist[li].sum(axis=0) > 0)),
                                   cfg.release.relation, len(td.shape.ids[li])) for li in range(n_levels)]
    level_sens = cache[key]["sensitivity"]
    sens = {(li, q): detailed_sensitivity(cfg.release.relation) if q == "detailed" else level_sens[li].l1
            for li in range(n_levels) for q in QUERIES}
    delta = cfg.release.topdown.delta
    budget = zcdp_rho(eps, delta) if gaussian else eps
    shape_p = {k: (gaussian_shape_pvalue(np.concatenate(v)) if gaussian else laplace_shape_pvalue(np.concatenate(v)))
               for k, v in samples.items()}
    tail_p = {k: _tail_from_stats(v, gaussian) for k, v in tails.items()}
    checks, info = _whole_checks(cfg, eps, groups.sums, np.zeros(0, np.int64), [], np.array(indep), sens, gaussian,
                                 budget)
    nm = len(exact)
    worst_s, worst_t = min(shape_p, key=shape_p.get), min(tail_p, key=tail_p.get)
    lvl = lambda k: f"{td.shape.levels[k[0]]}/{k[1]}"  # noqa: E731
    family = "Gaussian" if gaussian else "Laplace"
    checks["noise_shape"] = ("pass" if shape_p[worst_s] >= (1 - a.confidence) / nm else
                             f"fail: the noise added at {lvl(worst_s)} is not discrete {family} (chi-square over its "
                             f"whole range, p = {shape_p[worst_s]:.2g})")
    checks["noise_tail"] = ("pass" if tail_p[worst_t] >= (1 - a.confidence) / nm else
                            f"fail: the noise added at {lvl(worst_t)} has too few draws in its far tail for discrete "
                            f"{family} noise (p = {tail_p[worst_t]:.2g}): it is cut off")
    info.update(noise_shape_p_value={lvl(k): v for k, v in shape_p.items()},
                noise_tail_p_value={lvl(k): v for k, v in tail_p.items()})
    # accounting by the library
    meas = recorded[0]
    checks["accounting"], acc = _opendp_accounting(
        meas.budgets, gaussian, budget,
        lambda b: sens[(td.shape.levels.index(b.level), "detailed" if b.query == "detailed" else "tables")])
    info.update(acc)
    info["sensitivity"] = {td.shape.levels[li]: dict(s.as_dict(), detailed=detailed_sensitivity(cfg.release.relation))
                           for li, s in enumerate(level_sens)}
    if gaussian:  # the declared conversion, checked by OpenDP's own map
        e_map = opendp_epsilon(budget, delta)
        info["conversion"] = {"rho": budget, "delta": delta, "opendp_epsilon": e_map}
        checks["conversion"] = ("pass" if e_map <= eps * (1 + 1e-12) else
                                f"fail: ρ = {budget:.6g} is ({e_map:.6g}, {delta:g})-DP by OpenDP's map, over ε = {eps:g}")
    # replay: recorded releases, many neighbours of the real tree
    checks["post_processing"] = _topdown_replay(cfg, eps, td, cache[key]["neighbours"], recorded)
    if "structure" not in cache[key]:  # releases at the smallest ε of the grid: one check for every ε
        cache[key]["structure"] = _topdown_structure(study, units[0], wb, td.nodes)
    checks["structure"] = cache[key]["structure"]
    if "root_total" in cfg.release.invariants:
        info["not_audited"] = "the root's total: a declared invariant under replace-one (release.invariants)"
    best = max(bounds, default=(0.0, "none", 0, ""))
    info.update(root=td.root, tree_nodes=[len(i) for i in td.shape.ids], neighbours=[w for w, _ in pairs],
                bound_per_pair={b[3]: round(b[0], 6) for b in bounds}, audited_on="the production tree, every level "
                "and node, on the real private halves of every unit under the root")
    return AuditResult(mech, eps, best[0], a.runs, a.confidence, best[1], checks, info)


def _topdown_replay(cfg: ExperimentConfig, eps: float, td, neighbours: list, recorded: list) -> str:
    """Each recorded release's measurements replayed for the real tree and for many neighbours of it
    (``neighbours``: (what, tree)): the estimates (the MDF) must be identical."""
    for m in recorded:
        values = []
        for li in range(len(m.detailed)):
            values += [m.detailed[li], m.tables[li]]
        try:
            e1 = publish_topdown(cfg, td, eps, ReplaySequence(values)).estimates
        except PrivacyError as e:
            return f"fail: {e}"
        for what, tree2 in neighbours:
            try:
                e2 = publish_topdown(cfg, tree2, eps, ReplaySequence(values)).estimates
            except PrivacyError as e:
                return f"fail: {e} ({what})"
            if len(e1) != len(e2) or any(not np.array_equal(x, y) for x, y in zip(e1, e2)):
                return ("fail: with the same noisy measurements, the neighbours' MDFs differ "
                        f"({what}): the estimation reads the data beyond its measurements")
    return "pass"


def _tail_stats(x: np.ndarray, gaussian: bool) -> tuple:
    """One release's noise of one measurement for the far-tail test: (n, Σ|x|, Σx², the |x| of its largest
    draws): enough to count, after all releases, the draws beyond the threshold the fitted law sets."""
    a = np.abs(np.asarray(x, dtype=np.int64)).ravel()
    top = np.partition(a, a.size - 200)[-200:] if a.size > 200 else a  # the largest 200, in no order: only counted
    af = a.astype(np.float64)
    return a.size, float(a.sum()), float(af @ af), top


def _tail_from_stats(stats: list, gaussian: bool, expected: float = 30.0) -> float:
    """:func:`synth.audit.statistics.tail_pvalue` over releases summarised by :func:`_tail_stats` (each keeps its 200
    largest |x|, more than the threshold's expected count per release)."""
    from scipy.stats import poisson

    n = sum(s[0] for s in stats)
    t = tail_threshold(n, sum(s[1] for s in stats) / max(n, 1), sum(s[2] for s in stats) / max(n, 1), gaussian,
                       expected)
    if t is None:
        return 1.0
    k, p_tail = t
    return float(poisson.cdf(sum(int((s[3] >= k).sum()) for s in stats), n * p_tail))


# ---- programs made outside censusrecon: the black-box audit ------------------------------------------


def audit_program(study: Study, spec: ReleaseProgramConfig, unit: str, wb: bool, eps: float, seed: int,
                  cache: dict, *, index: int = 0):
    """The black-box audit of a program at ``eps`` on ``unit``'s own D: ``runs`` whole releases of D and
    of each real neighbour of it (:func:`experiments.release.audit._real_pairs`: a person moved between
    blocks of different areas, changed to the rarest and the commonest type, the type in most cells;
    added and removed under add/remove), every batch with a fresh seed from the audit's; the
    statistical bound over the cells each pair moves (the mean of a cell's published copies; events on
    single outputs and on a discriminant fitted on half the releases). With the program's declared
    noise family, the checks from output minus truth over every published copy: the ε its noise
    spends per pair (each cell's scale bounded above from its own draws), the shape and far tail per
    table, and independence across cells and releases. ``index``: the unit's place in the audit's list. A
    synthesizer audited by its spending ledger (``spec.spending``) has its ledger checked on every unit, and
    whole releases (D and its canary neighbour, the worst case for a synthesizer: each is a fit) drawn only on the first
    ``spending.whole_units``; a program called in batches has its releases one per call (the call shape) drawn
    on the first ``single_units`` (default every unit)."""
    cfg = study.cfg
    a = cfg.release.audit
    runs = spec.audit_runs or a.runs
    mech = PROGRAM_PREFIX + spec.name
    if spec.spending is not None and index >= spec.spending.whole_units:
        return _audit_ledger_only(study, spec, unit, wb, eps, seed, cache)
    shape_here = spec.single_units is None or index < spec.single_units
    _, _, _, exact, pairs, pair_counts, _ = _unit_instance(study, unit, wb, cache)
    layout, inputs, pair_inputs = _program_instance(study, unit, wb, cache)
    y1_rows = program_draws(cfg, spec, inputs, eps, runs, (seed, unit, wb, eps, "D"))
    y1 = layout.to_queries(y1_rows)
    pair_conf = 1 - (1 - a.confidence) / max(len(pairs), 1)
    row_query = layout.rows["query"].to_numpy()
    noise = y1_rows - exact[row_query][None, :]
    single = single_rows = None
    one_per_call = spec if spec.calls == "single" else spec.model_copy(update={"calls": "single"})
    if spec.calls == "batch":  # the shape publication uses, beside the batches the audit's power comes from (one
        # release only where the call shape is drawn on other units: the seed check's first call)
        single_rows = program_draws(cfg, one_per_call, inputs, eps, spec.single_runs if shape_here else 1,
                                    (seed, unit, wb, eps, "single"))
        single = single_rows - exact[row_query][None, :] if shape_here else None
    checks: dict = {}
    bounds, spent, every_noise = [], [], [noise] + ([single] if single is not None else [])
    # whole releases of each real neighbour; of a synthesizer audited by its ledger (each release a fit), of its
    # worst-case neighbour alone: a canary record in a region of the domain D leaves empty
    whole = ([_canary_instance(study, unit, wb, cache)] if spec.spending is not None else
             [(what, pair_counts[i], pair_inputs[i], i) for i, (what, _) in enumerate(pairs)])
    for what, c2, inputs2, key in whole:
        idx = np.flatnonzero(c2 - exact)
        if not idx.size:
            continue
        y2_rows = program_draws(cfg, spec, inputs2, eps, runs, (seed, unit, wb, eps, key))
        every_noise.append(y2_rows - c2[row_query][None, :])
        y2 = layout.to_queries(y2_rows)
        res = audit_outputs(y1[:, idx], y2[:, idx], exact[idx], (c2 - exact)[idx], eps, mech, pair_conf)
        bounds.append((res.epsilon_lower_bound, f"{what}: {res.event}", int(idx.size)))
        if spec.noise is not None:  # every published copy of every moved cell, its own scale bounded above
            moved = np.flatnonzero(np.isin(row_query, idx))
            distance = np.abs(c2 - exact)[row_query[moved]]
            for shape, x in (("", noise), (" (the releases drawn one per call)", single)):
                if x is not None:
                    e = (gaussian_rho_spent(x[:, moved], distance, pair_conf) if spec.noise == "gaussian" else
                         noise_epsilon(x[:, moved], distance, pair_conf)[0])
                    spent.append((e, what + shape))
    info: dict = {"program_calls": (f"{runs} releases per call (a batch), and {spec.single_runs} of D one per call"
                                    if single is not None else f"one release per call, {runs} calls per input")}
    checks["noise_repeats"], info["noise_repeats"] = _repeats_check(every_noise, a.confidence)
    # the same seed twice, jointly: a program whose noise is a function of its seed is fine only while the seed
    # it is given stays secret; one drawing from secure randomness (OpenDP, Tumult) never repeats
    first = y1_rows[0] if single_rows is None else single_rows[0]  # the first call: drawn again with its seed
    again = program_draws(cfg, one_per_call, inputs, eps, 1,
                          (seed, unit, wb, eps, "D" if single_rows is None else "single"))[0]
    checks["seed_use"] = ("declared: its noise is a function of the seed it is given (two calls with the same seed "
                          "gave the same release): evaluate-release gives it a secret one when it publishes (the "
                          "operating system's randomness, written nowhere), and so must whoever publishes with it"
                          if np.array_equal(again, first) else
                          "not applicable: two calls with the same seed gave different releases (fresh randomness)")
    if spec.calls == "batch" and not shape_here:
        checks["call_shape"] = (f"not applicable: its releases one per call were drawn on the first {spec.single_units} "
                                "unit(s) of the audit (release.programs[].single_units)")
    elif single is not None:
        checks["call_shape"], info["call_shape_p_value"] = _call_shape_check(noise, single, a.confidence,
                                                                               spec.single_runs)
    else:
        checks["call_shape"] = ("not applicable: every release the audit drew came from a call of its own with a seed "
                                "of its own, as publication calls the program")
    # without a declared noise family there is no law to check the noise against: the bound alone decides, and
    # where its releases are too few to certify the declared ε the audit is inconclusive (bound_power below)
    if spec.noise is None:
        for k in ("noise_scale", "noise_shape", "noise_tail", "noise_independence"):
            checks[k] = "not applicable: the program declares no noise family (release.programs[].noise)"
    else:
        gaussian = spec.noise == "gaussian"
        family = "Gaussian" if gaussian else "Laplace"
        if not np.allclose(noise, np.rint(noise)):
            checks["noise_shape"] = (f"fail: the program declares discrete {family} noise on counts, but its outputs "
                                     "are not integers")
        worst = max(spent, default=(0.0, "none"))
        if gaussian:  # ρ from the declared (ε, δ) by OpenDP's conversion, never the program's own figure
            budget, what = opendp_rho(eps, spec.delta_of()), "ρ"
            info.update(rho_from_noise_scale=round(worst[0], 8), rho_declared=round(budget, 8), delta=spec.delta_of())
            how = "each moved cell's change² over twice an upper bound on its noise variance, summed"
            declared = f"ρ = {budget:.4g} that ε = {eps:g}, δ = {spec.delta_of():g} allows (OpenDP's conversion)"
        else:
            budget, what = eps, "ε"
            info["epsilon_from_noise_scale"] = round(worst[0], 6)
            how = "each moved cell's change over an upper bound on its noise scale, summed"
            declared = f"declared {eps:g}"
        checks["noise_scale"] = ("pass" if worst[0] <= budget else
                                 f"fail: the noise added spends {what} ≥ {worst[0]:.4g} on {worst[1]} ({how}), over "
                                 f"the {declared}")
        tables = layout.rows["table"].to_numpy()
        level = 1 - (1 - a.confidence) / max(len(set(tables)), 1)
        if "noise_shape" not in checks:
            shape = gaussian_shape_pvalue if gaussian else laplace_shape_pvalue
            p_shape = min(shape(np.rint(noise[:, tables == t])) for t in set(tables))
            checks["noise_shape"] = ("pass" if p_shape >= 1 - level else
                                     f"fail: the noise added is not discrete {family} (p = {p_shape:.2g})")
            info["noise_shape_p_value"] = p_shape
        p_tail = min(tail_pvalue(noise[:, tables == t], gaussian) for t in set(tables))
        checks["noise_tail"] = ("pass" if p_tail >= 1 - level else
                                f"fail: the noise added has too few draws in its far tail for discrete {family} noise "
                                f"(p = {p_tail:.2g}): cut off")
        info["noise_tail_p_value"] = p_tail
    if spec.noise is not None:
        rng = np.random.default_rng(program_seed(seed, "columns", unit))
        cols = rng.permutation(noise.shape[1])[:INDEPENDENCE_COLUMNS]
        p_ind, where = independence_pvalue(noise[:, np.sort(cols)])
        checks["noise_independence"] = ("pass" if p_ind >= 1 - a.confidence else
                                        f"fail: the noise is not independent across cells or releases ({where}: "
                                        f"p = {p_ind:.2g})")
        info["independence_p_value"] = p_ind
    if spec.spending is not None:
        spending_checks, spending_info = _ledger_checks(cfg, spec, inputs, eps, (seed, unit, wb, eps))
        checks.update(spending_checks)
        info.update(spending_info, whole_releases=f"of D and of its worst-case neighbour ({whole[0][0]})")
    if spec.measurements is not None:
        stage_bounds, checks["measurements_scale"], stage_info = _audit_first_measurements(
            cfg, spec, inputs, pair_inputs, pairs, eps, (seed, unit, wb), pair_conf, mech)
        bounds += stage_bounds
        info.update(stage_info)
        checks["post_processing"] = ("not applicable: the steps after its first measurements (selecting marginals, "
                                     "fitting the model, sampling) show only in its whole releases' bound")
    else:
        checks["post_processing"] = ("not applicable: a black box shows its outputs only, not the measurements it "
                                     "post-processes; its outputs are what the bound and the noise checks test")
    if spec.spending is not None:
        checks["post_processing"] = LEDGER_POST_PROCESSING
    reach = bound_reach(runs, pair_conf)
    info["bound_reach"] = round(reach, 4)
    if reach < eps:
        reach_words = f"at most ε ≈ {reach:.2f}" if reach > 0 else "no ε at all"
        needed = runs_to_certify(eps, pair_conf)
        info["runs_to_certify"] = needed
        said = (f"with {runs} releases per neighbour the bound certifies {reach_words}, below the declared {eps:g}")
        if spec.spending is not None:
            checks["bound_power"] = (f"not applicable: {said}; its spending ledger, which was checked, bounds what "
                                     "every step that reads the data spends")
        elif spec.noise is not None:
            checks["bound_power"] = (f"not applicable: {said}; the noise checks, which ran, bound what the noise "
                                     "spends")
        else:
            checks["bound_power"] = (f"not run: {said}, and no check of its noise stands in "
                                     + ("(its first measurements' are only its first step)" if spec.measurements else
                                        "(declare its noise family: release.programs[].noise)")
                                     + f"; {needed:,} releases per neighbour would certify it")
    best = max(bounds, default=(0.0, "none", 0))
    details = dict(info, unit=unit, neighbours=[w for w, _ in pairs], differing_cells=[b[2] for b in bounds],
                   audited_on="the unit's own D, the program's whole releases (a black box)", program_runs=runs)
    return AuditResult(mech, eps, best[0], runs, a.confidence, best[1], checks, details)


#: the post-processing check's line for a synthesizer audited by its spending ledger
LEDGER_POST_PROCESSING = ("not applicable: what follows its recorded measurements and selections (the model's "
                          "estimation, the sampling) is the library's post-processing of them")


def _ledger_checks(cfg: ExperimentConfig, spec: ReleaseProgramConfig, inputs: tuple, eps: float,
                   where: tuple) -> tuple[dict, dict]:
    """The synthesizer's spending ledger from ``spending.runs`` fits of the unit's D, checked
    (:func:`synth.audit.spending.check_spending`); its figures prefixed ``spending_``."""
    stage = spec.model_copy(update={"params": {**spec.params, **spec.spending.params}})
    ledger = run_program(cfg, stage, inputs, eps, spec.spending.runs, program_seed(*where, "spending"),
                         width=WIDTH)
    checks, info = check_spending(ledger, eps, spec.spending.delta, cfg.release.audit.confidence)
    return checks, {"spending_" + k: v for k, v in info.items()}


def _audit_ledger_only(study: Study, spec: ReleaseProgramConfig, unit: str, wb: bool, eps: float, seed: int,
                       cache: dict) -> AuditResult:
    """A unit past ``spending.whole_units``: the synthesizer's ledger on the unit's own D, no whole release."""
    _, inputs, _ = _program_instance(study, unit, wb, cache)
    checks, info = _ledger_checks(study.cfg, spec, inputs, eps, (seed, unit, wb, eps))
    checks["post_processing"] = LEDGER_POST_PROCESSING
    details = dict(info, unit=unit, program_runs=0, audited_on="the unit's own D, the synthesizer's recorded steps",
                   whole_releases="none on this unit (release.programs[].spending.whole_units): its ledger stands in")
    return AuditResult(PROGRAM_PREFIX + spec.name, eps, 0.0, 0, study.cfg.release.audit.confidence,
                       "none: no whole release of this unit", checks, details)


def _canary_instance(study: Study, unit: str, wb: bool, cache: dict) -> tuple:
    """The unit's canary neighbour (:func:`canary_neighbour`): what it is, its published cells' true counts, the
    contract's inputs for it and the key of its draws; the same at every ε."""
    key = ("canary", unit, wb)
    if key not in cache:
        D, areas, workload, *_ = _unit_instance(study, unit, wb, cache)
        layout = _program_instance(study, unit, wb, cache)[0]  # the unit's published cells, laid out once
        what, D2 = canary_neighbour(D, parse_relation(study.cfg.release.relation))
        blocks = study.blocks(unit)[0] if wb else None
        cache[key] = (what, workload_counts(D2, workload), program_inputs(D2, unit, layout, blocks, areas), "canary")
    return cache[key]


def program_draws(cfg: ExperimentConfig, spec: ReleaseProgramConfig, inputs: tuple, eps: float, runs: int,
                  where: tuple) -> np.ndarray:
    """``runs`` releases of the program on ``inputs`` in the shape its ``calls`` declares: one call per release
    (single, as publication calls it), each with its own seed from ``where`` and its number; or one call
    for all of them (batch), with one seed."""
    if spec.calls == "single":
        return np.vstack([run_program(cfg, spec, inputs, eps, 1, program_seed(*where, "call", k)) for k in range(runs)])
    return run_program(cfg, spec, inputs, eps, runs, program_seed(*where))


def repeats_pvalue(rows: np.ndarray) -> tuple[int, float, float]:
    """Pairs of identical rows among ``rows`` (one release's noise a row) and the chance of at least that
    many if the rows were independent: Poisson with mean C(n, 2) × Π_cells q, q a cell's chance that two
    releases agree on it, from the distinct rows (repeats would make it look certain). (pairs, expected,
    p-value).

    >>> rng = np.random.default_rng(0); fresh = rng.integers(-3, 4, (200, 40))
    >>> repeats_pvalue(fresh)[0], repeats_pvalue(np.vstack([fresh, fresh[:5]]))[2] < 1e-6
    (0, True)
    """
    from scipy.stats import poisson

    rows = np.asarray(rows)
    n = len(rows)
    distinct, counts = np.unique(rows, axis=0, return_counts=True)
    pairs = int((counts * (counts - 1) // 2).sum())
    if pairs == 0:
        return 0, 0.0, 1.0
    if len(distinct) < 2:
        return pairs, 0.0, 0.0  # every release the same
    log_q = 0.0
    for j in range(distinct.shape[1]):
        _, c = np.unique(distinct[:, j], return_counts=True)
        log_q += math.log(float(((c / len(distinct)) ** 2).sum()))
    expected = n * (n - 1) / 2 * math.exp(log_q)
    return pairs, expected, float(poisson.sf(pairs - 1, expected))


def _repeats_check(noises: list, confidence: float) -> tuple[str, dict]:
    """Releases drawn by separate calls with different seeds, of D and of its neighbours (each release's
    output minus its own input's truth), must not repeat: noise that comes back is noise an attacker
    can subtract (a seed written in the program, the contract's seed ignored: ε = ∞)."""
    rows = np.vstack([np.asarray(x, dtype=np.float64) for x in noises])
    pairs, expected, p = repeats_pvalue(rows)
    info = {"releases": int(len(rows)), "identical_pairs": pairs, "expected_by_chance": expected, "p_value": p}
    if p >= 1 - confidence:
        return "pass", info
    return (f"fail: {pairs:,} pairs of the {len(rows):,} releases drawn with different seeds (of D and its neighbours) "
            f"have the same noise in every cell, {expected:.2g} expected by chance (p = {p:.2g}): the noise does not "
            "come fresh from each call's seed, so it can be subtracted (ε = ∞)"), info


def _call_shape_check(batch: np.ndarray, single: np.ndarray, confidence: float, runs: int) -> tuple[str, float]:
    """The releases drawn one per call (as published) against those drawn in batches: each release's mean
    |noise| and mean noise over its cells, compared by a two-sample Kolmogorov–Smirnov test (releases are
    independent; cells within one need not be), Bonferroni over the two."""
    from scipy.stats import ks_2samp

    p = min(1.0, 2 * min(ks_2samp(np.abs(batch).mean(axis=1), np.abs(single).mean(axis=1)).pvalue,
                         ks_2samp(batch.mean(axis=1), single.mean(axis=1)).pvalue))
    if p >= 1 - confidence:
        return "pass", p
    return (f"fail: its {runs} releases drawn one per call, as published, do not have the noise of its batches "
            f"(mean |noise| {np.abs(single).mean():.3g} one per call, {np.abs(batch).mean():.3g} in batches; "
            f"p = {p:.2g}): the program behaves differently when asked for one release"), p


def runs_to_certify(eps: float, confidence: float) -> int:
    """The fewest releases per neighbour whose statistical bound can certify ``eps``
    (:func:`bound_reach` ≥ ``eps``).

    >>> r = runs_to_certify(2.0, 0.99); bound_reach(r, 0.99) >= 2.0 > bound_reach(r - 2, 0.99)
    True
    """
    alpha = (1 - confidence) / 2  # bound_reach: m certifying releases reach ln(x / (1 − x)), x = alpha^(1/m)
    m = max(1, math.ceil(math.log(alpha) / -math.log1p(math.exp(-eps))))
    for _ in range(8):  # the closed form, checked against bound_reach itself (rounding at the edge)
        if bound_reach(2 * m, confidence) < eps:
            m += 1
        elif m > 1 and bound_reach(2 * (m - 1), confidence) >= eps:
            m -= 1
        else:
            break
    return 2 * m


def _program_instance(study: Study, unit: str, wb: bool, cache: dict) -> tuple:
    """The contract's inputs for the unit's D and for each of its real neighbours (the pairs of
    :func:`_unit_instance`), with the layout of the published cells: the same at every ε and for every
    program."""
    key = ("program", unit, wb)
    if key not in cache:
        D, areas, _, _, pairs, _, _ = _unit_instance(study, unit, wb, cache)
        layout = unit_layout(study, unit, wb)
        blocks = study.blocks(unit)[0] if wb else None
        cache[key] = layout, [program_inputs(d, unit, layout, blocks, areas) for d in [D] + [d2 for _, d2 in pairs]]
    layout, (inputs, *pair_inputs) = cache[key]
    return layout, inputs, pair_inputs


def _audit_first_measurements(cfg: ExperimentConfig, spec: ReleaseProgramConfig, inputs: tuple, pair_inputs: list,
                              pairs: list, eps: float, where: tuple, confidence: float, mech: str
                              ) -> tuple[list, str, dict]:
    """A program's first measurements (``spec.measurements``: a synthesizer's Gaussian one-way marginals),
    ``runs`` per neighbour: the statistical bound over the one-way cells each pair moves, and the zCDP ρ
    their noise spends per pair (each moved cell's σ bounded above from its own draws, so ρ below)
    against the share of the declared ρ the program's design gives them."""
    m = spec.measurements
    stage = spec.model_copy(update={"params": {**spec.params, **m.params}})
    base, truth = one_way_inputs(inputs)
    y1 = run_program(cfg, stage, base, eps, m.runs, program_seed(*where, eps, "measurements", "D"))
    declared = m.share * opendp_rho(eps, m.delta)
    bounds, spent = [], []
    for i, (what, _) in enumerate(pairs):
        other, truth2 = one_way_inputs(pair_inputs[i])
        idx = np.flatnonzero(truth2 - truth)
        if not idx.size:
            continue
        y2 = run_program(cfg, stage, other, eps, m.runs, program_seed(*where, eps, "measurements", i))
        res = audit_outputs(y1[:, idx], y2[:, idx], truth[idx], (truth2 - truth)[idx], eps, mech, confidence)
        bounds.append((res.epsilon_lower_bound, f"first measurements, {what}: {res.event}", int(idx.size)))
        noise = np.vstack([y1[:, idx] - truth[idx], y2[:, idx] - truth2[idx]])
        spent.append((gaussian_rho_spent(noise, np.abs(truth2 - truth)[idx], confidence), what))
    worst = max(spent, default=(0.0, "none"))
    check = ("pass" if worst[0] <= declared else
             f"fail: its first measurements' noise spends ρ ≥ {worst[0]:.4g} on {worst[1]} (each moved one-way cell's "
             f"change² over twice an upper bound on its noise variance, summed), over the {m.share:.4g} of ρ = "
             f"{declared / m.share:.4g} (ε {eps:g}, δ {m.delta:g}) its design gives them")
    info = {"measurements_runs": m.runs, "measurements_rho_declared": round(declared, 8),
            "measurements_rho_from_noise_scale": round(worst[0], 8),
            "measurements_bound_reach": round(bound_reach(m.runs, confidence), 4)}
    return bounds, check, info


def bound_reach(runs: int, confidence: float) -> float:
    """The largest ε the statistical bound can certify from ``runs`` releases per neighbour (half of them
    certify): an event seen in every certifying release of one neighbour and in none of the other's.

    >>> round(bound_reach(300, 0.99), 2), round(bound_reach(50_000, 0.99), 2), bound_reach(10, 0.95)
    (3.33, 8.46, 0.0)
    """
    m = runs - runs // 2
    alpha = (1 - confidence) / 2
    lo, _ = clopper_pearson(np.array([m]), m, alpha)
    _, hi = clopper_pearson(np.array([0]), m, alpha)
    return max(0.0, float(np.log(lo[0] / hi[0])))  # 0: too few releases to certify anything
