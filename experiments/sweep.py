"""Sweeps beyond one process: (unit × method × seed) tasks on a local loop or a Ray cluster, resumable.

The exact attack is one task per unit (``method: exact``): a sweep of a config with ``attack.exact``
and ``sweep.methods: [exact]`` attacks every tract of a state one tract a task, and pools the tracts
into the Bureau-shaped tables (zero variability and agreement by block size, reidentification) of
its ``report.md``."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import pandas as pd

from censusrecon.reconstruct import attacks
from censusrecon.experiments.config import ConfigError, ExperimentConfig, parse_config
from censusrecon.experiments.metrics import by_seed, persons_reconstructed
from censusrecon.experiments.progress import UnitProgress
from censusrecon.experiments.report import write_sweep_report
from censusrecon.experiments.results import Hooks, RayTasks, UnitStore, UnitTask, check_backend, code_fingerprint, finish, write_json, write_parquet, write_yaml

log = logging.getLogger(__name__)


#: a sweep's task: a unit, its BLOCK variant, one method (a RAP-Rank method name, another attack's, "exact" or
#: "baselines") and one seed, kept in the store every long command shares
Task = UnitTask


def plan_tasks(cfg: ExperimentConfig) -> list[Task]:
    """Every (seed × BLOCK variant × unit × method) task; ``sweep.methods`` keeps only those named.
    Units nobody lives in are not attacked (as in a run)."""
    from censusrecon.experiments.problem import method_names, resolve

    units = resolve(cfg).units
    methods = method_names(cfg) + ["baselines"]
    if cfg.sweep.methods is not None:
        unknown = [m for m in cfg.sweep.methods if m not in methods]
        if unknown:
            raise ConfigError(f"sweep.methods {unknown} are not tasks of this config; its tasks are {methods}"
                              + ("" if cfg.attack.exact else " (the exact attack needs attack.exact: true)"))
        methods = [m for m in methods if m in cfg.sweep.methods]
    return [Task(u, wb, m, s) for s in cfg.sweep.seeds for wb in cfg.target.with_block for u in units for m in methods]


#: seconds between the driver's looks at its running tasks' progress (a line only when one moved)
PROGRESS_EVERY_S = 60.0


class TaskProgress:
    """A running task's progress where the sweep's driver can read it: ``<task id>.progress.json``
    beside its result, rewritten atomically after each compiled batch of RAP runs (runs done of
    K, what is being fitted, seconds since the task started) and removed when the task's result
    is written. It stands in for the run's tqdm bar in :func:`experiments.runner.run_units`."""

    def __init__(self, path: Path, task: str, say=None):
        self.path, self.task, self.say = Path(path), task, say
        self.t0 = self.said = time.perf_counter()
        self.what, self.n, self.total = "", 0, 0

    def reset(self, total: int) -> None:
        self.n, self.total = 0, total
        self._write()

    def set_description(self, text: str) -> None:
        self.what = text
        self._write()

    def update(self, n: int = 1) -> None:
        self.n += n
        state = self._write()
        if self.say is not None and time.perf_counter() - self.said >= PROGRESS_EVERY_S:  # the driver's process
            self.said = time.perf_counter()
            self.say(running_line(state))

    def _write(self) -> dict:
        state = {"task": self.task, "what": self.what, "done": self.n, "total": self.total,
                 "seconds": round(time.perf_counter() - self.t0, 1)}
        write_json(self.path, state)
        return state

    def close(self) -> None:
        self.path.unlink(missing_ok=True)


def running_lines(out: Path, seen: dict) -> list[str]:
    """One line for each running task whose progress moved since ``seen`` (updated in place):
    what it fits, runs done of K and its minutes so far."""
    lines = []
    for f in sorted(Path(out).glob("*.progress.json")):
        try:
            p = json.loads(f.read_text())
        except (json.JSONDecodeError, OSError):  # a task finishing as we look
            continue
        state = (p.get("what"), p.get("done"))
        if seen.get(p["task"]) == state or not p.get("total"):
            continue
        seen[p["task"]] = state
        lines.append(running_line(p))
    return lines


def running_line(p: dict) -> str:
    """A running task's progress (a :class:`TaskProgress` state) as one line."""
    return f"  running {p['task']}: {p['what']} {p['done']}/{p['total']} ({p['seconds'] / 60:.1f} min so far)"


def run_task(cfg_json: dict, base_dir: str | None, run_dir: str, fingerprint: str, task: Task) -> Task:
    """Run one task where the config is all there is (a Ray worker) and save it (:func:`task_result`); the worker
    keeps its compiled programs in the compilation cache as the command line does, so the tasks after the first
    of a shape load them."""
    from censusrecon.reconstruct.compile_cache import use_compilation_cache

    use_compilation_cache()
    task_result(cfg_json, base_dir, run_dir, fingerprint, task)
    return task


def task_result(cfg_json: dict, base_dir: str | None, run_dir: str, fingerprint: str, task: Task,
                say=None) -> dict:
    """Run one task and save it in the sweep's store (``run_dir/tasks/``); returns it as the store loads it.
    ``base_dir`` is the config's folder, where its relative data paths are read from. While it runs, its RAP
    fits' progress is in ``<task id>.progress.json`` (:class:`TaskProgress`), and ``say`` (the local backend's)
    also gets a line a minute."""
    from censusrecon.experiments.problem import resolve
    from censusrecon.experiments.runner import run_unit

    t0 = time.perf_counter()
    cfg = parse_config(cfg_json).model_copy(update={"seed": task.seed}).with_base_dir(base_dir)
    store = UnitStore(Path(run_dir), fingerprint, folder="tasks")
    progress = TaskProgress(store.dir / f"{task.id}.progress.json", task.id, say)
    try:
        df, facts = run_unit(resolve(cfg), task.unit, task.with_block, runs_bar=progress, only={task.method})
    finally:
        progress.close()
    marker = {"task": task.__dict__, "seconds": facts["seconds"], "wall_seconds": round(time.perf_counter() - t0, 3),
              "rows": facts["rows"]}
    if facts.get("strength"):  # a RAP task: persons by its first k runs, pooled into strength.parquet
        marker["strength"] = [dict(x, unit=task.unit, variant=task.with_block, seed=task.seed)
                              for x in facts["strength"]]
    kind = attacks.kind_of(task.method)
    if kind is not None and kind.facts:  # what the state's tables pool: solve, certificates, by block size, agreement
        marker["unit_facts"] = {k: facts[k] for k in ("unit", "with_block", "rows", *kind.facts) if k in facts}
    return store.save(task, df.assign(seed=task.seed), marker)


def sweep(cfg: ExperimentConfig, out_root: str | Path = "results", backend: str = "local",
          address: str | None = None, progress: bool = True) -> dict:
    """Run every (unit × method × seed) task not yet finished; a rerun skips finished tasks.

    Each task writes its Parquet, then its JSON, atomically under ``results/<name>/<hash>/tasks/``
    (:class:`experiments.results.UnitStore`, through the resume loop ``run`` and ``evaluate-release`` use);
    a sweep killed at any moment (even SIGKILL) loses no finished task and, rerun, recomputes none.
    ``backend="ray"`` fans tasks out over a Ray cluster (``address`` to join one; default a local cluster
    with ``sweep.num_cpus`` CPUs).
    """
    check_backend(backend)
    t0 = time.perf_counter()
    run_dir = Path(out_root) / cfg.name / cfg.digest()
    tasks = plan_tasks(cfg)
    fingerprint = code_fingerprint()
    store = UnitStore(run_dir, fingerprint, folder="tasks")
    out = store.dir
    out.mkdir(parents=True, exist_ok=True)
    for stale in [*out.glob(".*.tmp"), *out.glob("*.progress.json")]:  # left by tasks killed mid-way
        stale.unlink(missing_ok=True)
    write_yaml(run_dir / "config.yaml", cfg.model_dump(mode="json"))
    cfg_json = cfg.model_dump(mode="json")
    bar = UnitProgress(len(tasks), "sweep tasks", progress)  # a bar on a terminal, a line per task elsewhere
    seen: dict = {}

    def idle() -> None:  # a minute without a finished task: say how the running ones are doing
        for line in running_lines(out, seen):
            bar.say(line)

    args = (cfg_json, cfg.base_dir, str(run_dir), fingerprint)
    results, computed = finish(
        store, tasks, lambda chunk: [task_result(*args, t, say=bar.say) for t in chunk],
        ray=RayTasks(run_task, args, address, cfg.sweep.num_cpus, gpu=True) if backend == "ray" else None,
        hooks=Hooks(on_found=lambda n: bar.found(n, run_dir), on_done=lambda t: bar.update(1, t.id), on_idle=idle,
                    idle_s=PROGRESS_EVERY_S))
    bar.close()
    curves = pd.concat([results[t]["curves"] for t in tasks], ignore_index=True)
    write_parquet(run_dir / "sweep_match_rate.parquet", curves)
    per_seed = by_seed(curves)
    write_parquet(run_dir / "persons.parquet", persons_reconstructed(per_seed))
    if not curves.empty and curves["method"].nunique() > 1:
        from censusrecon.experiments.plots import plot_match_rate

        plot_match_rate(per_seed, run_dir / "match_rate", title=f"{cfg.name}: {per_seed['unit'].nunique()} "
                        f"{cfg.target.level}s × seeds")
    markers = {t.id: results[t] for t in tasks}
    strength = [x for m in markers.values() for x in m.get("strength", [])]
    if strength:
        write_parquet(run_dir / "strength.parquet", by_seed(pd.DataFrame(strength)))
    summary = {"tasks_total": len(tasks), "tasks_run": len(computed), "tasks_skipped": len(tasks) - len(computed),
               "seconds": round(time.perf_counter() - t0, 2), "run_dir": str(run_dir)}
    for kind in attacks.ATTACKS:  # an attack's tasks pooled by the attack (the exact attack's tracts of a state)
        mine = [markers[t.id] for t in tasks if kind.pool is not None and t.method == kind.name]
        if mine:
            summary[kind.name] = kind.pool(run_dir, mine)
    summary["task_seconds"] = {t.id: markers[t.id]["wall_seconds"] for t in tasks}
    write_json(run_dir / "sweep.json", summary)

    summary["report"] = str(write_sweep_report(run_dir))
    summary.pop("task_seconds")  # in sweep.json and the report; too long for the terminal's last line
    return summary


#: A 2010 tract of average size (HDSR: about 4,257 persons in 85 occupied blocks).
AVERAGE_TRACT_2010 = 4257


def pool_exact(run_dir: Path, markers: list[dict]) -> dict:
    """The exact tasks' facts, pooled: ``exact_units.parquet`` (a row per unit and seed: persons,
    blocks, status, zero-variability blocks, seconds), ``agreement.parquet`` and ``reid.parquet``
    (every unit's rows), ``exact_units.json`` (the units' facts, for the report). Returns the
    timing figures: tracts solved, median seconds per tract, and the tract nearest 2010's average
    size with its persons, blocks and seconds."""
    rows, agree, reid, units = [], [], [], []
    for m in markers:
        f, seed = m.get("unit_facts", {}), m["task"]["seed"]
        units.append(dict(f, seed=seed))
        for label, e in f.get("exact", {}).items():
            rows.append({"unit": f["unit"], "seed": seed, "workload": label, "persons": f["rows"],
                         "status": e["status"], "blocks": e.get("coarse_blocks", e.get("blocks_solved")),
                         "blocks_zero_variability": e.get("coarse_blocks_zero_variability",
                                                          e.get("blocks_zero_variability")),
                         "zero_variability_complete": e.get("coarse_complete", e.get("certification_complete")),
                         "solvar_blocks_zero": e.get("solvar_blocks_zero"), "cumsolvar": e.get("cumsolvar"),
                         "solvar_p12_blocks_zero": e.get("solvar_p12_blocks_zero"),
                         "cumsolvar_p12": e.get("cumsolvar_p12"),
                         "certification_complete": e.get("certification_complete"),
                         "seconds_solve": e.get("seconds_solve"), "seconds_solvar": e.get("seconds_solvar"),
                         "seconds_zero_variability": e.get("seconds_coarse"), "seconds_certify": e.get("seconds_certify"),
                         "seconds_exact": m["seconds"].get(f"exact_{label}"), "seconds_task": m["wall_seconds"]})
        agree += [dict(x, unit=f["unit"], seed=seed) for x in f.get("agreement", [])]
        reid += [dict(x, unit=f["unit"], seed=seed) for x in f.get("reidentification", [])]
    table = pd.DataFrame(rows)
    if len(table):
        write_parquet(run_dir / "exact_units.parquet", table)
    for name, r in (("agreement.parquet", agree), ("reid.parquet", reid)):
        if r:
            write_parquet(run_dir / name, pd.DataFrame(r))
    write_json(run_dir / "exact_units.json", units)
    out = {"units": len(markers), "solved": int((table["status"] == "solved").sum()) if len(table) else 0}
    if len(table):
        out["median_seconds_per_unit"] = float(table["seconds_task"].median())
        near = table.iloc[int((table["persons"] - AVERAGE_TRACT_2010).abs().argmin())]
        measures = sum(float(near[k]) for k in ("seconds_solve", "seconds_solvar", "seconds_zero_variability")
                       if pd.notna(near[k]))
        out["nearest_average_2010_tract"] = {"unit": near["unit"], "persons": int(near["persons"]),
                                             "blocks": None if pd.isna(near["blocks"]) else int(near["blocks"]),
                                             "seconds": float(near["seconds_task"]),
                                             "seconds_bureau_measures": round(measures, 3)}
    return out


attacks.implement(attacks.EXACT_ATTACK, pool=pool_exact)  # the state's tracts pooled: by block size, agreement, reid
