"""The audit run from a study: the door it is given (:class:`StudySource`), its jobs here or on Ray, its progress.

The audit itself lives in its own room, :mod:`censusrecon.synth.audit` (its families, neighbours, checks, jobs and
timing), which imports nothing of ``experiments``: this module resolves the config, hands the audit the functions
that publish (through :class:`StudySource`), and runs its jobs in turn or as Ray tasks.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
from pathlib import Path

from censusrecon.experiments.config import ConfigError, parse_config
from censusrecon.experiments.problem import Study, build_workload, resolve, unit_key
from censusrecon.experiments.progress import UnitProgress
from censusrecon.experiments.release.files import unit_layout
from censusrecon.synth.program_host import one_way_inputs, program_inputs, run_program, stop_workers
from censusrecon.synth.publishing import Draw
from censusrecon.synth.release_path import ReleaseSpec, publish
from censusrecon.synth.topdown_release import publish_topdown, topdown_root, topdown_shape, topdown_tree
from censusrecon.experiments.results import RayTasks, check_backend, on_ray
from censusrecon.synth.audit.jobs import AuditPlan, audit_job, audit_level, unit_roles
from censusrecon.synth.audit.source import AuditSpec
from censusrecon.synth.audit.statistics import AuditResult
from censusrecon.synth.audit.timing import task_order, timing_key, expected_finish, expected_time, last_timing, shipped_timing

log = logging.getLogger(__name__)


def check_canary(study: Study) -> None:
    """``release.audit.canary`` checked against the audited data's domain: a one-line error naming what is outside."""
    from censusrecon.synth.audit.neighbours import canary_codes

    try:
        canary_codes(study.pop.domain.project(study.attributes), study.cfg.release.audit.canary)
    except ValueError as e:
        raise ConfigError(str(e)) from None


def audit_release(study: Study, units: list[str] | None = None, progress: bool = False,
                  seed: int | None = None, backend: str | None = None, address: str | None = None,
                  history: Path | None = None) -> list[AuditResult]:
    """Audit every configured mechanism at every audited ε of the config through the functions that publish, each
    by its audit family (:mod:`synth.audit.families`), given to the audit through :class:`StudySource`
    (:func:`synth.release_path.publish`, :func:`synth.topdown_release.publish_topdown`), on
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
    check_canary(study)  # a named canary outside the domain: one line now, not an error an hour in
    spec = AuditSpec.of(cfg)  # the DP mechanisms (swapping is not DP: no ε to audit) and programs (black boxes)
    if units is None:
        roles = unit_roles(StudySource(study, spec), study.units, seed)
        units = list(roles)
    else:
        roles = {u: "given" for u in units}
    shipped = shipped_timing(cfg)  # the config as given: the digest a record names
    spec = audit_level(spec, len(units))  # the audit's settings, its tests at the audit's level
    per_job = len(spec.names)
    jobs = [(wb, eps) for wb in spec.with_block for eps in spec.audited_epsilons]
    cpus = (cfg.sweep.num_cpus or os.cpu_count() or 1) if backend == "ray" and address is None else 1
    timed = last_timing(history, task_order(spec, jobs), units, shipped)
    tasks = task_order(spec, jobs, timed)
    # a line per mechanism and ε audited, with an estimate of the time left (an audit takes minutes): where an
    # earlier audit timed each, from when each was expected to end on this audit's workers
    ends = {}
    if timed is not None:  # cpus is 1 unless the tasks share a local Ray cluster's workers
        secs = [float(timed["seconds_by_audit"][timing_key(name, eps, wb)]) for wb, eps, name in tasks]
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
            src = StudySource(study, spec)
            for wb, eps in jobs:
                out += audit_job(src, plan, wb, eps, caches.setdefault(wb, {}), bar)
        else:
            out = _audit_on_ray(study, spec, plan, jobs, tasks, address, bar)
    finally:
        bar.close()
    return out


def audit_task(cfg_json: dict, base_dir: str | None, spec: AuditSpec, plan: AuditPlan, job: tuple[bool, float, str]
               ) -> list[AuditResult]:
    """One audit job where the config is all there is (a Ray worker): the config resolved again against its data,
    :func:`audit_job` of one mechanism or program, at the audit's ``spec``, with a cache of its own."""
    study = resolve(parse_config(cfg_json).with_base_dir(base_dir))
    try:
        return audit_job(StudySource(study, spec), plan, job[0], job[1], {}, only=job[2])
    finally:  # a Ray worker outlives its task: the program's worker (a Spark JVM, a SmartNoise fit) must not
        stop_workers()


def _audit_on_ray(study: Study, spec: AuditSpec, plan: AuditPlan, jobs: list, tasks: list, address: str | None,
                  bar) -> list[AuditResult]:
    """Each (BLOCK variant, ε, mechanism or program) a Ray task (through the loop the long commands share),
    submitted in the order of ``tasks`` (:func:`task_order`); results in :func:`audit_job`'s order."""
    cfg = study.cfg
    got = {}
    ray = RayTasks(audit_task, (cfg.model_dump(mode="json"), cfg.base_dir, spec, plan), address, cfg.sweep.num_cpus)
    for task, results in on_ray(ray, tasks, with_item=True):
        got[task] = results
        for res in results:
            bar.update(1, f"{res.mechanism} at ε = {task[1]:g}")
    return [res for wb, eps in jobs for name in spec.names for res in got[(wb, eps, name)]]



@dataclasses.dataclass(frozen=True)
class StudySource:
    """The audit's door into a resolved study (:class:`synth.audit.source.AuditSource`): the audit's settings
    (``spec``, default the config's at ``release.audit.confidence``), the study's data, and the functions of this
    package that lay out and publish a release, which every draw goes through."""

    study: Study
    spec: AuditSpec | None = None

    def __post_init__(self):
        if self.spec is None:
            object.__setattr__(self, "spec", AuditSpec.of(self.study.cfg))

    @property
    def cfg(self):
        return self.study.cfg

    @property
    def pop(self):
        return self.study.pop

    @property
    def units(self) -> list[str]:
        return self.study.units

    def prepare(self, unit: str, with_block: bool, pad_blocks: bool = False):
        return self.study.prepare(unit, with_block, pad_blocks=pad_blocks)

    def blocks(self, unit: str):
        return self.study.blocks(unit)

    def private_half(self, unit: str, with_block: bool):
        return self.study.private_half(unit, with_block)

    def with_people(self, people) -> StudySource:
        return StudySource(resolve(self.cfg, people), self.spec)

    def workload(self, published, domain, areas: dict | None = None):
        return build_workload(self.cfg, published, domain, areas)

    def fit_key(self, *parts):
        return unit_key(self.cfg, *parts)

    @functools.cached_property
    def release_spec(self) -> ReleaseSpec:
        """What publishing reads of the config, resolved once for the audit's many draws."""
        return ReleaseSpec.of(self.cfg)

    def publish(self, mechanism: str, epsilon: float, D, workload, draw: Draw):
        return publish(self.release_spec, mechanism, epsilon, D, workload, draw)

    def topdown_root(self, unit: str, with_block: bool):
        return topdown_root(self.study, unit, with_block)

    def topdown_shape(self, unit: str, with_block: bool):
        return topdown_shape(self.study, unit, with_block)

    def topdown_tree(self, shape, nodes: dict, halves: dict, strategy, person_domain):
        return topdown_tree(self.cfg, shape, nodes, halves, strategy, person_domain)

    def publish_topdown(self, tree, epsilon: float, backend, **kw):
        return publish_topdown(self.cfg, tree, epsilon, backend, **kw)

    def unit_layout(self, unit: str, with_block: bool):
        return unit_layout(self.study, unit, with_block)

    def program_inputs(self, D, unit: str, layout, blocks, areas):
        return program_inputs(D, unit, layout, blocks, areas)

    def one_way_inputs(self, inputs: tuple):
        return one_way_inputs(inputs)

    def run_program(self, spec, inputs: tuple, epsilon: float, runs: int, seed: int, width: int | None = None):
        return run_program(self.cfg, spec, inputs, epsilon, runs, seed, width=width)
