"""Baselines that never see Q(D): rank rows by their frequency under a prior built from other data."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from censusrecon.microdata.dataset import Dataset
from censusrecon.microdata.domain import Domain
from censusrecon.microdata.errors import CensusReconError
from censusrecon.microdata.ranking import Ranking, product_support, rank_by_frequency, rank_by_score, rank_product


@dataclass(frozen=True, eq=False)
class EmpiricalPrior:
    """The empirical distribution of a pool of rows over ``domain``: R(X) ranks by frequency."""

    domain: Domain
    codes: np.ndarray

    def __post_init__(self) -> None:
        object.__setattr__(self, "codes", self.domain.check_codes(self.codes))
        if len(self.codes) == 0:
            raise CensusReconError("a prior needs at least one row in its pool")

    def ranking(self, rng: np.random.Generator | None = None, limit: int | None = None) -> Ranking:
        return rank_by_frequency(self.domain.encode(self.codes), rng=rng, limit=limit)

    def support_size(self) -> int:
        """How many distinct rows the whole ranking holds (before any ``limit``)."""
        return int(np.unique(self.domain.encode(self.codes)).size)

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return self.codes[rng.integers(0, len(self.codes), size=n)]


@dataclass(frozen=True, eq=False)
class BlockStrengthenedPrior:
    """The paper's strengthening for tract targets that keep BLOCK: the other attributes come
    from a coarser pool, BLOCK independently from ``block_weights``. The paper drew BLOCK from
    its distribution in D; we take it from D_holdout (the experiments layer passes it), so no
    baseline reads D.

    A row (b, x) has probability p(b) · p_pool(x); the ranking orders rows by that
    product exactly (the limit of ranking a large sample from it).
    """

    domain: Domain  # BLOCK first, then the pool's attributes
    block_weights: np.ndarray  # p_D(b), one per BLOCK code
    pool: EmpiricalPrior

    def __post_init__(self) -> None:
        w = np.asarray(self.block_weights, dtype=np.float64)
        if w.shape != (self.domain.sizes[0],) or w.min() < 0 or not w.sum() > 0:
            raise CensusReconError("block_weights must be non-negative, one per BLOCK code, not all zero")
        object.__setattr__(self, "block_weights", w / w.sum())

    def ranking(self, rng: np.random.Generator | None = None, limit: int | None = None) -> Ranking:
        inner = self.pool.ranking(rng=rng, limit=limit)
        blocks = np.flatnonzero(self.block_weights > 0)
        if limit is not None:  # the top `limit` products use only the top `limit` of each factor
            blocks = blocks[np.argsort(-self.block_weights[blocks], kind="stable")[:limit]]
        inner_p = inner.scores / len(self.pool.codes)
        scores = (self.block_weights[blocks][:, None] * inner_p[None, :]).reshape(-1)
        rest = self.pool.domain.decode(inner.keys)
        codes = np.concatenate(
            [np.repeat(blocks, len(rest))[:, None], np.tile(rest, (len(blocks), 1))], axis=1
        )
        return rank_by_score(self.domain.encode(codes), scores, rng=rng, limit=limit)

    def support_size(self) -> int:
        """Rows of positive probability: blocks of positive weight times the pool's distinct rows."""
        return int((self.block_weights > 0).sum()) * self.pool.support_size()

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        b = rng.choice(len(self.block_weights), size=n, p=self.block_weights)
        return np.concatenate([b[:, None], self.pool.sample(n, rng)], axis=1)


def geographic_priors(population: Dataset, level: str, unit: str, attributes: list[str],
                      blocks: tuple[Domain, np.ndarray] | None = None, levels: list[str] | None = None,
                      include_target: bool = False) -> dict[str, EmpiricalPrior | BlockStrengthenedPrior]:
    """Priors from the units enclosing ``unit`` (a tract or block), one per coarser level.

    By default the target unit's own rows are excluded from every pool, so a baseline never
    sees a row of D (nor of D_holdout, which has its own baseline). ``include_target=True``
    keeps them, as the paper's pools did: a baseline then guesses partly from D itself, which
    flatters it. With ``blocks`` given, (the domain with BLOCK, one weight per BLOCK code: tract targets that
    keep BLOCK), each prior is strengthened: BLOCK is drawn from the weights.
    """
    if population.geography is None:
        raise CensusReconError("geographic baselines need a population with geography")
    geo = population.geography
    in_unit = geo.mask(level, unit)
    wanted = levels if levels is not None else list(geo.coarser(level))
    allowed = set(geo.coarser(level))
    out: dict = {}
    sub = population.project(attributes)
    for lv in wanted:
        if lv not in allowed:
            raise CensusReconError(f"baseline level {lv!r} is not coarser than the target level {level!r}; use {sorted(allowed)}")
        parent = geo.parent(level, unit, lv)
        rows = (geo.units(lv) == parent) & (True if include_target else ~in_unit)
        if not rows.any():
            continue  # e.g. a county with a single tract: no data outside the target
        pool = EmpiricalPrior(sub.domain, sub.codes[rows])
        if blocks is not None:
            out[lv] = BlockStrengthenedPrior(*blocks, pool)
        else:
            out[lv] = pool
    return out


@dataclass(frozen=True, eq=False)
class ChancePrior:
    """Rows drawn from the product of one-way margins (attributes independent), ranked by that
    product probability. As a baseline its margins come from data an outsider has without the
    release (persons outside the target unit, see :func:`outside_chance`), never from D.
    """

    domain: Domain
    margins: tuple[np.ndarray, ...]  # one probability vector per attribute

    @classmethod
    def from_data(cls, data: Dataset) -> "ChancePrior":
        margins = tuple(np.bincount(data.codes[:, j], minlength=s) / len(data) for j, s in enumerate(data.domain.sizes))
        return cls(data.domain, margins)

    def ranking(self, rng: np.random.Generator | None = None, limit: int | None = None) -> Ranking:
        """Exact top-``limit`` rows of the product distribution (:func:`rank_product`)."""
        return rank_product(self.margins, self.domain.encode, rng=rng, limit=limit)

    def support_size(self) -> int:
        """Rows of positive probability: the product of the margins' supports."""
        return product_support(self.margins)

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return np.stack([rng.choice(len(p), size=n, p=p) for p in self.margins], axis=1)


def outside_chance(population: Dataset, level: str, unit: str, attributes: list[str],
                   blocks: tuple[Domain, np.ndarray] | None = None) -> ChancePrior | None:
    """The chance baseline an outsider can build: one-way margins of the persons outside the
    target ``unit`` in the smallest enclosing unit that has any (the county for a tract, else
    the state, else the whole population less the unit). With ``blocks`` (the domain, BLOCK first, and one weight
    per BLOCK code: tract targets that keep BLOCK) the BLOCK margin is the weights, which the caller takes
    from public inputs or the holdout, never from D. None when nobody lives outside the unit.
    """
    if population.geography is None:
        raise CensusReconError("the chance baseline needs a population with geography")
    geo = population.geography
    outside = ~geo.mask(level, unit)
    rows = None
    for lv in geo.coarser(level):
        here = (geo.units(lv) == geo.parent(level, unit, lv)) & outside
        if here.any():
            rows = here
            break
    if rows is None:
        return None
    pool = population.project(attributes)
    pool = Dataset(pool.domain, pool.codes[rows])
    prior = ChancePrior.from_data(pool)
    if blocks is None:
        return prior
    block_domain, block_weights = blocks
    w = np.asarray(block_weights, dtype=np.float64)
    return ChancePrior(block_domain, (w / w.sum(), *prior.margins))
