"""Every attack as one value in one registry: its name, that it saw the release (an attack) and what it reads,
and, for an attack that ranks one unit's rows from the published answers, the function that does. Whether a
result's method is an attack or a baseline is decided here and nowhere else.

A new attack is one function from :class:`AttackInputs` to a ranking and one :func:`register`; listing its
name in ``attack.methods`` runs it in ``run``, ``sweep`` and ``evaluate-release`` through :func:`attack_units`,
the call RAP-Rank runs through too:

>>> from censusrecon.microdata.ranking import rank_by_score
>>> def first_rows(x):
...     keys = np.arange(min(x.limit, x.workload.domain.total_size))
...     return rank_by_score(keys, -keys.astype(float)), len(keys)
>>> kind = AttackKind("first_rows", first_rows, reads="nothing: the domain's rows in order")
>>> kind.name, kind.reads
('first_rows', "nothing: the domain's rows in order")
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from censusrecon.microdata.errors import CensusReconError
from censusrecon.microdata.by_name import Registry
from censusrecon.microdata.ranking import Ranking

#: the trivial attack's name: one-way margins fitted to the published answers
MARGINS_ATTACK = "one_way_margins"
RAP_RANK = "rap_rank"
EXACT_ATTACK = "exact"


class UnknownAttack(CensusReconError, ValueError):
    """A name no attack is registered under."""


@dataclass(frozen=True)
class AttackInputs:
    """What an attack of one unit is given: the published workload's public definition, the answers an
    attacker derives from the release (fractions), a generator that breaks its ties, and how many ranked
    rows are scored. Never the private rows. An attack that fits K runs (RAP-Rank) also gets its JAX key,
    K, its settings and, for a run started from rows, the outsider's rows it draws them from; ``plan`` is
    the workload's evaluation plan when the caller holds it already."""

    workload: object
    answers: np.ndarray
    rng: np.random.Generator
    limit: int
    key: object = None
    runs: int = 1
    settings: object = None
    init_pool: np.ndarray | None = None
    plan: object = None


@dataclass(frozen=True)
class Attacked:
    """One unit's attack: its ranking of rows, the size of its candidate list (None if unbounded), and
    the fit behind it where there is one (RAP-Rank's K reconstructions: calibration, strength, losses)."""

    ranking: Ranking
    candidates: int | None
    fit: object = None


@dataclass(frozen=True)
class AttackKind:
    """One attack. Every registered method is an attack (it saw the release); a baseline is any method not
    registered here. The exact attack's ``on_tables`` and ``pool`` live above this registry (the runner's
    scoring, the sweep's pooling, which import it): they give them to its value with :func:`implement` when they
    are loaded, as the code that calls them always is first.

    Args:
        name: its method name in results (with ``_<workload>`` when a config has several workloads).
        rank: ``AttackInputs -> (ranking, candidates)``: the unit's rows ranked from the published answers,
            and the size of its candidate list (None if unbounded); None for an attack on the integer tables.
        rank_units: instead of ``rank``, ``(list of AttackInputs, on_batch) -> list of Attacked``: units
            that share one evaluation plan and settings attacked in shared compiled calls (RAP-Rank); each
            unit's result is what it gets alone.
        reads: what it reads, in words (the report's).
        seed_with_name: its name is mixed into its tie-breaking seed in an evaluation (not the trivial attack's,
            whose seed predates the registry).
        reads_tables: it attacks a unit's integer tables instead (the exact attack: integer programming, with
            its certificates), after the unit's other attacks and baselines, whose rankings it may compare with.
        runs_when: for an attack on the tables, whether a config runs it (the exact attack: ``attack.exact``).
        facts: the unit facts it adds (a sweep task of it keeps them for the pooled summary).
        on_tables: its run on one unit: ``(cfg, unit work) -> facts``, the unit's work holding its curves so far,
            its rankings by (workload, method) and its timings, to which the attack adds its own.
        pool: ``(run directory, the tasks' markers) -> summary``: what a sweep pools of its tasks (its summary's
            entry under the attack's name).
    """

    name: str
    rank: Callable[[AttackInputs], tuple[Ranking, int | None]] | None = None
    reads: str = "the published answers"
    seed_with_name: bool = True
    rank_units: Callable[[list[AttackInputs], Callable | None], list[Attacked]] | None = None
    reads_tables: bool = False
    runs_when: Callable[[object], bool] | None = None
    facts: tuple[str, ...] = ()
    on_tables: Callable | None = None
    pool: Callable[[object, list[dict]], dict] | None = None

    def __post_init__(self):
        if not self.name or not self.name.replace("_", "").isalnum():
            raise ValueError(f"an attack's name is letters, digits and _, got {self.name!r}")
        if (self.rank is not None) + (self.rank_units is not None) + self.reads_tables > 1:
            raise ValueError(f"attack {self.name!r}: it ranks a unit (rank), several (rank_units) or reads the "
                             "integer tables (reads_tables): one of them")
        if self.reads_tables and self.runs_when is None:
            raise ValueError(f"attack {self.name!r} reads the integer tables: say when a config runs it (runs_when)")
        if not self.reads_tables and (self.on_tables is not None or self.facts):
            raise ValueError(f"attack {self.name!r}: on_tables and facts belong to an attack that reads the tables")


def _distinct_results(kind: AttackKind, others: dict) -> None:
    clash = [n for n in others if n.startswith(kind.name + "_") or kind.name.startswith(n + "_")]
    if clash:
        raise ValueError(f"attack {kind.name!r}: its results could not be told from {clash[0]!r}'s "
                         "(<name>_<workload>): choose a name that does not extend another")


#: every attack, by name; a name must not extend another's (results name methods <name>_<workload>)
ATTACKS: Registry[AttackKind] = Registry("attack", AttackKind, UnknownAttack, _distinct_results)
register = ATTACKS.register
unregister = ATTACKS.unregister
attack = ATTACKS.get
names = ATTACKS.names


def on_tables(cfg, only: set[str] | None = None) -> list[AttackKind]:
    """The attacks on the integer tables ``cfg`` runs (of those in ``only``, when given)."""
    return [k for k in ATTACKS if k.reads_tables and k.runs_when(cfg) and (only is None or k.name in only)]


def implement(name: str, **hooks) -> AttackKind:
    """Give the registered attack ``name`` the functions that run it (``on_tables``, ``pool``) from the module that
    holds them, above this registry; returns the value as registered now."""
    import dataclasses

    kind = dataclasses.replace(attack(name), **hooks)
    return ATTACKS.register(kind, replace=True, built_in=ATTACKS.is_built_in(name))


def per_unit() -> list[str]:
    """The attacks ``attack.methods`` may list: those that rank a unit from its published answers, but
    RAP-Rank, which always runs (once per workload and initialisation), and the exact attack, which
    reads the integer tables (``attack.exact``)."""
    return [k.name for k in ATTACKS if k.name != RAP_RANK and (k.rank is not None or k.rank_units is not None)]


def kind_of(method: str) -> AttackKind | None:
    """The attack a result's method comes from (``rap_rank_tables_init_county`` → RAP-Rank), or None for a
    baseline (a method no attack's name begins)."""
    for kind in ATTACKS:
        if method == kind.name or method.startswith(kind.name + "_"):
            return kind
    return None


def is_attack(method: str) -> bool:
    """Whether a result's method saw the published statistics (an attack) or not (a baseline).

    >>> is_attack("rap_rank_init_county"), is_attack("one_way_margins"), is_attack("exact"), is_attack("county")
    (True, True, True, False)
    """
    return kind_of(method) is not None


def attack_units(kind: AttackKind, xs: list[AttackInputs], on_batch: Callable[[int], None] | None = None
                 ) -> list[Attacked]:
    """Several units' attacks by ``kind``, each from what its unit published: the one call run, sweep and
    evaluate-release make, for RAP-Rank as for every other attack. ``on_batch`` hears of the runs a fit
    finished (RAP-Rank's progress)."""
    if kind.rank_units is not None:
        return kind.rank_units(xs, on_batch)
    if kind.rank is None:
        raise ValueError(f"{kind.name} reads the integer tables (on_tables), after a unit's other attacks")
    return [Attacked(*kind.rank(x)) for x in xs]


def attack_unit(kind: AttackKind, x: AttackInputs, on_batch: Callable[[int], None] | None = None) -> Attacked:
    """One unit's attack by ``kind`` (:func:`attack_units` of one)."""
    return attack_units(kind, [x], on_batch)[0]


def _margins(x: AttackInputs) -> tuple[Ranking, int]:
    # JAX starts when the attack runs, not when the registry is imported (a config is checked without it)
    from censusrecon.reconstruct.margins import margins_attack

    return margins_attack(x.workload, x.answers, rng=x.rng, limit=x.limit)


def _rap_rank(xs: list[AttackInputs], on_batch: Callable[[int], None] | None) -> list[Attacked]:
    """RAP-Rank of units sharing one plan, settings and K, in shared compiled calls."""
    from censusrecon.reconstruct.queries import plan_for
    from censusrecon.reconstruct.rap import rap_rank_units

    first = xs[0]
    plan = first.plan if first.plan is not None else plan_for(first.workload)
    pools = None if first.init_pool is None else [x.init_pool for x in xs]
    results = rap_rank_units(plan, [x.answers for x in xs], first.workload.domain, [x.key for x in xs], first.runs,
                             first.settings, init_pools=pools, on_batch=on_batch, rngs=[x.rng for x in xs],
                             limit=[x.limit for x in xs])
    return [Attacked(r.ranking, r.union_size, r) for r in results]


BUILT_IN = (
    AttackKind(RAP_RANK, reads="the published answers (relaxed projection, K runs, rows ranked by frequency)",
               rank_units=_rap_rank),
    AttackKind(MARGINS_ATTACK, _margins, reads="the published answers (one-way margins fitted to them)",
               seed_with_name=False),
    AttackKind(EXACT_ATTACK, reads="the published tables (integer programming)", reads_tables=True,
               runs_when=lambda cfg: cfg.attack.exact, facts=("exact", "agreement", "reidentification")),
)
for _kind in BUILT_IN:
    register(_kind, built_in=True)
BUILT_IN = tuple(k.name for k in BUILT_IN)
