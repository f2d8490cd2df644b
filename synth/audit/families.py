"""Audit families as values: what checks a noise law, how many tests it runs, registered by name.

A DP mechanism names the family that checks what it publishes (``MechanismKind.audit``); the audit looks that
name up here and calls the family's ``audit`` with a :class:`FamilyCall`. The built-in families (noisy tables, a
file fitted to them, a noisy histogram, a smoothed histogram's draws, TopDown's tree, a black-box program) live in
this room's ``*_audit`` modules and register themselves when first looked up; a new noise law brings its family in
one new file that calls :func:`register_family`.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable

from censusrecon.microdata.by_name import Registry
from censusrecon.microdata.errors import ConfigError

#: the modules whose families are built in, imported on the first look-up (they import this module)
BUILT_IN = ("table_audit", "histogram_audit", "tree_audit", "program_audit")


@dataclass(frozen=True)
class FamilyCall:
    """One family's audit of one mechanism at one ε and BLOCK variant, as :func:`synth.audit.jobs.audit_job` makes
    it: the study's door (``src``), the audited units, the audit's seed, the variant's cache of real instances
    (shared by the ε of one process) and the histograms' worst-case pairs on the small domain (None where the
    variant audits no mechanism)."""

    src: object
    mechanism: str
    epsilon: float
    with_block: bool
    seed: int
    units: tuple[str, ...]
    cache: dict
    small: tuple | None = None
    smallest: tuple | None = None


@dataclass(frozen=True)
class AuditFamily:
    """A family of noise laws and how the audit checks a mechanism of it.

    Attributes:
        name: what a mechanism names (``MechanismKind.audit``).
        tests: its statistical tests per result: (fixed, per audited unit), for the audit's Bonferroni level.
        audit: the audit of one mechanism at one ε: :class:`FamilyCall` -> ``AuditResult``.
        draws: one line saying what it draws (the API page lists the families with it).
    """

    name: str
    tests: tuple[int, int]
    audit: Callable
    draws: str

    def __post_init__(self):
        if not self.name or not self.name.replace("_", "").isalnum():
            raise ValueError(f"an audit family's name is letters, digits and underscores, got {self.name!r}")
        if len(self.tests) != 2 or min(self.tests) < 0 or not sum(self.tests):
            raise ValueError(f"audit family {self.name!r}: tests is (fixed, per unit), at least one test, "
                             f"got {self.tests!r}")
        if not callable(self.audit):
            raise ValueError(f"audit family {self.name!r}: audit is a function of a FamilyCall")


FAMILIES: Registry[AuditFamily] = Registry("audit family", AuditFamily, ConfigError)
_LOADED: list[str] = []  # "loading" while the built-in modules register theirs, then "loaded"


def _load_built_in() -> None:
    if not _LOADED:
        _LOADED.append("loading")
        for name in BUILT_IN:
            importlib.import_module(f"{__package__}.{name}")
        _LOADED[0] = "loaded"


def register_family(fam: AuditFamily, replace: bool = False) -> AuditFamily:
    """Register ``fam`` under its name, after the built-in families (a name taken is refused: a family is not
    replaced behind a mechanism's back, but by ``replace=True``, as a test may). The same family again is no change.
    Returns the family registered."""
    _load_built_in()
    if fam.name in FAMILIES and _same(FAMILIES.get(fam.name), fam):
        return FAMILIES.get(fam.name)
    return FAMILIES.register(fam, replace=replace, built_in=_LOADED[0] == "loading")


def _same(a: AuditFamily, b: AuditFamily) -> bool:
    """The same family: the same value, or the same definition run again (a module loaded a second time under
    another name, as a doctest collector may load one): its name, tests, words and audit function's name and file."""
    def where(f: AuditFamily) -> tuple:
        code = getattr(f.audit, "__code__", None)
        return f.name, f.tests, f.draws, f.audit.__qualname__, code.co_filename if code else None

    return a is b or where(a) == where(b)


def family(name: str) -> AuditFamily:
    """The family registered as ``name``; a :class:`ConfigError` naming the registered ones where none is."""
    _load_built_in()
    return FAMILIES.get(name)


def family_names() -> list[str]:
    """The registered families' names, built-in first."""
    _load_built_in()
    return FAMILIES.names()
