"""Run directories keyed by config hash; atomic JSON/YAML/Parquet writes; the run manifest."""

from __future__ import annotations

import json
import logging
import platform
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Callable

import pandas as pd
import pyarrow as pa
import yaml

# atomic_write_text is imported from here by the commands' modules too
from censusrecon.microdata.dataset import atomic_write_table, atomic_write_text  # noqa: F401
from censusrecon.experiments.config import ConfigError, load_config

log = logging.getLogger(__name__)


def write_json(path: Path, obj) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


def write_yaml(path: Path, obj) -> None:
    atomic_write_text(path, yaml.safe_dump(obj, sort_keys=False))


def write_parquet(path: Path, df: pd.DataFrame) -> None:
    atomic_write_table(pa.Table.from_pandas(df, preserve_index=False), path)


@dataclass(frozen=True)
class UnitTask:
    """One piece of work a store keeps: a unit and its BLOCK variant (``run``, ``evaluate-release``), and for a
    sweep's task also its method and seed. ``id`` names its files."""

    unit: str
    with_block: bool
    method: str = ""
    seed: int | None = None

    @property
    def id(self) -> str:
        stem = f"{'block' if self.with_block else 'noblock'}_{self.unit}"
        return stem if not self.method else f"{stem}_{self.method}_s{self.seed}"

    @property
    def label(self) -> str:
        """The task in words, for a progress line."""
        return self.id if self.method else f"{self.unit} {'with' if self.with_block else 'without'} BLOCK"


class UnitStore:
    """One result per :class:`UnitTask` of a run, a sweep or a release evaluation, under ``run_dir/<folder>/``:
    its curves (``<id>.parquet``), the microdata it published if any (``<id>.micro.parquet``) and its facts
    (``<id>.json``, written last: its presence with this code's fingerprint, and the same release ``inputs``,
    marks the task done). A call killed at any moment loses no finished task; the next one, on any backend,
    computes only those not done (:func:`finish`)."""

    def __init__(self, run_dir: Path, fingerprint: str, inputs: dict | None = None, folder: str = "units"):
        self.dir, self.fingerprint, self.inputs = Path(run_dir) / folder, fingerprint, inputs

    def stem(self, task: UnitTask) -> Path:
        return self.dir / task.id

    def done(self, task: UnitTask) -> bool:
        stem = self.stem(task)
        try:
            facts = json.loads(stem.with_suffix(".json").read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return False
        if facts.get("code_fingerprint") != self.fingerprint:
            log.warning("%s was computed by other code (%s); recomputing", stem.name, facts.get("code_fingerprint"))
            return False
        return (self.inputs is None or facts.get("release_files", {}) == self.inputs) and stem.with_suffix(
            ".parquet").exists()

    def save(self, task: UnitTask, curves: pd.DataFrame, facts: dict, micro: pd.DataFrame | None = None,
             frames: dict[str, pd.DataFrame] | None = None) -> dict:
        """Write one task's result, the JSON last; returns it as :meth:`load` would. ``frames``: more tables of
        the task, each in ``<id>.<name>.parquet`` (the inference games' scores)."""
        stem = self.stem(task)
        facts = {**facts, "code_fingerprint": self.fingerprint}
        if self.inputs is not None:
            facts["release_files"] = self.inputs
        write_parquet(stem.with_suffix(".parquet"), curves)
        if micro is not None:  # before the JSON: a task counts as done only with all its files
            write_parquet(stem.with_suffix(".micro.parquet"), micro)
            facts["micro"] = True
        for name, df in (frames or {}).items():
            write_parquet(stem.with_suffix(f".{name}.parquet"), df)
        facts["frames"] = sorted(frames or {})
        write_json(stem.with_suffix(".json"), facts)
        return {**facts, "curves": curves, "micro_rows": micro, **(frames or {})}

    def load(self, task: UnitTask) -> dict:
        stem = self.stem(task)
        facts = json.loads(stem.with_suffix(".json").read_text())
        facts["curves"] = pd.read_parquet(stem.with_suffix(".parquet"))
        facts["micro_rows"] = pd.read_parquet(stem.with_suffix(".micro.parquet")) if facts.get("micro") else None
        for name in facts.get("frames", []):
            facts[name] = pd.read_parquet(stem.with_suffix(f".{name}.parquet"))
        return facts


#: the places a long command runs its units: this process, or a Ray cluster
BACKENDS = ("local", "ray")


def check_backend(backend: str) -> None:
    """A user error, before any work, for a backend that is none of :data:`BACKENDS`."""
    if backend not in BACKENDS:
        raise ConfigError(f"unknown backend {backend!r}; use 'local' or 'ray'")


@dataclass(frozen=True)
class RayTasks:
    """Where a long command's tasks run on Ray: each item ``fn(*args, item)`` as one Ray task, in the running Ray
    session or one of its own: a cluster to join (``address``) or a local one of ``num_cpus`` CPUs (default all)."""

    fn: Callable
    args: tuple = ()
    address: str | None = None
    num_cpus: int | None = None
    gpu: bool = False  # each task takes one GPU where the cluster has GPUs (tasks that fit RAP-Rank)


def task_resources(gpu: bool, cluster: dict) -> dict:
    """What one Ray task asks for: a CPU, and one GPU when it wants one (``gpu``) and the cluster (``cluster``, as
    ``ray.cluster_resources()`` gives it) has any, so that every GPU of a node fits its own task's units and
    Ray sets each task's CUDA_VISIBLE_DEVICES to its own GPU.

    >>> task_resources(True, {"CPU": 32.0, "GPU": 4.0}), task_resources(True, {"CPU": 2.0})
    ({'num_cpus': 1, 'num_gpus': 1}, {'num_cpus': 1, 'num_gpus': 0})
    >>> task_resources(False, {"CPU": 32.0, "GPU": 4.0})
    {'num_cpus': 1, 'num_gpus': 0}
    """
    return {"num_cpus": 1, "num_gpus": 1 if gpu and float(cluster.get("GPU", 0)) >= 1 else 0}


@dataclass(frozen=True)
class Hooks:
    """What a long command hears from its resume loop: ``on_found(n)`` how many tasks were done already,
    ``on_start(chunk)`` before a local call, ``on_next(chunk)`` with the chunk after it (to prepare it meanwhile),
    ``on_done(task)`` as each finishes, ``on_idle()`` every ``idle_s``
    seconds without one (Ray)."""

    on_found: Callable | None = None
    on_start: Callable | None = None
    on_next: Callable | None = None
    on_done: Callable | None = None
    on_idle: Callable | None = None
    idle_s: float | None = None


def finish(store: UnitStore, tasks: list[UnitTask], compute: Callable[[list[UnitTask]], list[dict]], *,
           group: int = 1, ray: RayTasks | None = None, hooks: Hooks = Hooks()
           ) -> tuple[dict[UnitTask, dict], list[UnitTask]]:
    """The one resume loop of ``run``, ``sweep`` and ``evaluate-release``: every task of ``tasks`` not done in
    ``store`` is computed, in this process by ``compute`` (``group`` tasks per call, which saves and returns
    each) or, given ``ray``, as one Ray task each (which saves it where the driver reads it); then every task's
    result, this process's or its files. Returns ``({task: result}, the tasks computed by this call)``."""
    todo = [t for t in tasks if not store.done(t)]
    if hooks.on_found is not None:
        hooks.on_found(len(tasks) - len(todo))
    fresh: dict[UnitTask, dict] = {}
    if ray is None:
        for start in range(0, len(todo), group):
            chunk = todo[start:start + group]
            if hooks.on_start is not None:
                hooks.on_start(chunk)
            after = todo[start + group:start + 2 * group]
            if hooks.on_next is not None and after:
                hooks.on_next(after)
            for t, result in zip(chunk, compute(chunk)):
                fresh[t] = result
                if hooks.on_done is not None:
                    hooks.on_done(t)
    else:
        for t in on_ray(ray, todo, hooks):
            if hooks.on_done is not None:
                hooks.on_done(t)
    return {t: fresh[t] if t in fresh else store.load(t) for t in tasks}, todo


@contextmanager
def ray_session(backend: str, address: str | None, num_cpus: int | None):
    """A Ray session for the ``ray`` backend (nothing for ``local``): a local cluster of ``num_cpus`` CPUs, or the
    cluster at ``address``, started here unless one is running and shut down when the block ends, so that a
    command's unit tasks and audit tasks share one start."""
    if backend != "ray":
        yield
        return
    try:
        import ray
    except ImportError:
        raise ConfigError("the ray backend needs Ray: pip install 'censusrecon[ray]'") from None
    started_here = not ray.is_initialized()
    if started_here:
        ray.init(address=address, num_cpus=None if address else num_cpus, include_dashboard=False,
                 log_to_driver=False, logging_level=logging.WARNING)
    try:
        yield
    finally:
        if started_here:
            ray.shutdown()


def on_ray(tasks: RayTasks, items: list, hooks: Hooks = Hooks(), with_item: bool = False):
    """Yield the result of each Ray task ``tasks.fn(*tasks.args, item)``, one per item of ``items``, as it finishes
    (``with_item``: as ``(item, result)``), in the running Ray session or one of its own (:func:`ray_session`);
    ``hooks.on_idle()`` every ``hooks.idle_s`` seconds without a finished task. A task Ray retries after its worker
    died counts once."""
    with ray_session("ray", tasks.address, tasks.num_cpus):
        import ray

        remote = ray.remote(**task_resources(tasks.gpu, ray.cluster_resources()))(tasks.fn)
        refs = {remote.remote(*tasks.args, item): item for item in items}
        pending = list(refs)
        while pending:
            done, pending = ray.wait(pending, num_returns=1, timeout=hooks.idle_s)
            for d in done:
                yield (refs[d], ray.get(d)) if with_item else ray.get(d)
            if not done and hooks.on_idle is not None:
                hooks.on_idle()


def versions() -> dict[str, str]:
    out = {"python": sys.version.split()[0], "platform": platform.platform()}
    for pkg in ("censusrecon", "jax", "jaxlib", "optax", "numpy", "pandas", "pyarrow", "pydantic", "matplotlib"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = "not installed"
    return out


_PACKAGES = ("microdata", "reconstruct", "baselines", "synth", "experiments")


def code_fingerprint() -> str:
    """12 hex digits of the SHA-256 of our packages' source: results computed by other code
    (an upgrade, a local edit) are never silently reused by a resumed run."""
    import hashlib
    import importlib

    h = hashlib.sha256()
    for name in _PACKAGES:
        pkg_dir = Path(importlib.import_module(f"censusrecon.{name}").__file__).parent
        for f in sorted(pkg_dir.rglob("*.py")):
            h.update(str(f.relative_to(pkg_dir.parent)).encode())
            h.update(f.read_bytes())
    return h.hexdigest()[:12]


def jax_info() -> dict:
    """The backend, its devices, this process's compiles so far (seconds, programs, persistent-cache hits:
    a run's compile time apart from its fitting time; see :mod:`reconstruct.compile_cache`), and the census
    kernels ``kernel: auto`` chose, with why (:mod:`reconstruct.kernel_choice`)."""
    import jax

    from censusrecon.reconstruct.compile_cache import compile_facts
    from censusrecon.reconstruct.kernel_choice import choices

    return {"backend": jax.default_backend(), "devices": [str(d) for d in jax.devices()], "compile": compile_facts(),
            "kernel_choices": choices()}


def results_dir(arg: str | Path, out: str | Path = "results", overrides: list[str] | None = None) -> Path:
    """The results directory a command was given: the directory itself, or for a config file (with
    the ``--set`` overrides its run had) the directory its run wrote (``out/<name>/<config-hash>/``;
    its ``release/`` when only evaluate-release ran)."""
    arg = Path(arg)
    if arg.suffix not in (".yaml", ".yml") or not arg.is_file():
        if overrides:
            raise ConfigError("--set needs a config, not a results directory")
        return arg
    cfg = load_config(arg, overrides)
    run = Path(out) / cfg.name / cfg.digest()
    if not (run / "match_rate.parquet").exists() and (run / "release" / "release_eval.parquet").exists():
        return run / "release"
    return run


def results_kind(run_dir: str | Path) -> str:
    """"run" (censusrecon run), "release" (censusrecon evaluate-release) or "sweep" (censusrecon
    sweep, and no run of the same config) for a finished results directory; a user error naming
    what is wrong otherwise."""
    run_dir = Path(run_dir)
    if not run_dir.exists():
        raise ConfigError(f"results directory {str(run_dir)!r} does not exist")
    if not run_dir.is_dir():
        raise ConfigError(f"{str(run_dir)!r} is a file; give a results directory: OUT/<name>/<config-hash>/ or its "
                          "release/ subdirectory")
    if (run_dir / "release_eval.parquet").exists():
        return "release"
    if (run_dir / "match_rate.parquet").exists():
        return "run"
    if (run_dir / "sweep.json").exists():
        return "sweep"
    hint = " (its release/ subdirectory holds the release evaluation)" if (run_dir / "release").is_dir() else ""
    raise ConfigError(f"{run_dir} is not a finished results directory{hint}: it has no match_rate.parquet "
                      "(censusrecon run), release_eval.parquet (censusrecon evaluate-release) or sweep.json (censusrecon "
                      "sweep)")


@contextmanager
def nothing_half_made(run_dir: str | Path):
    """Around a command that writes ``run_dir``: if it fails (or is interrupted), the folders it
    created are removed when they hold nothing finished (only the config copy, temporary files and
    empty folders); finished work is kept, and said on stderr, for a rerun of the same command to
    resume from. A directory that existed before is never touched."""
    import shutil

    run_dir = Path(run_dir)
    made = [p for p in [run_dir, *run_dir.parents] if not p.exists()]  # what this command creates
    try:
        yield
    except BaseException:
        if run_dir.exists():
            finished = [f for f in run_dir.rglob("*") if f.is_file() and f.name != "config.yaml"
                        and not f.name.endswith(".tmp")]
            if not finished and made:
                shutil.rmtree(made[-1], ignore_errors=True)
            elif finished:
                print(f"censusrecon: {len(finished)} finished file(s) kept in {run_dir}: rerun the same command to "
                      "resume from them", file=sys.stderr)
        raise


def run_seconds(this_call: float, resumed: list[dict]) -> dict:
    """A run's time, resumed or not: ``seconds_total`` is this call's time plus the time the units
    found finished from earlier calls took then (``seconds_unit`` in each unit's facts);
    ``seconds_this_call`` and ``units_resumed`` say how it splits. Units saved before their time
    was recorded count 0 and are counted in ``units_without_time``."""
    earlier = sum(float(f.get("seconds_unit", 0.0)) for f in resumed)
    return {"seconds_total": round(this_call + earlier, 2), "seconds_this_call": round(this_call, 2),
            "units_resumed": len(resumed), "units_without_time": sum("seconds_unit" not in f for f in resumed)}


def time_words(manifest: dict) -> str:
    """'504 s' or '504 s in all (3 s in this call; 6 units finished by earlier calls)', and the seconds this call
    spent compiling where it counted them.

    >>> time_words({"seconds_total": 504.2, "jax": {"compile": {"compiles": 9, "compile_seconds": 71.4}}})
    '504 s (71 s of it compiling 9 programs)'
    >>> time_words({"seconds_total": 504.2, "seconds_this_call": 3.1, "units_resumed": 6,
    ...             "jax": {"compile": {"compiles": 9, "compile_seconds": 0.6, "cache_hits": 9}}})
    '504 s in all (3 s in this call; 6 units finished by earlier calls; 1 s compiling 9 programs, 9 loaded from the compilation cache)'
    """
    total = float(manifest.get("seconds_total", float("nan")))
    resumed = int(manifest.get("units_resumed", 0))
    compiled = (manifest.get("jax") or {}).get("compile") or {}
    compiling = ""
    if compiled.get("compiles"):  # apart: a second run of the same shapes loads the programs instead
        hits = compiled.get("cache_hits", 0)
        compiling = (f"{compiled['compile_seconds']:.0f} s compiling {compiled['compiles']} programs"
                     + (f", {hits} loaded from the compilation cache" if hits else ""))
    if not resumed:
        return f"{total:.0f} s" + (f" ({compiling.replace(' s compiling', ' s of it compiling', 1)})" if compiling else "")
    untimed = int(manifest.get("units_without_time", 0))
    return (f"{total:.0f} s in all ({manifest['seconds_this_call']:.0f} s in this call; {resumed} unit"
            f"{'s' if resumed > 1 else ''} finished by earlier calls"
            + (f", {untimed} of them without a recorded time" if untimed else "")
            + (f"; {compiling}" if compiling else "") + ")")
