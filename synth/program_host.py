"""Release programs made outside censusrecon: run over the ε grid on a unit's private data, attacked
like the tool's own releases, and audited as black boxes.

The contract. A program is called as

    release(persons, cells, domain, epsilon, runs, seed, relation, **params) -> array (runs × len(cells))

``persons``: one row a person of the unit; a column per attribute holding its value labels (as the
config's data declares them), ``unit`` (the unit's id), ``block`` (the block's id, when the
release publishes tables per block) and one column per level between them (``tract`` in a county).
``cells``: one row a published cell, as a tables release file has them (``table``, ``cell``,
``label``, ``level``, ``geography``) and, per attribute, the labels a person must have to be counted
in it (a list; None: any). ``domain``: {"attributes": {name: [labels]}, "places": [{"block": id,
<level>: id, ..., "unit": id}, ...]} — public: every value and every block, empty ones included,
so the program can bound a person's contribution without looking at the data. ``relation``:
``add_remove`` or ``replace_one``. The program returns ``runs`` independent releases, each one value
per row of ``cells``, and must draw fresh noise for each (``seed`` seeds it; the audit passes a new
one for every batch).

A command (``release.programs[].command``, for a program in an environment of its own) is started
once with ``--serve`` and given one job per line of standard input: a JSON object naming the same
as files (``persons`` P.parquet, ``cells`` C.parquet, ``domain`` D.json, ``epsilon``, ``runs``,
``seed``, ``relation``, ``params`` as JSON, ``out`` O.npy); it writes the array with numpy.save and
answers the line with "ok" or "error: why" (``synth/adapters/contract.py``'s ``serve`` does all of
it), so a library slow to start (Spark) starts once per evaluation.

The host runs them: ``cfg`` is an experiment's config (its ``data_file`` paths and ``release.relation``), ``spec``
one of its ``release.programs``."""

from __future__ import annotations

import importlib
import importlib.util
import json
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

from censusrecon.microdata.dataset import Dataset
from censusrecon.microdata.errors import ConfigError
from censusrecon.synth.release_files import file_digest

#: programs loaded from a file, by path and name: a file's module is executed once per session
_LOADED: dict[tuple, object] = {}


#: running command programs, one per command line: started once and fed one job per line
_WORKERS: dict[tuple, tuple] = {}

#: what a program's ledger entry and report say of its privacy
PROGRAM_NOTE = ("run by censusrecon, made outside it: its ε is the program's own accounting, audited as a black box "
                "(neighbours of the real data, the program's outputs only)")


def program_inputs(D: Dataset, unit: str, layout, blocks: list[str] | None, areas: dict | None
                   ) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """The contract's persons, cells and domain for D (the persons the release protects) of ``unit``.
    ``blocks``: the unit's public block list (ids, in BLOCK's order) when BLOCK is published; ``areas``:
    per level between the unit and its blocks, each area's id and its blocks' positions."""
    dom = D.domain
    attrs = [a for a in dom.names if a != "BLOCK"]
    persons = pd.DataFrame({a: np.asarray(dom.attribute(a).values, dtype=object)[D.column(a)] for a in attrs})
    persons["unit"] = unit
    area_of = {lv: {b: name for name, members in listed for b in members} for lv, listed in (areas or {}).items()}
    if blocks is not None:
        codes = D.column("BLOCK")
        persons["block"] = np.asarray(blocks, dtype=object)[codes]
        for lv, where in area_of.items():
            persons[lv] = [where[int(b)] for b in codes]
        places = [{"block": b, **{lv: where[i] for lv, where in area_of.items()}, "unit": unit}
                  for i, b in enumerate(blocks)]
    else:
        places = [{"unit": unit}]
    cells = layout.rows[["table", "cell", "label", "level", "geography"]].copy()
    for a in attrs:
        labels = np.asarray(dom.attribute(a).values, dtype=object)
        cells[a] = [None if a not in s else [str(v) for v in labels[sorted(s[a])]] for s in layout.rows["sets"]]
    persons[attrs] = persons[attrs].astype(str)
    domain = {"attributes": {a: [str(v) for v in dom.attribute(a).values] for a in attrs}, "places": places}
    return persons, cells, domain


def one_way_inputs(inputs: tuple) -> tuple[tuple, np.ndarray]:
    """The contract's inputs for a program's first measurements (``release.programs[].measurements``):
    the same persons and domain, and as cells every one-way cell of the public domain (each value of
    each attribute at the unit; each block, when blocks are published); with each cell's true count."""
    persons, _, domain = inputs
    attrs = list(domain["attributes"])
    unit = domain["places"][0]["unit"]
    rows, truth = [], []
    for a in attrs:
        for v in domain["attributes"][a]:
            rows.append({"table": "ONE_WAY", "label": f"{a}={v}", "level": "unit", "geography": unit,
                         **{b: [v] if b == a else None for b in attrs}})
            truth.append(int((persons[a] == v).sum()))
    if "block" in domain["places"][0]:
        for place in domain["places"]:
            rows.append({"table": "ONE_WAY", "label": "block", "level": "block", "geography": place["block"],
                         **{b: None for b in attrs}})
            truth.append(int((persons["block"] == place["block"]).sum()))
    cells = pd.DataFrame(rows)
    cells.insert(1, "cell", np.arange(1, len(cells) + 1))
    return (persons, cells, domain), np.asarray(truth, dtype=np.int64)


def _callable(cfg, spec):
    """The program's function: module:function, or path/to/file.py:function from the config's folder."""
    where, name = spec.function.rsplit(":", 1)
    key = (cfg.data_file(where), name)
    if key in _LOADED:
        return _LOADED[key]
    try:
        if where.endswith(".py"):
            path = Path(cfg.data_file(where))
            if not path.exists():
                raise ConfigError(f"release.programs {spec.name!r}: {path} does not exist")
            mod_spec = importlib.util.spec_from_file_location(f"censusrecon_program_{spec.name}", path)
            module = importlib.util.module_from_spec(mod_spec)
            mod_spec.loader.exec_module(module)
        else:
            module = importlib.import_module(where)
    except ImportError as e:
        raise ConfigError(f"release.programs {spec.name!r}: cannot import {where} ({e}); is its environment "
                          "installed? (a program with pins of its own runs as a command)") from None
    fn = getattr(module, name, None)
    if not callable(fn):
        raise ConfigError(f"release.programs {spec.name!r}: {where} has no function {name!r}")
    _LOADED[key] = fn
    return fn


def run_program(cfg, spec, inputs: tuple, epsilon: float, runs: int,
                seed: int, width: int | None = None) -> np.ndarray:
    """``runs`` releases of the program on ``inputs`` (:func:`program_inputs`) at ``epsilon``, checked:
    a (runs × cells) array of finite numbers, else a one-line error naming the program. ``width``: the
    columns a stage of the program returns instead of cells (its spending ledger: one row per fit)."""
    persons, cells, domain = inputs
    relation = cfg.release.relation
    if spec.function is not None:
        out = _callable(cfg, spec)(persons.copy(), cells.copy(), domain, float(epsilon), int(runs), int(seed),
                                   relation, **spec.params)
    else:
        out = _run_command(cfg, spec, inputs, epsilon, runs, seed)
    try:
        out = np.asarray(out, dtype=np.float64)
    except (TypeError, ValueError):
        raise ConfigError(f"release.programs {spec.name!r} returned something that is not an array of numbers") \
            from None
    if out.ndim == 1 and runs == 1:
        out = out[None, :]
    want = len(cells) if width is None else width
    if width is not None and out.shape == (runs, len(cells)) != (runs, width):
        raise ConfigError(f"release.programs {spec.name!r} returned releases where its recorded measurements were asked "
                          f"for (params {spec.params}): it records none, so its white box cannot be read; make it return "
                          "its ledger when asked (synth/audit/spending.py's LEDGER), or remove release.programs[].spending")
    if out.shape != (runs, want):
        raise ConfigError(f"release.programs {spec.name!r} returned an array of shape {out.shape}; the contract is "
                          f"({runs} releases × {want} {'cells' if width is None else 'columns'})")
    if not np.all(np.isfinite(out)):
        raise ConfigError(f"release.programs {spec.name!r} returned values that are not finite numbers")
    return out


def _worker(argv: list[str], name: str):
    """The command's worker process (``--serve``), started on first use and kept for the session."""
    import atexit

    key = tuple(argv)
    proc = _WORKERS.get(key, (None,))[0]
    if proc is not None and proc.poll() is None:
        return _WORKERS[key]
    if proc is not None:  # it ended (a crash, a kill): its log goes with it, a new worker gets its own
        Path(_WORKERS.pop(key)[1]).unlink(missing_ok=True)
    log = tempfile.NamedTemporaryFile(prefix="censusrecon-program-", suffix=".log", delete=False)
    try:
        proc = subprocess.Popen(argv + ["--serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                                text=True)
    except OSError as e:
        log.close()
        Path(log.name).unlink(missing_ok=True)
        raise ConfigError(f"release.programs {name!r}: cannot run {argv[0]} ({e.strerror}); is its environment "
                          "made? (see its make target)") from None
    _WORKERS[key] = (proc, log.name)
    if len(_WORKERS) == 1:
        atexit.register(stop_workers)
    return _WORKERS[key]


def stop_workers() -> None:
    """End every command program's worker process (its library with it: a Spark JVM, a SmartNoise fit's
    memory); the next call starts a new one."""
    for proc, log in _WORKERS.values():
        if proc.poll() is None:
            proc.stdin.close()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
        Path(log).unlink(missing_ok=True)
    _WORKERS.clear()


def _run_command(cfg, spec, inputs: tuple, epsilon: float, runs: int,
                 seed: int) -> np.ndarray:
    persons, cells, domain = inputs
    argv = [cfg.data_file(a) if (Path(cfg.data_file(a) or "").exists() and not Path(a).is_absolute()) else a
            for a in spec.command]
    proc, log = _worker(argv, spec.name)
    with tempfile.TemporaryDirectory(prefix="censusrecon-program-") as tmp:
        t = Path(tmp)
        persons.to_parquet(t / "persons.parquet", index=False)
        cells.to_parquet(t / "cells.parquet", index=False)
        (t / "domain.json").write_text(json.dumps(domain))
        job = {"persons": str(t / "persons.parquet"), "cells": str(t / "cells.parquet"),
               "domain": str(t / "domain.json"), "epsilon": float(epsilon), "runs": int(runs), "seed": int(seed),
               "relation": cfg.release.relation, "params": json.dumps(spec.params), "out": str(t / "out.npy")}
        try:
            proc.stdin.write(json.dumps(job) + "\n")
            proc.stdin.flush()
            answer = proc.stdout.readline().strip()
        except (BrokenPipeError, OSError):
            answer = ""
        if not answer:  # the worker died: its last words
            last = (Path(log).read_text(errors="replace").strip().splitlines() or ["no message"])[-1]
            _WORKERS.pop(tuple(argv), None)
            Path(log).unlink(missing_ok=True)
            raise ConfigError(f"release.programs {spec.name!r} stopped (exit status {proc.poll()}): {last}")
        if answer != "ok":
            raise ConfigError(f"release.programs {spec.name!r} failed: {answer.removeprefix('error: ')}")
        if not (t / "out.npy").exists():
            raise ConfigError(f"release.programs {spec.name!r} wrote no output")
        return np.load(t / "out.npy")


def publication_seed() -> int:
    """The seed a program is given for a release that is published: the operating system's secure randomness,
    drawn for that call and written nowhere (not the config, the ledger, the report or the results), so that no one
    can rebuild it, whatever the program does with it. A seed derived from the public config would make the noise of
    a program that is a function of its seed recomputable by anyone (ε = ∞)."""
    import secrets

    return secrets.randbits(31)


#: the environments the shipped adapters run in, and the make target that makes each
ENV_TARGETS = {".venv-tumult": "make tumult-env", ".venv-smartnoise": "make smartnoise-env", ".venv-risk": "make risk-env"}


def check_program_environments(cfg) -> None:
    """Every command program's interpreter and script exists (before any work): a one-line error naming the
    program, the path and, for the shipped adapters' environments, the make target that makes it."""
    for spec in cfg.release.programs if cfg.release else []:
        if spec.command is None:
            continue
        for i, arg in enumerate(spec.command[:2]):
            local = cfg.data_file(arg) if not Path(arg).is_absolute() else arg
            found = Path(local).exists() or (i == 0 and "/" not in arg and shutil.which(arg) is not None)
            if i == 1 and not arg.endswith(".py"):
                continue  # an argument, not a script
            if not found:
                env = next((t for d, t in ENV_TARGETS.items() if d in Path(local).parts), None)
                raise ConfigError(f"release.programs {spec.name!r}: {local} does not exist"
                                  + (f"; its environment is made by `{env}`" if env else
                                     "; is its environment made?"))


def program_digests(cfg) -> dict:
    """SHA-256 of every file a program names (its .py, the script a command runs), so that a result saved
    for one version of a program is not taken for another's."""
    out = {}
    for spec in cfg.release.programs:
        where = [spec.function.rsplit(":", 1)[0]] if spec.function else list(spec.command)
        for w in where:
            path = Path(cfg.data_file(w)) if not Path(w).is_absolute() else Path(w)
            if spec.function and not w.endswith(".py"):  # a module: the file it is imported from
                try:
                    found = importlib.util.find_spec(w)
                except (ImportError, ValueError):
                    found = None
                path = Path(found.origin) if found is not None and found.origin else path
            if path.suffix == ".py" and path.is_file():
                out[f"program:{spec.name}:{w}"] = file_digest(path)
    return out
