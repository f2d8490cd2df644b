"""censusrecon: how many people's records can be reconstructed from the tables you publish, beyond what
anyone could guess anyway, and does a differentially private release fix that?

The project's folders are its subpackages (``censusrecon.microdata``, ``censusrecon.reconstruct``,
``censusrecon.baselines``, ``censusrecon.synth``, ``censusrecon.experiments``); installed, nothing else
lands in site-packages. The library's public API is here, loaded when first used:

>>> import censusrecon
>>> censusrecon.rap_rank.__module__
'censusrecon.reconstruct.rap'
"""

from __future__ import annotations

import importlib
from pathlib import Path

# from a checkout (no install, or an editable one), the subpackages are the folders beside this one
_CHECKOUT = Path(__file__).resolve().parent.parent
if (_CHECKOUT / "pyproject.toml").is_file() and (_CHECKOUT / "experiments" / "__init__.py").is_file():
    __path__.append(str(_CHECKOUT))  # noqa: F821 (a package's __path__)

#: the public API: name -> the module that defines it
API = {
    "rap_rank": "reconstruct.rap", "rap_rank_units": "reconstruct.rap", "RAPSettings": "reconstruct.rap",
    "MarginalPlan": "reconstruct.queries", "plan_for": "reconstruct.queries",
    "Workload": "microdata.marginals", "answer": "microdata.marginals",
    "embedded_population": "microdata.population",
    "load_config": "experiments.config", "parse_config": "experiments.config", "ConfigError": "experiments.config",
    "resolve": "experiments.problem", "run_experiment": "experiments.runner",
    "evaluate_release": "experiments.release.evaluate", "audit_release": "experiments.release.audit",
    "MechanismKind": "synth.registry", "register_mechanism": "synth.registry",
    "AttackKind": "reconstruct.attacks", "register_attack": "reconstruct.attacks",
}
_RENAMED = {"register_mechanism": "register", "register_attack": "register"}
__all__ = sorted(API)


def __getattr__(name: str):
    if name not in API:
        raise AttributeError(f"module 'censusrecon' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"censusrecon.{API[name]}"), _RENAMED.get(name, name))
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(API))
