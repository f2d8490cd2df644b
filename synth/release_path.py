"""Publishing one release: what the config says about publishing resolved once (ReleaseSpec), the inputs a
registered mechanism is given (synth.registry), the release's noise, and what the release protects; the one
code path evaluate-release attacks, the auditor audits and an agency would publish through. ``cfg`` and ``study``
are an experiment's config and resolved study (``experiments``), read for what is named here."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from censusrecon.microdata.errors import ConfigError
from censusrecon.microdata.seeds import stable_seed
from censusrecon.reconstruct.settings import RAPSettings, rap_settings
from censusrecon.microdata.dataset import Dataset
from censusrecon.microdata.geography import FROM_ROWS
from censusrecon.synth import registry
from censusrecon.synth.keyed import KeyedNoise
from censusrecon.synth.mechanism import Relation, parse_relation
from censusrecon.synth.noise import make_backend
from censusrecon.synth.publishing import Draw, Published, ReleaseInputs

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReleaseSpec:
    """What publishing reads of a config, resolved once (:meth:`of`): the experiment's seed (the simulation
    noise's key), the noise backend, the neighbouring relation and the declared invariants, each mechanism's
    own options, the RAP settings a fitted release uses, the level a unit is and TopDown's root. Publishing,
    the ledger's words and the auditor's calls of it take this, not the config.

    >>> from censusrecon.experiments.config import parse_config
    >>> spec = ReleaseSpec.of(parse_config({"name": "x", "release": {"relation": "replace_one"}}))
    >>> spec.relation, spec.invariants, spec.backend
    ('replace_one', (), 'simulation')
    """

    seed: int
    backend: str
    relation: str
    invariants: tuple[str, ...]
    options: tuple[tuple[str, object], ...]
    rap: RAPSettings
    level: str
    topdown_root: str

    @classmethod
    def of(cls, cfg) -> "ReleaseSpec":
        r = cfg.release
        if r is None:
            raise ConfigError("this config has no 'release' section: nothing is published")
        return cls(cfg.seed, r.backend, r.relation, tuple(r.invariants),
                   tuple((m, r.options_of(m)) for m in registry.names()), rap_settings(cfg), cfg.target.level,
                   r.topdown.root)

    def options_of(self, mechanism: str):
        """A mechanism's own options (its section of the config, or ``release.options``)."""
        return dict(self.options).get(mechanism, {})


def release_backend(spec: ReleaseSpec, *parts):
    """The noise of one release: OpenDP's (publication), or counter-based simulation noise keyed by the
    experiment's seed and the release (:class:`synth.keyed.KeyedNoise`, the auditor's key schedule)."""
    if spec.backend == "opendp":
        return make_backend("opendp")
    return KeyedNoise(stable_seed("noise", spec.seed, *parts))


def release_inputs(spec: ReleaseSpec, mechanism: str, setting: float, D: Dataset, workload,
                   draw: Draw = Draw()) -> ReleaseInputs:
    """What ``mechanism`` is given to release D's tables at ``setting``: D and the public workload, the
    noise and how it is drawn (``draw``), the relation and the invariants the agency declared, the mechanism's own
    options, and (for a fit) the RAP settings."""
    kind = registry.mechanism(mechanism)
    return ReleaseInputs(D, workload, setting, draw.rng, draw.backend, spec.relation, spec.invariants,
                         kind.fit_note(draw.backend), spec.options_of(mechanism), draw.key,
                         spec.rap if kind.needs_fit else None, draw.runs, draw.cells, draw.dense_limit, draw.pool,
                         draw.shared, draw.fitted)


def publish(spec: ReleaseSpec, mechanism: str, epsilon: float, D: Dataset, workload, draw: Draw = Draw()
            ) -> Published:
    """Release D's tables by ``mechanism`` at ``epsilon`` (its setting): the one code path evaluate-release
    attacks, the auditor audits and an agency would publish through. ``spec``: what the config says about
    publishing (:class:`ReleaseSpec`).

    D's domain (attributes, BLOCK from the public block list) and the workload are public
    inputs. The true n of D reaches the release only where the neighbouring relation makes it
    public (replace-one) or the agency declared it (``release.invariants: [unit_total]``);
    otherwise totals come from the noisy tables. ``draw`` (:class:`synth.publishing.Draw`): the noise, and, for
    the auditor, ``runs`` releases at once or the listed release numbers (additive mechanisms only), through the
    same code as one release (a batch of one), and ``cells``, only those table cells (the auditor's pairs: with a
    keyed backend, equal to the same cells of the whole release).
    """
    if not registry.is_mechanism(mechanism):
        raise ConfigError(f"unknown mechanism {mechanism!r}; the registered ones: {', '.join(registry.names())}")
    return registry.mechanism(mechanism).publish(release_inputs(spec, mechanism, epsilon, D, workload, draw))


def swap_pool(study, unit: str) -> Dataset:
    """The persons targeted swapping may bring in: those of the unit's enclosing area (its county, for a
    tract) outside the unit, over the attack attributes."""
    pop = study.pop
    geo = pop.geography
    level = study.level
    parents = geo.coarser(level)
    if not parents:
        raise ConfigError(f"targeted swapping swaps with another area of the enclosing unit, and a {level} has none")
    parent = geo.parent(level, unit, parents[0])
    rows = np.flatnonzero((geo.units(parents[0]) == parent) & (geo.units(level) != unit))
    return pop.take(rows).project([a for a in study.attributes if a != "BLOCK"])


def own_invariants(spec: ReleaseSpec, mechanism: str, with_block: bool) -> list[str]:
    """The declared invariants a mechanism's release really publishes, for its ledger entry: the
    root total for TopDown only, the unit total where the tables' n is taken as declared
    (Laplace tables and what is fitted to them), the block list wherever blocks are published."""
    uses = registry.mechanism(mechanism).uses if registry.is_mechanism(mechanism) else frozenset()
    publishes = {"root_total": "root_total" in uses, "unit_total": "unit_total" in uses, "occupied_blocks": with_block}
    return [i for i in spec.invariants if publishes.get(i, True)]


def neighbours_of(spec: ReleaseSpec, mechanism: str) -> tuple[str, str]:
    """What one mechanism's ε protects: the dataset whose neighbours it is DP for, and what it publishes
    exactly (by the relation or declared), so that releases compared side by side say how they differ.

    >>> from censusrecon.experiments.config import parse_config
    >>> spec = ReleaseSpec.of(parse_config({"name": "x", "release": {"relation": "replace_one"}}))
    >>> neighbours_of(spec, "laplace_tables")[1]
    "the unit's n (replace_one: the same for every neighbour)"
    """
    replace = parse_relation(spec.relation) is Relation.REPLACE_ONE
    level, root, invariants = spec.level, spec.topdown_root, spec.invariants
    kind = registry.mechanism(mechanism)
    if kind.scope == "root":
        what = (f"every person under the {root} around the unit (the release's root): one person "
                + ("replaced anywhere in it, moving between its units" if replace else "added or removed"))
        exact = [f"the {root}'s n" + (" (replace_one: the same for every neighbour)" if replace else "")]
        if not replace and "root_total" in invariants:
            exact = [f"the {root}'s n (declared invariant)"]
        if not replace and "root_total" not in invariants:
            exact = []
    else:
        what = f"the persons of one {level}: one person " + ("replaced within it" if replace else "added or removed")
        exact = (["the unit's n (replace_one: the same for every neighbour)"] if replace else
                 ["the unit's n (declared invariant)"] if "unit_total" in invariants and
                 "unit_total" in kind.uses else [])
    exact += [i for i in own_invariants(spec, mechanism, True) if i not in ("unit_total", "root_total")]
    return what, "; ".join(exact) or "nothing"


def check_block_list(study, unit: str) -> None:
    """Tables per block may be released only over a public block list, or a list from the persons
    that the agency declares it publishes as it is (``release.invariants: [occupied_blocks]``)."""
    _, source = study.blocks(unit)
    if source == FROM_ROWS and "occupied_blocks" not in study.cfg.release.invariants:
        raise ConfigError(
            "this data has no public block list: its blocks would be "
            f"{FROM_ROWS}. Publishing tables per block over that list reveals which blocks have anyone in them, "
            "which no ε accounts for (replace a block's only resident and the block disappears). Give the public "
            "list of blocks (a units file), or declare release.invariants: [occupied_blocks] to publish it as an "
            "invariant, recorded in the ledger")
