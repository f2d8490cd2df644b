"""Every attack as one value in one registry: its name, that it saw the release (an attack) and what it reads,
and, for an attack that ranks one unit's rows from the published answers, the function that does. Whether a
result's method is an attack or a baseline is decided here and nowhere else.

A new attack is one function from :class:`AttackInputs` to a ranking and one :func:`register`; listing its
name in ``attack.methods`` runs it in ``run``, ``sweep`` and ``evaluate-release`` through :func:`attack_unit`:

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
from censusrecon.microdata.registry import Registry
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
    rows are scored. Never the private rows."""

    workload: object
    answers: np.ndarray
    rng: np.random.Generator
    limit: int


@dataclass(frozen=True)
class AttackKind:
    """One attack. Every registered method is an attack (it saw the release); a baseline is any method not
    registered here.

    Args:
        name: its method name in results (with ``_<workload>`` when a config has several workloads).
        rank: ``AttackInputs -> (ranking, candidates)``: the unit's rows ranked from the published answers,
            and the size of its candidate list (None if unbounded); None for the built-in attacks with their
            own paths (RAP-Rank, batched over units; the exact attack, by integer programming).
        reads: what it reads, in words (the report's).
        seed_with_name: its name is mixed into its tie-breaking seed in an evaluation (not the trivial attack's,
            whose seed predates the registry).
    """

    name: str
    rank: Callable[[AttackInputs], tuple[Ranking, int | None]] | None = None
    reads: str = "the published answers"
    seed_with_name: bool = True

    def __post_init__(self):
        if not self.name or not self.name.replace("_", "").isalnum():
            raise ValueError(f"an attack's name is letters, digits and _, got {self.name!r}")


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


def per_unit() -> list[str]:
    """The attacks run unit by unit through :func:`attack_unit` (they have a ``rank``)."""
    return [k.name for k in ATTACKS if k.rank is not None]


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


def attack_unit(kind: AttackKind, x: AttackInputs) -> tuple[Ranking, int | None]:
    """One unit's ranking by ``kind`` from what was published: the one call run, sweep and evaluate-release make."""
    if kind.rank is None:
        raise ValueError(f"{kind.name} runs on its own path, not unit by unit")
    return kind.rank(x)


def _margins(x: AttackInputs) -> tuple[Ranking, int]:
    # JAX starts when the attack runs, not when the registry is imported (a config is checked without it)
    from censusrecon.reconstruct.margins import margins_attack

    return margins_attack(x.workload, x.answers, rng=x.rng, limit=x.limit)


BUILT_IN = (
    AttackKind(RAP_RANK, reads="the published answers (relaxed projection, K runs, rows ranked by frequency)"),
    AttackKind(MARGINS_ATTACK, _margins, reads="the published answers (one-way margins fitted to them)",
               seed_with_name=False),
    AttackKind(EXACT_ATTACK, reads="the published tables (integer programming)"),
)
for _kind in BUILT_IN:
    register(_kind, built_in=True)
BUILT_IN = tuple(k.name for k in BUILT_IN)
