"""The audit's door: what it reads of a study and the functions that publish, given to it by whoever runs it.

The audit never imports the code that resolves a config against its data or that lays out and publishes a
release (``experiments``); it is handed an :class:`AuditSource`, whose members are that code's own functions
(``experiments.release.audit.StudySource`` wraps a resolved study). Every release the audit draws is drawn through
them: the very calls that publish.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol

from censusrecon.synth.registry import PROGRAM_PREFIX


@dataclasses.dataclass(frozen=True)
class AuditSpec:
    """What the audit reads of a config, resolved once (:meth:`of`) and frozen: every family, check and job reads
    these fields and nothing else of the config. ``audit`` is ``release.audit`` with ``confidence`` at the level every
    statistical test of this audit runs at (:func:`synth.audit.jobs.audit_level`, Bonferroni over the audit's tests);
    the config itself is never rewritten.

    >>> from types import SimpleNamespace as ns
    >>> from censusrecon.microdata.data_settings import QueryConfig
    >>> from censusrecon.synth.release_settings import ReleaseConfig
    >>> cfg = ns(release=ReleaseConfig(epsilons=[1, 4], audit={"epsilons": [1]}), published=QueryConfig(),
    ...          target=ns(level="tract", with_block=[True, False]))
    >>> spec = AuditSpec.of(cfg)
    >>> spec.relation, spec.audited_epsilons, spec.mechanisms[:2]
    ('replace_one', (1.0,), ('laplace_tables', 'synthetic'))
    """

    audit: Any  # release.audit (synth.release_settings.AuditConfig), confidence at the audit's level
    relation: str  # release.relation: the neighbouring relation every guarantee is stated under
    backend: str  # release.backend: the noise the releases publish with (opendp or simulation)
    invariants: tuple[str, ...]  # release.invariants: what every release keeps exact
    topdown: Any  # release.topdown (its accounting, δ, strategy)
    epsilons: tuple[float, ...]  # release.epsilons: the grid published
    audited_epsilons: tuple[float, ...]  # the ε the audit checks (release.audit.epsilons, else the grid)
    mechanisms: tuple[str, ...]  # the DP mechanisms audited, in config order (swapping is not DP: none)
    programs: tuple  # release.programs: release programs audited as black boxes
    level: str  # target.level: the units' geography level
    with_block: tuple[bool, ...]  # target.with_block: the variants audited
    published: Any  # the workload published (microdata.data_settings.QueryConfig)

    @classmethod
    def of(cls, cfg) -> AuditSpec:
        """The spec of an experiment config with a ``release`` section, at ``release.audit.confidence``."""
        r = cfg.release
        return cls(r.audit, r.relation, r.backend, tuple(r.invariants), r.topdown, tuple(r.epsilons),
                   tuple(r.audited_epsilons()), tuple(r.dp_mechanisms), tuple(r.programs), cfg.target.level,
                   tuple(cfg.target.with_block), cfg.published)

    @property
    def names(self) -> tuple[str, ...]:
        """What the audit audits, in the order its results come: the DP mechanisms, then each release program as
        ``program:<name>``."""
        return self.mechanisms + tuple(PROGRAM_PREFIX + p.name for p in self.programs)

    def at_confidence(self, level: float) -> AuditSpec:
        """The same spec with every test at ``level``."""
        return dataclasses.replace(self, audit=self.audit.model_copy(update={"confidence": level}))


class AuditSource(Protocol):
    """A study as the audit sees it.

    ``spec`` is all the audit reads of the config (:class:`AuditSpec`); the members below read the rest of it on
    the audit's behalf, through the code that publishes.
    """

    spec: AuditSpec  # the audit's settings, at the audit's level
    pop: Any  # the persons (microdata.dataset.Dataset with its geography)
    units: list[str]  # the units of the target level the study evaluates

    def prepare(self, unit: str, with_block: bool, pad_blocks: bool = False) -> Any:
        """The unit's problem: ``.private`` (its D), ``.areas`` (the areas between the unit and its blocks)."""

    def blocks(self, unit: str) -> tuple[list[str], str]:
        """The unit's public block list and where it comes from."""

    def private_half(self, unit: str, with_block: bool) -> Any:
        """The unit's private half (the data a release publishes)."""

    def with_people(self, people: Any) -> AuditSource:
        """The same config resolved against other persons (a neighbour of the whole population)."""

    def workload(self, published: Any, domain: Any, areas: dict | None = None) -> Any:
        """The published queries over ``domain`` (the tables' definitions)."""

    def fit_key(self, *parts) -> Any:
        """The JAX key a published fit draws from, named by its public parts (unit, ε)."""

    def publish(self, mechanism: str, epsilon: float, D: Any, workload: Any, draw: Any) -> Any:
        """One release (or a batch of them: ``draw``, a :class:`synth.publishing.Draw`) of ``D`` through the
        mechanism's own publishing function."""

    def topdown_root(self, unit: str, with_block: bool) -> Any:
        """The production TopDown tree the unit's release belongs to."""

    def topdown_shape(self, unit: str, with_block: bool) -> tuple:
        """The root of the unit's TopDown tree, its shape, nodes and block source."""

    def topdown_tree(self, shape: Any, nodes: dict, halves: dict, strategy: Any, person_domain: Any) -> Any:
        """A TopDown tree over other halves (a neighbour of the real tree)."""

    def publish_topdown(self, tree: Any, epsilon: float, backend: Any, **kw) -> Any:
        """TopDown's release of a whole tree, as published."""

    def unit_layout(self, unit: str, with_block: bool) -> Any:
        """The layout of the unit's published cells (the contract a release program answers)."""

    def program_inputs(self, D: Any, unit: str, layout: Any, blocks: list[str] | None, areas: dict | None) -> tuple:
        """What a release program is given for ``D``."""

    def one_way_inputs(self, inputs: tuple) -> tuple:
        """A program's inputs cut to the one-way cells, and their true counts."""

    def run_program(self, spec: Any, inputs: tuple, epsilon: float, runs: int, seed: int,
                    width: int | None = None) -> Any:
        """``runs`` releases of a program on ``inputs``."""
