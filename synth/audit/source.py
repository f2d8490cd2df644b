"""The audit's door: what it reads of a study and the functions that publish, given to it by whoever runs it.

The audit never imports the code that resolves a config against its data or that lays out and publishes a
release (``experiments``); it is handed an :class:`AuditSource`, whose members are that code's own functions
(``experiments.release.audit.StudySource`` wraps a resolved study). Every release the audit draws is drawn through
them: the very calls that publish.
"""

from __future__ import annotations

from typing import Any, Protocol


class AuditSource(Protocol):
    """A study as the audit sees it.

    ``cfg`` is read for the audit's settings only: ``release`` (``audit``, ``relation``, ``backend``,
    ``invariants``, ``epsilons``, ``topdown``, ``programs``, ``dp_mechanisms``), ``target`` (``level``,
    ``with_block``), ``published`` (the workload published) and ``seed``.
    """

    cfg: Any  # the experiment's config, at the audit's level (its ``release.audit`` settings)
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

    def publish(self, mechanism: str, epsilon: float, D: Any, workload: Any, backend: Any, rng: Any, **kw) -> Any:
        """One release (or a batch of them) of ``D`` through the mechanism's own publishing function."""

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
