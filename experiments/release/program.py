"""Release programs made outside censusrecon, as a config names them: their environments checked before a run, with
the anonymeter environment. The host that runs them, checks their environments and digests their
files is :mod:`synth.program_host`."""

from __future__ import annotations

from censusrecon.experiments.config import ConfigError, ExperimentConfig
from censusrecon.synth.program_host import check_program_environments
from censusrecon.experiments.release.risks import anonymeter_python


def check_environments(cfg: ExperimentConfig) -> None:
    """Every environment the config needs exists, checked before any work: anonymeter's where rows' risks
    are measured, and every command program's interpreter and script
    (:func:`synth.program_host.check_program_environments`; a missing environment found after minutes of
    releases and attacks wastes them): a one-line error naming what is missing and the make target that makes it."""
    r = cfg.release
    if r is not None and r.risks and not cfg.target.whole_units and r.row_mechanisms:
        if anonymeter_python() is None:
            raise ConfigError(f"release.risks: the risks of the rows {', '.join(r.row_mechanisms)} publish are measured "
                              "with anonymeter, in an environment of its own: make risk-env (or release.risks: false: "
                              "then they are not measured, and those releases cannot be decided)")
    check_program_environments(cfg)
