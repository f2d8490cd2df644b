"""Evaluate DP releases before publishing: release at each ε, attack the release, compare, audit, report."""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from censusrecon.reconstruct import attacks
from censusrecon.reconstruct.attacks import RAP_RANK, AttackInputs, attack_unit
from censusrecon.experiments.config import ConfigError, ExperimentConfig, ReidentificationConfig, parse_config
from censusrecon.experiments.metrics import (effective_u, k_grid, match_rate_curve, strength_by_runs,
                                 unique_persons, unit_saturated)
from censusrecon.experiments.problem import (Study, stable_seed, baseline_curves, build_workload, exact_answers, rap_settings,
                                 resolve, unit_key)
from censusrecon.experiments.progress import UnitProgress
from censusrecon.experiments.release.audit import audit_release, check_canary
from censusrecon.synth.audit.timing import failed_audits, record_audit
from censusrecon.experiments.release.files import file_published, read_release_files, unit_layout
from censusrecon.synth.release_files import FILE_NOTE
from censusrecon.experiments.release.program import check_environments
from censusrecon.synth.program_host import PROGRAM_NOTE, program_digests, program_inputs, publication_seed, run_program
from censusrecon.synth.release_path import (ReleaseSpec, release_backend, check_block_list, neighbours_of,
                                         own_invariants, publish, swap_pool)
from censusrecon.experiments.release.release_plots import plot_release
from censusrecon.experiments.release.release_privacy import unit_selection
from censusrecon.experiments.release.release_report import (Evaluated, release_persons, release_strength, setting_label,
                                                             write_report)
from censusrecon.synth.topdown_release import publish_topdown, topdown_mdf, topdown_root, topdown_unit
from censusrecon.experiments.results import (Hooks, RayTasks, UnitStore, UnitTask, check_backend, code_fingerprint, finish, ray_session, jax_info, run_seconds, versions, write_json, write_parquet,
                                 write_yaml)
from censusrecon.microdata.agreement import agreement_by_size
from censusrecon.microdata.census import AGE_BIN38_OF_AGE, AGE_BINS_38_LABELS
from censusrecon.microdata.dataset import Dataset
from censusrecon.microdata.marginals import Workload
from censusrecon.microdata.ranking import rank_by_score
from censusrecon.reconstruct.queries import plan_for
from censusrecon.synth.mechanism import Ledger, PrivacyError, Relation, parse_relation
from censusrecon.synth.release import (DERIVED_ROWS, TOTAL_DECLARED, TOTAL_PUBLIC_BY_RELATION, table_utility, total_queries,
                           totals_utility, workload_counts)
from censusrecon.synth import registry
from censusrecon.synth.registry import BASELINE, EXACT
from censusrecon.synth.publishing import Published, tables_published
from censusrecon.experiments.exact_eval import agreement, reidentification
from censusrecon.experiments.release.decision import DECISION_FILE, Decision, Evidence, decide, load_decision
from censusrecon.experiments.release.release_report import (BEST_ATTACK, audits_from_dicts, exact_row, strength_sentence,
                                                             summarise_release_persons, verdict_rows)
from censusrecon.experiments.release.risks import frame, measure, RiskJob
from censusrecon.experiments.release.release_games import ReleaseGames, game_summaries
from censusrecon.reconstruct.exact import query_matrix, reconstruct_exact
from censusrecon.reconstruct.least_deviation import reconstruct_least_deviation
from censusrecon.synth.publishing import Draw

log = logging.getLogger(__name__)


#: the rows a unit's evaluation gathers beside its curves, each kind written to its own Parquet file of the results:
#: the exact attack's status per release, the Bureau's agreement and reidentification, RAP-Rank's strength, and the
#: published rows' agreement by block size
EXACT_FILES = {"status": "exact_attack", "agreement": "agreement", "reidentification": "reidentification",
               "strength": "strength", "agreement_by_size": "agreement_by_size"}
#: the inference games' tables of every unit, each written whole to <name>_scores.parquet (membership: one row a
#: target's score in one release; attribute: one row a person; inference_notes: a game not played, and why)
GAME_FILES = ("membership", "attribute", "inference_notes")


def release_dir(out_root: str | Path, cfg: ExperimentConfig) -> Path:
    """results/<name>/<config-hash>/release/: beside the attack run of the same config, never in it."""
    return Path(out_root) / cfg.name / cfg.digest() / "release"


#: the audit `censusrecon audit` ran last, kept whole in the release folder for evaluate-release
RECORDED_AUDIT = "audit_recorded.json"


def save_recorded_audit(run_dir: Path, cfg: ExperimentConfig, results: list) -> None:
    """Keep an audit `censusrecon audit` ran (every result whole, the code and config it ran on), so
    that evaluate-release of the same code and config uses it instead of running it again."""
    import datetime as _dt

    when = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    write_json(Path(run_dir) / RECORDED_AUDIT, {"code": code_fingerprint(), "config": cfg.digest(), "when": when,
                                                "results": [dict(r.as_dict(), recorded_by_audit_command=when)
                                                            for r in results]})


def recorded_audit(run_dir: Path, cfg: ExperimentConfig, fingerprint: str) -> list | None:
    """The audit `censusrecon audit` recorded for exactly this code and config (every file of the code,
    every key of the config, the audit's settings included), as AuditResults; None when there is none."""
    path = Path(run_dir) / RECORDED_AUDIT
    if not path.exists():
        return None
    rec = json.loads(path.read_text())
    if rec.get("code") != fingerprint or rec.get("config") != cfg.digest() or not rec.get("results"):
        return None
    return audits_from_dicts(rec["results"])


def finished_decision(run_dir: Path, cfg: ExperimentConfig, fingerprint: str, inputs: dict):
    """The decision of a finished evaluation of exactly this code, config and release inputs, when it
    still stands (no audit recorded by `censusrecon audit` since); else None."""
    if not (Path(run_dir) / DECISION_FILE).exists():
        return None
    try:
        d = load_decision(run_dir)
    except (ValueError, KeyError, TypeError):
        return None  # a decision file of another version: decide again
    if d.code_fingerprint != fingerprint or d.config != cfg.digest() or d.inputs != inputs:
        return None
    recorded = recorded_audit(run_dir, cfg, fingerprint)
    if recorded is not None and recorded[0].details.get("recorded_by_audit_command") != d.audit_when:
        return None  # `censusrecon audit` audited this code and config since: decide with its audit
    return d


#: where an earlier report, audit and decision are kept when a rerun replaces them
EARLIER = "earlier"


def keep_earlier(run_dir: Path) -> Path | None:
    """Move the report, audit and decision of an earlier finished evaluation to ``earlier/<when>/`` before
    a rerun writes its own: a report is never replaced without the earlier one kept."""
    import datetime as _dt

    run_dir = Path(run_dir)
    if not (run_dir / DECISION_FILE).exists():
        return None
    when = _dt.datetime.fromtimestamp((run_dir / DECISION_FILE).stat().st_mtime, _dt.timezone.utc)
    dest = run_dir / EARLIER / when.strftime("%Y%m%dT%H%M%SZ")
    dest.mkdir(parents=True, exist_ok=True)
    for name in ("report.md", "report.html", "audit.json", DECISION_FILE):
        if (run_dir / name).exists():
            (run_dir / name).replace(dest / name)
    return dest


def evaluate_release(cfg: ExperimentConfig, out_root: str | Path = "results", progress: bool = True,
                     reaudit: bool = False, backend: str | None = None, address: str | None = None) -> Path:
    """Release → attack → compare with the exact-table attack and the baselines, per ε and mechanism;
    audit; decide (``decision.json``); report. A finished evaluation of the same code, config and inputs
    is not run again and changes no file, unless ``reaudit`` (then its audit runs again, and the earlier
    report, audit and decision are kept under ``earlier/``).

    Each unit's evaluation is one call of :func:`evaluate_unit`, which writes the unit's files (the JSON last,
    marking it done); a call killed at any moment loses no finished unit, and the next one evaluates only those
    not done. ``backend="ray"`` runs the units, and the audit's (BLOCK variant, ε, mechanism) jobs, as Ray tasks
    (``address`` to join a cluster; default a local one with ``sweep.num_cpus`` CPUs); None: the units here and
    the audit where ``release.audit.backend`` says."""
    audit_backend, backend = backend, backend or "local"
    check_backend(backend)
    if cfg.release is None:
        raise ConfigError("this config has no 'release' section; see configs/release_demo.yaml")
    if cfg.baselines.include_target:
        raise ConfigError("baselines.include_target: true builds the geographic baselines partly from D itself (the "
                          "paper's pools); a release verdict compares with what an outsider has without the release, "
                          "so evaluate-release needs include_target: false")
    t_start = time.perf_counter()
    check_environments(cfg)  # a program's missing environment fails in the first second, not after minutes
    study = _checked_study(cfg)  # resolved once against its data; bad data fails before anything is written
    check_canary(study)  # as the audit at the end reads it: a canary outside the domain fails now
    files = read_release_files(study, study.units)  # a file that does not fit fails here, before anything runs
    # a unit's result is for these files and programs only
    inputs = {**{f"{m}@{s:g}": tf.digest for (m, s), tf in files.items()}, **program_digests(cfg)}
    run_dir = release_dir(out_root, cfg)
    fingerprint = code_fingerprint()
    if not reaudit and finished_decision(run_dir, cfg, fingerprint, inputs) is not None:
        UnitProgress(0, "units", progress).say(
            f"already evaluated on this code, config and inputs: nothing is run again and no file changes "
            f"({run_dir}); --reaudit audits it again")
        return run_dir
    run_dir.mkdir(parents=True, exist_ok=True)
    write_yaml(run_dir / "config.yaml", cfg.model_dump(mode="json"))
    store = UnitStore(run_dir, fingerprint, inputs)
    with ray_session(backend, address, cfg.sweep.num_cpus):  # one Ray start for the units and the audit
        ray = RayTasks(unit_task, (cfg.model_dump(mode="json"), cfg.base_dir, str(run_dir), fingerprint, inputs),
                       address, cfg.sweep.num_cpus, gpu=True) if backend == "ray" else None
        got = _evaluate_units(study, files, store, progress, ray)
        got.recorded = None if reaudit else recorded_audit(run_dir, cfg, fingerprint)
        if got.recorded is not None:  # `censusrecon audit` audited this very code and config: its audit stands
            got.audits = got.recorded
            UnitProgress(0, "units", progress).say(
                f"audit: the one `censusrecon audit` ran at {got.audits[0].details['recorded_by_audit_command']} on "
                f"this code and config (seed {got.audits[0].details.get('audit_seed')}); its result stands, so it is "
                "not run again")
        else:
            got.audits = audit_release(study, progress=progress, backend=audit_backend, address=address,
                                       history=run_dir / "audit_history.jsonl")
    keep_earlier(run_dir)  # a rerun (--reaudit) keeps the earlier report, audit and decision before writing its own
    got.risks, got.risk_note = measure_risks(cfg, got.micro)
    facts = _write_results(study, store, got, time.perf_counter() - t_start)
    membership, attribute = game_summaries(cfg, got.games)
    write_parquet(run_dir / "membership.parquet", membership)
    write_parquet(run_dir / "attribute.parquet", attribute)
    decision = decide_release(cfg, run_dir, got.df, got.util, got.micro, Evidence(
        {}, got.audits, got.ledger.entries, risks=got.risks, risk_note=got.risk_note,
        membership=membership, attribute=attribute, inference_notes=got.games.get("inference_notes"),
        units_in_file=study.units_in_file, released=tuple(study.units), code_fingerprint=fingerprint, inputs=inputs,
        audit_when=None if got.recorded is None else got.recorded[0].details["recorded_by_audit_command"]))
    decision.save(run_dir)
    write_report(cfg, run_dir, Evaluated(got.df, got.util, got.audits, got.ledger, facts), decision)
    return run_dir


def _checked_study(cfg: ExperimentConfig) -> Study:
    """The config resolved against its data, after the checks a release evaluation needs of the data before it runs:
    a block list that fits, and a total or partition in the tables when n must come from the noisy tables."""
    r = cfg.release
    study = resolve(cfg)
    units = study.units
    for wb in cfg.target.with_block:
        if wb:
            check_block_list(study, units[0])
        if parse_relation(r.relation) is Relation.ADD_REMOVE and "unit_total" not in r.invariants:
            first = study.prepare(units[0], wb, pad_blocks=False)
            try:  # n must come from the noisy tables: they must publish a total or a partition
                total_queries(build_workload(cfg, cfg.published, first.private.domain, first.areas))
            except PrivacyError as e:
                raise ConfigError(str(e)) from None
    return study


@dataclass
class _Gathered:
    """Every unit's results of one evaluation, this process's or its files (an earlier call's, a Ray worker's)."""

    df: pd.DataFrame  # the curves
    util: pd.DataFrame
    micro: list  # per unit: D, D_holdout and every published microdata file
    ledger: Ledger
    exact_statuses: dict
    resumed: list  # the facts of units finished by an earlier call (their time counts too)
    audits: list = field(default_factory=list)
    recorded: list | None = None  # the audit command's audit of this code and config, where it stands
    risks: pd.DataFrame | None = None  # anonymeter's measures, and why there are none
    risk_note: str | None = None
    games: dict = field(default_factory=dict)  # the inference games: membership scores, attribute rows, notes


def _evaluate_units(study: Study, files: dict, store: UnitStore, progress: bool, ray: RayTasks | None) -> _Gathered:
    """Every (unit, variant) not done yet in ``store`` evaluated (:func:`evaluate_unit`, here or, given ``ray``, as
    Ray tasks), then every one's results gathered."""
    cfg, r = study.cfg, study.cfg.release
    tasks = [UnitTask(u, wb) for wb in cfg.target.with_block for u in study.units]
    per_unit = 1 + sum(len(r.settings_of(m)) for m in r.evaluated)
    topdown_cache: dict = {}  # "trees": (unit, BLOCK?) -> tree of its root; "releases": (root, BLOCK?, ε) -> release
    run_dir = store.dir.parent
    units_bar = UnitProgress(len(tasks), "units", progress)
    # a line per release attacked where there is no terminal: a 2010-sized tract's releases take minutes each
    bar = UnitProgress(len(tasks) * per_unit, "releases attacked", progress, leave=False)

    def found(n: int) -> None:
        units_bar.found(n, run_dir)
        bar.skip(per_unit * n)

    def done(t: UnitTask) -> None:
        if ray is not None:  # a Ray task's releases are counted when its unit is
            bar.skip(per_unit)
        units_bar.update(1, t.label)

    try:
        results, computed = finish(
            store, tasks, lambda chunk: [evaluate_unit(study, t, store, files, bar, topdown_cache) for t in chunk],
            ray=ray, hooks=Hooks(on_found=found, on_done=done))
    except KeyboardInterrupt:
        raise units_bar.interrupted() from None
    finally:
        bar.close()
        units_bar.close()
    ledger = Ledger()
    curves, utility, micro, resumed = [], [], [], []
    exact_statuses: dict = {kind: [] for kind in EXACT_FILES}
    games: dict = {name: [] for name in GAME_FILES}
    for task in tasks:  # every unit's result: this process's, or its files (an earlier call's, a Ray worker's)
        facts = results[task]
        for name in GAME_FILES:
            if facts.get(name) is not None and len(facts[name]):
                games[name].append(facts[name])
        curves.append(facts["curves"])
        if facts["micro_rows"] is not None:
            micro.append(facts["micro_rows"])
        utility.extend(facts["utility"])
        ledger.entries.extend(facts["ledger"])
        for kind, rows_ in facts.get("exact_attack", {}).items():
            exact_statuses[kind].extend(rows_)
        if task not in computed:
            resumed.append(facts)
    return _Gathered(pd.concat(curves, ignore_index=True), pd.DataFrame(utility), micro, ledger, exact_statuses,
                     resumed, games={name: pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
                                     for name, parts in games.items()})


def _write_results(study: Study, store: UnitStore, got: _Gathered, seconds: float) -> dict:
    """The evaluation's files beside ``store``'s (risks, curves, MDF, utility, lift, ledger, audit and its history,
    persons, the exact attack's tables, manifest, plots); returns the facts the report reads."""
    cfg, r, units, empty = study.cfg, study.cfg.release, study.units, study.empty_units
    run_dir, fingerprint = store.dir.parent, store.fingerprint
    risks, risk_note, df, ledger, audits, recorded = got.risks, got.risk_note, got.df, got.ledger, got.audits, got.recorded
    write_json(run_dir / "risks.json", {"note": risk_note})
    if len(risks):
        write_parquet(run_dir / "risks.parquet", risks)
    elif (run_dir / "risks.parquet").exists():
        (run_dir / "risks.parquet").unlink()
    write_parquet(run_dir / "release_eval.parquet", df)
    mdf_parts = sorted((run_dir / "mdf").glob("*.parquet")) if (run_dir / "mdf").is_dir() else []
    if mdf_parts:  # every TopDown release's microdata detail file, one table
        write_parquet(run_dir / "mdf.parquet", pd.concat([pd.read_parquet(f) for f in mdf_parts], ignore_index=True))
    write_parquet(run_dir / "utility.parquet", got.util)
    write_parquet(run_dir / "lift.parquet", lift_table(df))
    write_json(run_dir / "ledger.json", {"entries": ledger.entries, "relation": r.relation,
                                         "invariants": list(r.invariants),
                                         "unit_selection": unit_selection(cfg),
                                         "empty_units": empty,  # listed, named, nobody there: not attacked
                                         "total_epsilon_per_unit": {u: ledger.total_epsilon(unit=u) for u in units}})
    write_json(run_dir / "audit.json", [a.as_dict() for a in audits])
    if recorded is None:
        earlier_failures = record_audit(run_dir / "audit_history.jsonl", audits, fingerprint)
    else:  # recorded already, by the audit command: the other failures of this code
        earlier_failures = failed_audits(run_dir / "audit_history.jsonl", fingerprint,
                                         besides=audits[0].details["recorded_by_audit_command"])
    write_parquet(run_dir / "persons.parquet", release_persons(df))
    for name in GAME_FILES:
        write_parquet(run_dir / f"{name}_scores.parquet", got.games.get(name, pd.DataFrame()))
    for kind, name in EXACT_FILES.items():
        if got.exact_statuses[kind]:
            write_parquet(run_dir / f"{name}.parquet", pd.DataFrame(got.exact_statuses[kind]))
    facts = {"units": units, "empty_units": empty, "levels": list(study.pop.geography.levels[1:]),
             "attributes": list(study.attributes)}
    write_json(run_dir / "manifest.json", {
        "name": cfg.name, "config_hash": cfg.digest(), "code_fingerprint": code_fingerprint(),
        "versions": versions(), "jax": jax_info(), "seeds": {"experiment": cfg.seed, "population": cfg.data.seed},
        "units": units, "facts": facts, **run_seconds(seconds, got.resumed),
    })
    plot_release(df, got.util, run_dir, cfg)
    facts["earlier_audit_failures"] = earlier_failures
    return facts


class _Quiet:
    def update(self, n: int = 1, what: str = "") -> None:
        pass


def evaluate_unit(study: Study, task: UnitTask, store: UnitStore, files: dict, bar=None,
                  topdown_cache: dict | None = None) -> dict:
    """Evaluate one unit (every release of it attacked, the exact tables, the baselines) and save it in
    ``store``: the one step both backends run per unit. Returns it as :meth:`UnitStore.load` would."""
    ledger = Ledger()
    t_unit = time.perf_counter()
    run = _UnitRun(study, task.unit, task.with_block, ledger, bar or _Quiet(),
                   {} if topdown_cache is None else topdown_cache, store.dir.parent, files)
    unit_curves, unit_util, unit_exact, unit_micro = run.evaluate()
    return store.save(task, unit_curves, {"utility": unit_util, "exact_attack": unit_exact, "ledger": ledger.entries,
                                          "seconds_unit": round(time.perf_counter() - t_unit, 2)}, unit_micro,
                      frames=run.games.frames())


def unit_task(cfg_json: dict, base_dir: str | None, run_dir: str, fingerprint: str, inputs: dict,
              task: UnitTask) -> UnitTask:
    """One unit evaluated where the config is all there is (a Ray worker): the config resolved again against
    its data (the same units: the choice is seeded), the unit's release files read (the driver checked them against
    every unit), :func:`evaluate_unit`; its compiled programs kept in the compilation cache as the command line's."""
    from censusrecon.reconstruct.compile_cache import use_compilation_cache

    use_compilation_cache()
    study = resolve(parse_config(cfg_json).with_base_dir(base_dir))
    evaluate_unit(study, task, UnitStore(Path(run_dir), fingerprint, inputs), read_release_files(study, [task.unit]))
    return task


def verdicts_of(persons: pd.DataFrame, util: pd.DataFrame, strengths: dict, tolerance,
                units_in_file: int | None) -> dict:
    """Per variant, the verdict rows (:func:`experiments.release.release_report.verdict_rows`), each with the words of
    the attack's strength at its setting (``strength``) and the best attack on the exact tables (``exact``):
    what :func:`experiments.release.decision.decide` decides from."""
    out = {}
    for v in dict.fromkeys(persons["variant"].tolist()) if len(persons) else []:
        rows = verdict_rows(persons, util, v, strengths.get(v), tolerance, units_in_file)
        by_k = strengths[v]["by_k"] if strengths.get(v) is not None else pd.DataFrame()
        for row in rows:
            row["strength"] = strength_sentence(strengths[v], row) if strengths.get(v) is not None else ""
            row["exact"] = exact_row(persons, v)
            hit = by_k[(by_k["mechanism"] == row["mechanism"]) & ~by_k["saturated"].astype(bool)] if len(by_k) else by_k
            row["unsaturated"] = [(float(h["setting"]), int(h["runs"]), int(h["gain"] or 0))
                                  for _, h in hit.iterrows()]
        out[v] = rows
    return out


def decide_release(cfg: ExperimentConfig, run_dir: Path, df: pd.DataFrame, util: pd.DataFrame,
                   micro: list[pd.DataFrame], ev: Evidence) -> Decision:
    """The evaluation's decision (:func:`experiments.release.decision.decide`), once, from what it measured: ``ev``
    completed with the verdicts (from ``df``, ``util`` and the attack's strength in ``run_dir``) and the mechanisms
    whose rows ``micro`` holds."""
    persons = summarise_release_persons(release_persons(df), cfg.release.tolerance)
    strengths = {v: release_strength(run_dir, v) for v in dict.fromkeys(df["variant"].tolist())}
    published_rows = {m for part in micro for m in part.loc[part["role"] == "release", "mechanism"].unique()}
    verdicts = verdicts_of(persons, util, strengths, cfg.release.tolerance, ev.units_in_file)
    best = persons[persons["attack"] == BEST_ATTACK] if len(persons) else persons
    return decide(cfg, dataclasses.replace(ev, verdicts=verdicts, row_mechanisms=frozenset(published_rows),
                                           persons=best))


@dataclass
class _UnitRun:
    """One unit's evaluation under way (:func:`evaluate_unit`): every release of it attacked, the exact tables and
    the baselines; its problem, workload and truth prepared once, what it measured gathered as it goes.
    ``files``: the release files made elsewhere (:func:`experiments.release.files.read_release_files`)."""

    study: Study
    unit: str
    wb: bool
    ledger: Ledger
    bar: object
    topdown_cache: dict
    run_dir: Path | None = None
    files: dict | None = None
    #: a release evaluation's curves are not split by persons outside the unit or by block size
    outside = None
    block_class = None

    def __post_init__(self):
        cfg, unit, wb = self.study.cfg, self.unit, self.wb
        self.cfg = cfg
        self.prob = prob = self.study.prepare(unit, wb, pad_blocks=False)  # every listed block, empty ones included
        self.D, self.H = prob.private, prob.holdout
        self.truth = self.D.keys()
        self.u = effective_u(self.D.distinct(), self.H.distinct())
        self.ks = k_grid(self.u, cfg.grid_points)
        self.w = build_workload(cfg, cfg.published, self.D.domain, prob.areas)
        self.plan = plan_for(self.w)
        self.exact = exact_answers(self.D, self.w)
        self.exact_counts = workload_counts(self.D, self.w)
        self.settings = rap_settings(cfg)
        self.tie_rng = np.random.default_rng(stable_seed("ties", cfg.seed, unit, wb))
        self.common = dict(unit=unit, variant=wb, u=self.u, n_rows=len(self.D), n_unique=unique_persons(self.D))
        self.exact_on = cfg.attack.exact and not isinstance(self.w, Workload)
        self.spec = ReleaseSpec.of(cfg)  # what the config says about publishing, resolved once for the unit
        self.cache: dict = {}
        self.exact_status: dict = {kind: [] for kind in EXACT_FILES}
        self.curves: list[pd.DataFrame] = []
        self.utility: list[dict] = []
        self.micro = [_micro_rows(self.D, unit, wb, "D"), _micro_rows(self.H, unit, wb, "holdout")]
        self.extra = {"unit": unit, "with_block": wb}
        if wb:
            self.extra["block_list"] = prob.block_list_source
        self.games = ReleaseGames(self)  # the membership and attribute games of every release

    def fit_key(self, setting: float):
        """The JAX key of a fitted release of this unit at ``setting`` (public: the unit and the setting)."""
        return unit_key(self.cfg, "fit", self.unit, setting)

    def evaluate(self) -> tuple[pd.DataFrame, list, dict, pd.DataFrame | None]:
        """The unit's curves, utility rows, exact-attack facts and published rows (None: no release published
        rows); the inference games' frames are in ``self.games``."""
        self.exact_tables()
        self.baselines()
        r = self.cfg.release
        for mech in r.evaluated:
            for setting in r.settings_of(mech):
                self.score(mech, setting, self.publish_one(mech, setting))
                self.bar.update(1, f"{self.unit}: {mech}, {setting_label(mech, setting)}")
        published = len(self.micro) > 2
        return (pd.concat(self.curves, ignore_index=True), self.utility, self.exact_status,
                pd.concat(self.micro, ignore_index=True) if published else None)

    def rap_curve(self, targets, tag, mech, setting, steps_settings=None) -> pd.DataFrame:
        """RAP-Rank on published answers; its strength rows (the first k of its K runs) are kept. Where doubling K
        still added persons and ``attack.max_runs`` allows, K is doubled (run k is the same whatever K is) until it
        stops adding them: the evaluation decides on a saturated attack, or says it had not saturated."""
        cfg, unit, wb = self.cfg, self.unit, self.wb
        s = self.settings if steps_settings is None else steps_settings
        runs, most = cfg.attack.runs, (cfg.attack.max_runs or cfg.attack.runs) if steps_settings is None else 0
        seed = stable_seed("strength", cfg.seed)
        rng = (self.tie_rng if steps_settings is None
               else np.random.default_rng(stable_seed("ties", cfg.seed, unit, wb, "2T")))
        while True:
            got = attack_unit(attacks.attack(RAP_RANK), AttackInputs(
                self.w, targets, rng, int(self.ks.max()), key=unit_key(cfg, "attack", unit, wb, tag), runs=runs,
                settings=s, plan=self.plan))
            res = got.fit
            rows = strength_by_runs(res.codes, self.D.domain.encode, self.truth, self.u, seed, res.ranking)
            if 2 * runs > most or unit_saturated(rows):
                break
            runs *= 2  # K doubled: the same runs and as many more, their ties broken afresh
            rng = np.random.default_rng(stable_seed("ties", cfg.seed, unit, wb, tag, "K", runs))
        self.exact_status["strength"] += [
            {"unit": unit, "variant": wb, "mechanism": mech, "setting": setting, "steps": s.steps, **r} for r in rows]
        return match_rate_curve(got.ranking, self.truth, self.ks, self.u)

    def unit_attacks(self, targets, tag, **cols) -> list[pd.DataFrame]:
        """The attacks run unit by unit (attack.methods) on what was published (noisy answers for a DP release)."""
        out = []
        for method in self.cfg.attack.methods:
            kind = attacks.attack(method)
            mixed = (kind.name,) if kind.seed_with_name else ()
            tie = np.random.default_rng(stable_seed("ties", self.cfg.seed, self.unit, self.wb, tag, *mixed))
            got = attack_unit(kind, AttackInputs(self.w, targets, tie, int(self.ks.max())))
            out.append(match_rate_curve(got.ranking, self.truth, self.ks, self.u, got.candidates)
                       .assign(method=method, **cols))
        return out

    def exact_curve(self, counts, mech, setting, rows: Dataset | None = None, noisy=None) -> pd.DataFrame | None:
        """The integer-programming attack on a release's published tables: the exact count model for
        consistent tables (no certificates), the least-deviation fit for independently noised ones
        (``noisy``: their scale, total and whether it is public); with the Bureau's measures of its
        reconstruction and of the rows the release publishes (:func:`bureau_measures`)."""
        cfg, w = self.cfg, self.w
        tag = {"unit": self.unit, "variant": self.wb, "mechanism": mech, "setting": setting}
        if noisy is not None:  # independent Laplace noise: the maximum-likelihood fit, not "infeasible"
            if "matrix" not in self.cache:
                self.cache["matrix"] = query_matrix(w)
            res = reconstruct_least_deviation(w, counts, noisy.scale, cfg.attack.exact_time_limit,
                                              total=noisy.total if noisy.total_public else None,
                                              matrix=self.cache["matrix"])
            self.exact_status["status"].append({**tag, **res.facts()})
        else:
            res, _ = reconstruct_exact(w, np.clip(np.rint(counts), 0, None).astype(np.int64),
                                       time_limit=cfg.attack.exact_time_limit, certify_support=False)
            self.exact_status["status"].append({**tag, "status": res.status})
        keys, n = res.rows() if res.solved else (None, None)
        for kind, rows_ in bureau_measures(cfg, self.D, None if keys is None else np.repeat(keys, n), rows,
                                           stable_seed("reid", cfg.seed, self.unit, self.wb)).items():  # one file
            self.exact_status[kind] += [{**tag, **r} for r in rows_]
        if not res.solved:
            return None
        return match_rate_curve(rank_by_score(keys, n.astype(np.float64)), self.truth, self.ks, self.u)

    def exact_tables(self) -> None:
        """The attacks on the exact tables (RAP-Rank, the unit-by-unit attacks, the exact attack), and RAP-Rank's
        strength in T: the same K runs with twice the steps (their curve is not kept: only how far the persons
        reconstructed move)."""
        exact_cols = dict(epsilon=math.inf, setting=math.inf, mechanism=EXACT, utility_error=0.0, **self.common)
        self.curves += [self.rap_curve(self.exact, "exact", "exact", math.inf).assign(method=RAP_RANK, **exact_cols),
                        *self.unit_attacks(self.exact, "exact", **exact_cols)]
        self.rap_curve(self.exact, "exact", "exact", math.inf,
                       dataclasses.replace(self.settings, steps=2 * self.settings.steps))
        if self.exact_on:
            c = self.exact_curve(self.exact_counts, "exact", math.inf)
            if c is not None:
                self.curves.append(c.assign(epsilon=math.inf, setting=math.inf, mechanism=EXACT, method="exact",
                                            utility_error=0.0, **self.common))
        self.games.exact()
        self.bar.update(1, f"{self.unit}: exact tables")

    def baselines(self) -> None:
        priors = self.study.priors(self.prob)
        for b, curve, _ in baseline_curves(self.cfg, priors, self.unit, self, lambda b: self.tie_rng):
            self.curves.append(curve.assign(epsilon=np.nan, setting=np.nan, mechanism=BASELINE, method=b,
                                            utility_error=np.nan, **self.common))

    def publish_one(self, mech: str, setting: float) -> Published:
        """One release of the unit: a program's, a file's or a registered mechanism's, noted in the ledger."""
        cfg, r, unit, wb, extra = self.cfg, self.cfg.release, self.unit, self.wb, self.extra
        if registry.is_program(mech):
            program = r.program(mech)
            if "program_inputs" not in self.cache:  # the same D, cells and domain for every program and ε
                self.cache["layout"] = unit_layout(self.study, unit, wb)
                self.cache["program_inputs"] = program_inputs(self.D, unit, self.cache["layout"],
                                                              self.study.blocks(unit)[0] if wb else None,
                                                              self.prob.areas)
            values = run_program(cfg, program, self.cache["program_inputs"], setting, 1, publication_seed())[0]
            self.ledger.note(mech, program.function or " ".join(program.command), PROGRAM_NOTE,
                             declared_epsilon=setting, relation=r.relation, differentially_private="declared by the "
                             "program; audited as a black box", for_publication=None, params=program.params, **extra,
                             invariants=[])
            return tables_published(mech, self.cache["layout"].to_queries(values), self.w, PROGRAM_NOTE)
        if registry.is_file(mech):
            file = r.file(mech, setting)
            tf = self.files[(mech, setting)]
            self.ledger.note(mech, "file", FILE_NOTE, declared_epsilon=file.epsilon, file=file.path, sha256=tf.digest,
                             made_with=file.made_with, for_publication=None, **extra, invariants=[])
            return file_published(mech, tf, unit, wb, self.w)
        spec = self.spec
        pub, backend, facts = self.publish_mechanism(mech, setting)
        kind = registry.mechanism(mech)
        if not kind.dp:
            self.ledger.note(mech, kind.made_with, pub.publication_note, **{kind.setting_key: setting},
                             **{k: v for k, v in pub.facts.items() if k not in ("kind", kind.setting_key)}, **extra,
                             invariants=own_invariants(spec, mech, wb))
        else:
            if getattr(backend, "contrib", False):
                extra.update(opendp_version=backend.version, opendp_contrib=True)
            protects, exact = neighbours_of(spec, mech)
            self.ledger.record(pub.record, backend.name, pub.for_publication, publication_note=pub.publication_note,
                               invariants=own_invariants(spec, mech, wb), neighbours=protects,
                               published_exactly=exact, **extra, **facts)
        return pub

    def score(self, mech: str, setting: float, pub: Published) -> None:
        """What one release gives away and what it costs: its rows' agreement, its tables' errors, and the attacks
        on what it published."""
        unit, wb = self.unit, self.wb
        if pub.rows is not None:
            self.micro.append(_micro_rows(pub.rows, unit, wb, "release", mech, setting))
            self.exact_status["agreement_by_size"] += [{"unit": unit, "variant": wb, "mechanism": mech,
                                                        "setting": setting, **a} for a in rows_agreement(self.D, pub.rows)]
        rows = (table_utility(pub.counts, self.exact_counts, self.w)
                + totals_utility(pub.counts, self.exact_counts, self.w))
        eps_col = setting if registry.is_dp(mech) else np.nan
        self.utility += [dict(row, epsilon=eps_col, setting=setting, mechanism=mech, unit=unit, variant=wb)
                         for row in rows]
        tables_only = [row for row in rows if row["table"] not in DERIVED_ROWS]  # each published cell once
        err = sum(row["mae_per_cell"] * row["cells"] for row in tables_only) / sum(row["cells"] for row in tables_only)
        cols = dict(epsilon=eps_col, setting=setting, mechanism=mech, utility_error=err, **self.common)
        self.curves.append(self.rap_curve(pub.answers, f"{mech}-{setting}", mech, setting)
                           .assign(method=RAP_RANK, **cols))
        self.curves += self.unit_attacks(pub.answers, f"{mech}-{setting}", **cols)
        if self.exact_on:
            c = self.exact_curve(pub.counts, mech, setting, pub.rows, _noisy_fit(pub))
            if c is not None:
                self.curves.append(c.assign(epsilon=eps_col, setting=setting, mechanism=mech, method="exact",
                                            utility_error=err, **self.common))
        self.games.release(mech, setting, pub)

    def publish_mechanism(self, mech: str, setting: float) -> tuple[Published, object, dict]:
        """One registered mechanism's release of the unit at ``setting`` through :func:`publish`, given what its
        kind needs (its noise, a fit's key, the swap pool, the shared release of its root); with the noise
        backend and the facts of a shared release for the ledger."""
        cfg, spec, unit = self.cfg, self.spec, self.unit
        kind = registry.mechanism(mech)
        rng = np.random.default_rng(stable_seed("release", cfg.seed, unit, mech, setting))
        backend = release_backend(spec, unit, mech, setting) if kind.dp else None
        facts: dict = {}

        def pool():
            if "pool" not in self.cache:
                self.cache["pool"] = swap_pool(self.study, unit)
            return self.cache["pool"]

        def shared(x):
            pub, more = self.topdown_published(mech, setting, x)
            facts.update(more)
            return pub

        pub = publish(spec, mech, setting, self.D, self.w, Draw(
            backend, rng, key=self.fit_key(setting) if kind.needs_fit else None,
            pool=pool if kind.needs_pool else None, shared=shared if kind.scope == "root" else None))
        return pub, backend, facts

    def topdown_published(self, mech: str, setting: float, x) -> tuple[Published, dict]:
        """The unit's share of the TopDown release of its root at ``setting``: one tree per root and one
        release per root and ε, shared by every unit under it; each release's MDF is written once to
        ``run_dir/mdf/`` (so an interrupted evaluation keeps it). ``x``: the unit's release inputs."""
        unit, wb, cache = self.unit, self.wb, self.topdown_cache
        trees, releases = cache.setdefault("trees", {}), cache.setdefault("releases", {})
        if (unit, wb) not in trees:
            td = topdown_root(self.study, unit, wb)
            trees.update({(other, wb): td for other in td.nodes})
        td = trees[(unit, wb)]
        key = (td.root, wb, setting)
        if key not in releases:
            releases[key] = publish_topdown(self.cfg, td, setting, release_backend(self.spec, td.root, mech, setting))
            if self.run_dir is not None:
                mdf = topdown_mdf(td, releases[key].estimates).assign(root=td.root, variant=wb, epsilon=setting)
                write_parquet(self.run_dir / "mdf" / f"{td.root}-{'block' if wb else 'unit'}-{setting:g}.parquet", mdf)
        rel = releases[key]
        pub = topdown_unit(td, rel.estimates, unit, self.w, rel.record, *x.fit)
        return pub, {"root": td.root, "tree_levels": td.shape.levels, "tree_nodes": [len(i) for i in td.shape.ids],
                     "tree_source": td.block_source}


@dataclass
class _NoisyFit:
    scale: float
    total: int
    total_public: bool


def _noisy_fit(pub: Published) -> _NoisyFit | None:
    """What the least-deviation attack needs of an independently noised release (Laplace tables):
    its noise scale and its total, and whether the total is public (replace-one) or declared. Tables
    whose noise censusrecon did not draw (a file's, a program's, the cell key method's) are fitted the
    same way with every cell weighing the same (consistent tables fit with no deviation), their total
    estimated from the tables themselves."""
    if pub.facts.get("kind") == "tables":  # noise censusrecon did not draw (publish.tables_published)
        return _NoisyFit(1.0, int(pub.facts["total"]), False)
    if not (registry.is_mechanism(pub.mechanism) and registry.mechanism(pub.mechanism).noise == "laplace"):
        return None  # consistent tables (a microdata file's, swapping's, TopDown's): the exact count model
    t = pub.output
    return _NoisyFit(float(pub.record.scale), int(t.total), t.total_source in (TOTAL_PUBLIC_BY_RELATION, TOTAL_DECLARED))


def rows_agreement(D: Dataset, rows: Dataset) -> list[dict]:
    """The Bureau's agreement of a release's published rows with D, by block-size class
    (:func:`microdata.agreement.agreement_by_size`, counts): where the rows are over D's domain with BLOCK and
    AGE in single years (exact and binned) or in SF1's 38 groups (binned only); else nothing."""
    dom = D.domain
    if "BLOCK" not in dom or "AGE" not in dom or list(rows.domain.names) != list(dom.names):
        return []
    if tuple(dom.attribute("AGE").values) == AGE_BINS_38_LABELS:
        bins = None
    elif dom.size("AGE") == len(AGE_BIN38_OF_AGE):
        bins = AGE_BIN38_OF_AGE
    else:
        return []
    return agreement_by_size(D.codes, rows.codes, dom.index("BLOCK"), dom.index("AGE"), bins)


def bureau_measures(cfg: ExperimentConfig, D: Dataset, reconstruction: np.ndarray | None, rows: Dataset | None,
                    seed: int) -> dict:
    """The Census Bureau's measures (Abowd et al., HDSR 2025) of one release: agreement with D on exact
    age and on its 38 age bins, of the exact attack's reconstruction (keys, one per person) and of
    the rows the release publishes (TopDown's MDF, the swapped file, synthetic rows); and the
    reidentification precision of the reconstruction beside the modal and proportional guesses,
    overall and for the vulnerable group. Empty lists where the domain has no single-year age."""
    truth = D.keys()
    out = {"agreement": [], "reidentification": []}
    for of, keys in (("reconstruction", reconstruction), ("published rows", None if rows is None else rows.keys())):
        if keys is not None:
            a = agreement(D.domain, truth, keys)
            if a is not None:
                out["agreement"].append({"of": of, **a, "persons": len(D)})
    if reconstruction is not None:
        rc = cfg.reidentification or ReidentificationConfig()
        df = reidentification(D, {"reconstruction": D.domain.decode(reconstruction)}, np.random.default_rng(seed), rc)
        if df is not None:
            out["reidentification"] = df.to_dict("records")
    return out


def _micro_rows(data: Dataset, unit: str, wb: bool, role: str, mechanism: str = "", setting: float = np.nan):
    """A unit's rows for the risk measures, as labels (a block's name is the unit's own): D, D_holdout
    or a published file, tagged."""
    return frame(data, unit).assign(variant=wb, role=role, mechanism=mechanism, setting=setting)


#: The tag columns of :func:`_micro_rows`; every other column is a person's attribute (or UNIT).
_MICRO_TAGS = ["variant", "role", "mechanism", "setting"]


def measure_risks(cfg: ExperimentConfig, micro: list[pd.DataFrame]) -> tuple[pd.DataFrame, str | None]:
    """anonymeter's risks of every published microdata file (per variant, mechanism and setting,
    all units together), with D as the original and D_holdout as the control set: persons of the
    same units that no release ever saw."""
    if not cfg.release.risks:
        return pd.DataFrame(), "not run: release.risks is false"
    if cfg.target.whole_units:
        return pd.DataFrame(), ("not run: target.whole_units releases every person of each unit, which leaves no "
                                "control set (persons of the same units whom no release saw) for anonymeter")
    if not micro:
        return measure([])
    rows = pd.concat(micro, ignore_index=True)
    jobs = []
    for wb, part in rows.groupby("variant", sort=False):
        cols = [c for c in part.columns if c not in _MICRO_TAGS]
        ori, control = (part.loc[part["role"] == role, cols].reset_index(drop=True) for role in ("D", "holdout"))
        released = part[part["role"] == "release"]
        for (mech, setting), sel in released.groupby(["mechanism", "setting"], sort=False):
            jobs.append(RiskJob(mech, float(setting), ori, sel[cols].reset_index(drop=True), control, wb))
    return measure(jobs, seed=cfg.seed, n_attacks=cfg.release.risk_attacks)


def lift_table(df: pd.DataFrame) -> pd.DataFrame:
    """Per (ε, mechanism, unit): area under RAP-Rank's match-rate curve minus the best baseline's.

    Areas are means over the unit's k/u grid (k/u ∈ (0, 1]); the best baseline is the one
    with the largest area on that unit. ε = inf is the attack on the exact tables.
    """
    area = df.groupby(["variant", "unit", "setting", "mechanism", "method"], dropna=False)["match_rate"].mean()
    area = area.reset_index()
    base = area[area["mechanism"] == BASELINE]
    best = base.loc[base.groupby(["variant", "unit"])["match_rate"].idxmax(), ["variant", "unit", "method", "match_rate"]]
    best = best.rename(columns={"method": "best_baseline", "match_rate": "baseline_area"})
    rap = area[area["mechanism"] != BASELINE].rename(columns={"match_rate": "rap_area"}).drop(columns="method")
    out = rap.merge(best, on=["variant", "unit"])
    out["lift"] = out["rap_area"] - out["baseline_area"]
    util = df[df["mechanism"] != BASELINE].groupby(["variant", "unit", "setting", "mechanism"])["utility_error"].first()
    return out.merge(util.reset_index(), on=["variant", "unit", "setting", "mechanism"])
