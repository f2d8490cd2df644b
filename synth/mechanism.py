"""Privacy accounting: neighbouring relations, sensitivities computed from them, mechanisms and the ledger."""

from __future__ import annotations

import datetime as _dt
import json
from dataclasses import dataclass, field
from enum import Enum
from typing import Sequence

import numpy as np

from censusrecon.microdata.domain import Domain
from censusrecon.microdata.errors import CensusReconError

_INT64_MAX = np.iinfo(np.int64).max


class PrivacyError(CensusReconError):
    """A privacy parameter, relation or count is invalid; the message says which."""


class Relation(str, Enum):
    """Neighbouring datasets, for the privacy unit *one person* (one row of the data).

    ``ADD_REMOVE``: D' is D with one row added or removed (n changes by one).
    ``REPLACE_ONE``: D' is D with one row replaced by another (n is public and fixed);
    Wasserman & Zhou's relation (Hamming distance 1 between databases of the same size).
    """

    ADD_REMOVE = "add_remove"
    REPLACE_ONE = "replace_one"


def parse_relation(value: str | Relation) -> Relation:
    try:
        return Relation(value)
    except ValueError:
        raise PrivacyError(f"unknown neighbouring relation {value!r}; use 'add_remove' or 'replace_one'") from None


def marginal_sensitivity(domain: Domain, marginals: Sequence[Sequence[str]], relation: Relation | str,
                         levels: int = 1) -> int:
    """L1 sensitivity of the integer cell counts of ``marginals``, computed from the relation.

    Each marginal partitions the rows, so one row sits in exactly one cell of it.
    Adding or removing a row changes one cell per marginal by one: sensitivity = #marginals.
    Replacing row x by y moves one unit from x's cell to y's cell of every marginal on which
    x and y differ: 2 per marginal, for the marginals that can differ at all (some attribute
    with two or more values); the worst pair differs on all of them at once. Tables
    released at ``levels`` geographic levels (block and tract, say) count once per level a
    person contributes to.

    >>> d = Domain.from_sizes({"A": 2, "B": 3})
    >>> marginal_sensitivity(d, [("A",), ("A", "B")], "add_remove"), marginal_sensitivity(d, [("A",), ("A", "B")], "replace_one")
    (2, 4)
    """
    relation = parse_relation(relation)
    if levels < 1:
        raise PrivacyError(f"levels must be >= 1, got {levels}")
    if relation is Relation.ADD_REMOVE:
        per_level = len(marginals)
    else:
        per_level = 2 * sum(1 for m in marginals if any(domain.size(a) > 1 for a in m))
    return int(per_level * levels)


def histogram_sensitivity(relation: Relation | str, cells: int) -> int:
    """L1 sensitivity of a full-domain histogram: 1 under add/remove, 2 under replace-one
    (one unit of count moves between two cells; 0 if the domain has a single cell)."""
    relation = parse_relation(relation)
    if relation is Relation.ADD_REMOVE:
        return 1
    return 2 if cells > 1 else 0


def check_counts(counts: np.ndarray) -> np.ndarray:
    """Counts on the release path are int64 and non-negative; anything else is refused."""
    counts = np.asarray(counts)
    if not np.issubdtype(counts.dtype, np.integer):
        raise PrivacyError(f"counts must be integers on the release path, got dtype {counts.dtype}")
    if counts.size and counts.min() < 0:
        raise PrivacyError("counts must be non-negative")
    return counts.astype(np.int64)


def checked_add(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a + b in int64, refusing overflow instead of wrapping around."""
    a = np.asarray(a, dtype=np.int64)
    b = np.asarray(b, dtype=np.int64)
    with np.errstate(over="ignore"):
        out = a + b
    overflow = ((a > 0) & (b > 0) & (out < 0)) | ((a < 0) & (b < 0) & (out >= 0))
    if overflow.any():
        raise PrivacyError("int64 overflow while adding noise to counts")
    return out


@dataclass(frozen=True)
class Mechanism:
    """What a release claims: privacy unit, neighbouring relation, L1 sensitivity, ε, noise scale."""

    name: str
    relation: Relation
    sensitivity: int
    epsilon: float
    scale: float | None = None  # discrete Laplace scale; None for mechanisms without additive noise
    privacy_unit: str = "person"
    details: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "relation", parse_relation(self.relation))
        check_epsilon(self.epsilon)
        if self.sensitivity < 0:
            raise PrivacyError(f"sensitivity must be >= 0, got {self.sensitivity}")


#: The smallest ε a release accepts: below it the noise drowns any table, and the scales it asks
#: for approach what an int64 sampler can represent.
MIN_EPSILON = 1e-6
#: The largest discrete Laplace scale a sampler is asked for. Beyond ~1e18 numpy's geometric draw
#: overflows int64, and at 1e25 it returns all zeros, so the exact counts would be published.
MAX_SCALE = float(2**40)


def check_epsilon(epsilon: float) -> float:
    """ε must be finite and at least :data:`MIN_EPSILON`."""
    if not (np.isfinite(epsilon) and epsilon >= MIN_EPSILON):
        raise PrivacyError(f"epsilon must be a finite number >= {MIN_EPSILON:g}, got {epsilon}")
    return float(epsilon)


def check_scale(scale: float) -> float:
    """A noise scale the samplers represent exactly enough: positive, at most :data:`MAX_SCALE`."""
    if not (np.isfinite(scale) and 0 < scale <= MAX_SCALE):
        raise PrivacyError(f"noise scale {scale:g} is outside (0, {MAX_SCALE:g}]: the samplers cannot represent it "
                           f"(raise ε or publish fewer cells)")
    return float(scale)


def laplace_scale(sensitivity: int, epsilon: float) -> float:
    """Scale Δ/ε of (discrete) Laplace noise giving ε-DP for L1 sensitivity Δ, rounded up to the
    next float for which Δ/scale ≤ ε holds in floating point too (Δ = 12, ε = 0.3 would
    otherwise give Δ/scale = 0.30000000000000004 > ε). Δ = 0 is given the scale of Δ = 1.

    >>> 12 / laplace_scale(12, 0.3) <= 0.3
    True
    """
    epsilon = check_epsilon(epsilon)
    delta = max(int(sensitivity), 1)
    scale = float(delta) / epsilon
    while delta / scale > epsilon:
        scale = float(np.nextafter(scale, np.inf))
    return check_scale(scale)


@dataclass
class Ledger:
    """Every release, as it was made: relation, sensitivity, ε per release and in total, backend, dtype.

    ε composes additively over releases of the same persons (basic composition).
    """

    entries: list[dict] = field(default_factory=list)

    def record(self, mechanism: Mechanism, backend: str, for_publication: bool, dtype: str = "int64",
               **extra) -> dict:
        entry = {
            "time": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "mechanism": mechanism.name,
            "privacy_unit": mechanism.privacy_unit,
            "relation": mechanism.relation.value,
            "sensitivity": mechanism.sensitivity,
            "epsilon": mechanism.epsilon,
            "scale": mechanism.scale,
            "backend": backend,
            "for_publication": bool(for_publication),
            "dtype": dtype,
            **mechanism.details,
            **extra,
        }
        self.entries.append(entry)
        return entry

    def note(self, mechanism: str, backend: str, reason: str, **extra) -> dict:
        """Record a release that is not differentially private (record swapping): no ε, no relation,
        and the reason it is not DP, so that nothing adds it to a privacy budget."""
        entry = {"time": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), "mechanism": mechanism,
                 "differentially_private": False, "epsilon": None, "relation": None, "backend": backend,
                 "for_publication": False, "not_dp": reason, **extra}
        self.entries.append(entry)
        return entry

    def total_epsilon(self, **match) -> float:
        """ε summed over the entries matching ``match`` (basic composition). ε under different
        neighbouring relations measure different things and are never added: that raises."""
        chosen = [e for e in self.entries if all(e.get(k) == v for k, v in match.items())]
        relations = sorted({e["relation"] for e in chosen if e.get("relation")})
        if len(relations) > 1:
            raise PrivacyError(f"cannot add ε across neighbouring relations {relations}: "
                               "select entries of one relation")
        return float(sum(e["epsilon"] for e in chosen if e.get("epsilon") is not None))

    def to_json(self) -> str:
        return json.dumps({"entries": self.entries}, indent=2, sort_keys=True, default=str)
