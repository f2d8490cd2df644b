"""Release programs made outside censusrecon, as a config names them: their environments checked before a run, their
files' digests for the results' fingerprint. The host that runs them is :mod:`synth.program_host`."""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path

from censusrecon.experiments.config import ConfigError, ExperimentConfig
from censusrecon.experiments.release.files import file_digest
from censusrecon.experiments.release.risks import anonymeter_python


#: the environments the shipped adapters run in, and the make target that makes each
ENV_TARGETS = {".venv-tumult": "make tumult-env", ".venv-smartnoise": "make smartnoise-env", ".venv-risk": "make risk-env"}


def check_environments(cfg: ExperimentConfig) -> None:
    """Every environment the config needs exists, checked before any work: anonymeter's where rows' risks
    are measured, and every command program's interpreter and script (a missing environment
    found after minutes of releases and attacks wastes them): a one-line error naming the program, the path
    and, for the shipped adapters' environments, the make target that makes it."""
    import shutil

    r = cfg.release
    if r is not None and r.risks and not cfg.target.whole_units and r.row_mechanisms:
        if anonymeter_python() is None:
            raise ConfigError(f"release.risks: the risks of the rows {', '.join(r.row_mechanisms)} publish are measured "
                              "with anonymeter, in an environment of its own: make risk-env (or release.risks: false: "
                              "then they are not measured, and those releases cannot be decided)")
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


def program_digests(cfg: ExperimentConfig) -> dict:
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
