"""One unit's problem, prepared the same way for `run`, `sweep` and `evaluate-release`: the data
and its public geography, the target units, D and D_holdout over the attack domain (BLOCK from
the public block list), the published workload and its exact answers, the priors, RAP settings."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import jax
import numpy as np

from censusrecon.baselines.holdout import holdout_split
from censusrecon.baselines.priors import EmpiricalPrior, geographic_priors, outside_chance
from censusrecon.reconstruct import attacks
from censusrecon.experiments.config import DATA_PATH_KEYS, ConfigError, ExperimentConfig
from censusrecon.experiments.metrics import block_classes, match_rate_curve
from censusrecon.microdata.dataset import Dataset, lookup
from censusrecon.microdata.domain import Attribute
from censusrecon.microdata.target_units import choose_units, eligible_units
from censusrecon.microdata.target_units import occupied_units as split_occupied
from censusrecon.microdata.marginals import Workload
from censusrecon.microdata.seeds import stable_seed  # here for the modules that take it from the problem
from censusrecon.microdata.sources import source
from censusrecon.reconstruct.queries import EXACT_CHUNK, exact_counts
from censusrecon.reconstruct.settings import RAPSettings, rap_settings  # rap_settings: here for those that take it from the problem
from censusrecon.synth.publishing import answers_of
from censusrecon.microdata.census import required_attributes, tables_needing
from censusrecon.microdata.declared_workload import census_cells, data_levels, declared_workload
from censusrecon.microdata.declared_workload import table_cells as declared_cells

log = logging.getLogger(__name__)

_INIT_POOL_ROWS = 20_000


def load_population(cfg: ExperimentConfig, persons: Dataset | None = None) -> Dataset:
    """The persons of the configured source (all of them; units are picked later), loaded through
    the source's entry in :data:`microdata.sources.SOURCES` (or ``persons``, when the caller has read
    them already), then checked against the config."""
    d = cfg.data
    src = source(d.source)
    dumped = d.model_dump(mode="python")
    for k in DATA_PATH_KEYS:  # relative paths are read from the config's folder
        if dumped.get(k) is not None:
            given, dumped[k] = dumped[k], cfg.data_file(dumped[k])
            if persons is None and given != dumped[k] and not Path(dumped[k]).exists():
                raise ConfigError(
                    f"data.{k}: {given!r} does not exist: a relative path in a config is read from the config's "
                    f"folder ({cfg.base_dir}), so it names {dumped[k]}; give the path from there, or an absolute one "
                    "(a config copied to another folder needs its paths changed)")
    pop = src.load({k: dumped[k] for k in src.keys}, cfg.attributes) if persons is None else persons
    check_census_tables(cfg, pop)
    missing = [a for a in attributes(cfg, pop) if a not in pop.domain]
    if missing:
        raise ConfigError(f"attributes {missing} are not in the data; it has {list(pop.domain.names)}")
    check_against_data(cfg, pop)
    for q in cfg.queries:  # a table naming an unknown variable, value or level fails here, before any run
        if q.is_tables:
            build_workload(cfg, q, pop.project(attributes(cfg, pop)).domain)
    return pop


def check_census_tables(cfg: ExperimentConfig, pop: Dataset) -> None:
    """Census tables need AGE, SEX, HISP, CENRACE; name the tables this data cannot build."""
    for q in cfg.queries:
        if not q.is_tables:
            continue
        cells = census_cells(q)
        have = set(pop.domain.names) & set(attributes(cfg, pop))
        missing = sorted(required_attributes(cells) - have)
        if missing:
            raise ConfigError(
                f"this data cannot build census tables {tables_needing(cells, missing)}: they need {missing}, which it lacks "
                f"(it has {list(pop.domain.names)}"
                + (f"; {cfg.data.path} is the redistricting PPMF, which has no QAGE or QSEX" if cfg.data.source == "ppmf"
                   else "") + "). "
                f"Restrict queries.tables to ones it supports, e.g. tables: race_hispanic (P1, P6, P7, P8, P9), "
                f"and attributes to {[a for a in ('HISP', 'CENRACE') if a in pop.domain]}")


def attributes(cfg: ExperimentConfig, pop: Dataset) -> list[str]:
    """The attack attributes: the config's, else the source's default, else every attribute."""
    if cfg.attributes is not None:
        return list(cfg.attributes)
    default = source(cfg.data.source).default_attributes
    return list(default) if default else list(pop.domain.names)


def check_against_data(cfg: ExperimentConfig, pop: Dataset) -> None:
    """Levels, baselines and initialisations must exist in this data's geography."""
    geo = pop.geography
    if geo is None:
        raise ConfigError("the data has no geography; target units cannot be chosen")
    level = cfg.target.level
    if level not in geo.levels or level == "national":
        raise ConfigError(f"target.level {level!r} is not a level of this data; choose from {list(geo.levels[1:])}")
    allowed = {"holdout", "chance", *geo.coarser(level)}
    bad = [b for b in cfg.baselines.methods if b not in allowed]
    if bad:
        raise ConfigError(f"baselines {bad} are not valid for {level} targets; choose from {sorted(allowed)}")
    bad = [i for i in cfg.attack.init if i not in {"random", *allowed}]
    if bad:
        raise ConfigError(f"attack.init {bad} not valid for {level} targets; choose from {sorted({'random', *allowed})}")
    if any(cfg.target.with_block) and "block" not in geo.finer(level):
        raise ConfigError(f"target.with_block: true needs a block level below {level!r}; this data has {list(geo.levels)}")


def select_units(pop: Dataset, cfg: ExperimentConfig) -> list[str]:
    """The config's target units (:func:`microdata.target_units.choose_units`, seeded by the config's seed)."""
    return choose_units(pop, cfg.target, cfg.seed)


def occupied_units(pop: Dataset, cfg: ExperimentConfig, units: list[str]) -> tuple[list[str], list[str]]:
    """``units`` split into those someone lives in and the listed empty ones (:func:`microdata.target_units.occupied_units`)."""
    return split_occupied(pop, cfg.target.level, units)


@dataclass
class UnitProblem:
    unit: str
    with_block: bool
    private: Dataset  # D, over the attack domain
    holdout: Dataset  # D_holdout
    block_weights: np.ndarray | None  # BLOCK's distribution in D_holdout: what baselines and inits may use
    block_list_source: str | None = None  # where the BLOCK values come from (None without BLOCK)
    areas: dict | None = None  # per level between the unit and its blocks: each area and its BLOCK codes
    blocks: tuple[str, ...] | None = None  # the public block list: BLOCK code i is blocks[i] (None without BLOCK)


def block_names(blocks: list[str]) -> tuple[str, ...]:
    """Short names for a unit's blocks: the block's own code (after the last ':' of a person file's
    composite id, the last 4 digits of a census GEOID), or the whole id when those repeat."""
    short = [b.rsplit(":", 1)[-1] if ":" in b else b[-4:] for b in blocks]
    return tuple(short) if len(set(short)) == len(short) else tuple(blocks)


@dataclass(frozen=True, eq=False)
class Study:
    """A config resolved once against its data (:func:`resolve`, at the start of ``run``, ``sweep``,
    ``evaluate-release`` and ``audit``): the population, the attack attributes, the target level, the
    target units, each unit's public block list and areas, and from them each unit's problem (D and
    D_holdout over the attack domain), its priors and RAP settings. The rest of the code reads these
    from here instead of re-deriving them from the raw config."""

    cfg: ExperimentConfig
    pop: Dataset
    attributes: tuple[str, ...]
    level: str
    _blocks: dict = field(default_factory=dict, repr=False)

    @cached_property
    def _selection(self) -> tuple[list[str], list[str]]:
        return occupied_units(self.pop, self.cfg, select_units(self.pop, self.cfg))

    @property
    def units(self) -> list[str]:
        """The target units someone lives in (:func:`select_units`, then :func:`occupied_units`)."""
        return list(self._selection[0])

    @cached_property
    def units_in_file(self) -> int:
        """How many units of the target level the data has that a config could evaluate (eligible by size):
        the most units any advice may ask for."""
        return int(eligible_units(self.pop, self.cfg.target)[2].sum())

    @property
    def empty_units(self) -> list[str]:
        """Target units the public list names but nobody lives in: reported, never attacked."""
        return list(self._selection[1])

    def blocks(self, unit: str) -> tuple[list[str], str]:
        """Every block of ``unit`` (empty ones included) from the data's public unit list, and where
        that list comes from. Without a public list the blocks are those with persons, and the
        source says so: a release must not publish such a list unless the agency declares it."""
        if unit not in self._blocks:
            self._blocks[unit] = self.pop.geography.units_within(self.level, unit, "block")
        blocks, source = self._blocks[unit]
        return list(blocks), source

    def areas(self, blocks: list[str]) -> dict[str, list[tuple[str, list[int]]]]:
        """Per geography level between the target and its blocks (the tracts of a county), each area
        of a unit with the BLOCK codes of its blocks (positions in ``blocks``, the unit's
        :meth:`blocks`), from the public list: where tables per tract inside a county are published."""
        geo = self.pop.geography
        out = {}
        for lv in geo.finer(self.level)[:-1]:
            where: dict[str, list[int]] = {}
            for i, a in enumerate(geo.enclosing("block", blocks, lv)):
                where.setdefault(a, []).append(i)
            out[lv] = sorted(where.items())
        return out

    def unit_data(self, unit: str, with_block: bool, pad_blocks: bool = False) -> Dataset:
        """Every person of ``unit`` over the attack domain, before the holdout split (none for a listed
        unit nobody lives in). With BLOCK, the attribute's values are the unit's blocks from the public
        block list (:meth:`blocks`), never from the persons, so the domain, every table's shape and
        every histogram's size are the same for any two neighbouring datasets. For the attack they are
        padded (``pad_blocks``) up to a multiple of ``target.block_bucket`` (or the next size of its
        ``block_ladder``) with more empty blocks:
        their published cells are all 0 (as an agency's tables for an empty block are), nobody lives
        or is guessed there, and every unit of a bucket then has the same domain, hence one plan and
        one compiled program. A release publishes the listed blocks only (``pad_blocks=False``)."""
        rows = np.flatnonzero(self.pop.geography.units(self.level) == unit)
        data = self.pop.take(rows).project(list(self.attributes))
        if with_block:
            blocks, _ = self.blocks(unit)
            position = {b: i for i, b in enumerate(blocks)}
            code = np.array([position[b] for b in data.geography.units("block")], dtype=np.int64)
            names = block_names(blocks)
            if pad_blocks:
                names += tuple(f"pad{i}" for i in range(self.cfg.target.padded_blocks(len(names)) - len(names)))
            data = data.with_column(Attribute("BLOCK", names), code, 0)
        return data

    def prepare(self, unit: str, with_block: bool, pad_blocks: bool = True) -> UnitProblem:
        """D and D_holdout of one unit over the attack domain (:meth:`unit_data`)."""
        cfg = self.cfg
        self.pop.geography.mask(self.level, unit)  # an unknown unit is an error naming the known ones
        data = self.unit_data(unit, with_block, pad_blocks)
        blocks, source = self.blocks(unit) if with_block else (None, None)
        weights, areas = None, None
        if cfg.target.whole_units:  # the Bureau's setting: every person of the unit is attacked
            private, holdout = data, data.take(np.zeros(0, np.int64))
            if with_block:  # an outsider knows the public block list, not who lives where: uniform over it
                weights = (np.arange(data.domain.sizes[0]) < len(blocks)).astype(np.float64)
                areas = self.areas(blocks)
            return UnitProblem(unit, with_block, private, holdout, weights, source, areas,
                               tuple(blocks) if with_block else None)
        rng = np.random.default_rng(stable_seed("split", cfg.seed, unit))
        private, holdout = holdout_split(data, rng, cfg.holdout_fraction)
        if with_block:  # where an outsider expects persons: the holdout's blocks (D's are what is attacked)
            weights = np.bincount(holdout.column("BLOCK"), minlength=holdout.domain.sizes[0]).astype(np.float64)
            areas = self.areas(blocks)
        return UnitProblem(unit, with_block, private, holdout, weights, source, areas,
                           tuple(blocks) if with_block else None)

    def private_half(self, unit: str, with_block: bool) -> Dataset:
        """The persons of ``unit`` a release protects: D of :meth:`prepare` (the holdout stays out of
        every release); a unit of fewer than two persons cannot be split and is all D (possibly empty)."""
        data = self.unit_data(unit, with_block)
        if len(data) < 2:
            return data
        return self.prepare(unit, with_block, pad_blocks=False).private

    def workload(self, q, domain, areas: dict | None = None):
        """Workload ``q``'s published queries over ``domain`` (:func:`build_workload`)."""
        return build_workload(self.cfg, q, domain, areas)

    def block_classes(self, prob: UnitProblem) -> tuple[np.ndarray, np.ndarray] | None:
        """For each distinct row of D, the size class of its block in D (:func:`experiments.metrics.block_classes`);
        None without BLOCK."""
        D = prob.private
        if "BLOCK" not in D.domain:
            return None
        return block_classes(D.keys(), D.column("BLOCK"))

    def outside_counts(self, prob: UnitProblem) -> tuple[np.ndarray, np.ndarray] | None:
        """For each distinct row of D (sorted keys over D's domain), how many persons outside the
        target unit, in the enclosing unit of :func:`rarity_level`, share its person attributes
        (BLOCK is not a person attribute: with BLOCK the rest of the row is counted). A match with
        count 0 is a row no outsider could have seen (Sánchez et al. 2023's question). None when
        the target has no coarser level below national."""
        geo = self.pop.geography
        if len(geo.coarser(self.level)) < 2:  # only national above: nothing one level up
            return None
        around = rarity_level(geo, self.level)
        parent = geo.parent(self.level, prob.unit, around)
        outside = (geo.units(around) == parent) & ~geo.mask(self.level, prob.unit)
        pool = self.pop.project(list(self.attributes))
        uniq, counts = np.unique(pool.domain.encode(pool.codes[outside]), return_counts=True)
        D = prob.private
        keys, first = np.unique(D.keys(), return_index=True)
        person = D.project(list(self.attributes)).keys()[first]
        return keys, lookup(uniq, counts, person, missing=0).astype(np.int64)

    def priors(self, prob: UnitProblem) -> dict:
        """The holdout prior, the chance prior and the geographic priors the config's baselines and
        inits need. None of them reads D: the holdout is the other half of the unit, the chance margins
        and the geographic pools come from persons outside the unit, BLOCK's weights from the holdout."""
        cfg = self.cfg
        dom = prob.private.domain
        priors: dict = {"holdout": EmpiricalPrior(dom, prob.holdout.codes)} if len(prob.holdout) else {}
        chance = outside_chance(self.pop, self.level, prob.unit, list(self.attributes),
                                (dom, prob.block_weights) if prob.with_block else None)
        if chance is not None:
            priors["chance"] = chance
        geo_levels = [b for b in {*cfg.baselines.methods, *cfg.attack.init} if b not in ("holdout", "random", "chance")]
        if geo_levels:
            priors.update(
                geographic_priors(
                    self.pop, self.level, prob.unit, list(self.attributes),
                    blocks=(dom, prob.block_weights) if prob.with_block else None,
                    levels=sorted(geo_levels),
                    include_target=cfg.baselines.include_target,
                )
            )
        return priors

    def unit_settings(self, prob: UnitProblem, init: str) -> RAPSettings:
        """RAP settings of one unit's attack: the config's, with n' = |D_holdout| for the paper's
        each-once initialisation and the draws per run resolved (``n`` = the persons of D, which
        the attacker reads off the published total)."""
        a = self.cfg.attack
        over = {"init_mode": a.init_mode if init != "random" else "resample"}
        if init != "random" and a.init_mode == "each_once":
            over["rows"] = len(prob.holdout)
        if a.draws_per_run is not None:
            over["draws"] = len(prob.private) if a.draws_per_run == "n" else int(a.draws_per_run)
        return rap_settings(self.cfg, **over)

    def init_pool(self, prob: UnitProblem, prior, init: str, rows: int) -> np.ndarray:
        """The rows a unit's runs start from: a large sample of the prior to draw from per run
        (``init_mode: resample``), or exactly n' rows used once each (``each_once``: D_holdout
        itself for the holdout init, else n' rows drawn from the prior once for the unit)."""
        rng = np.random.default_rng(stable_seed("pool", self.cfg.seed, prob.unit, init))
        if self.cfg.attack.init_mode == "each_once":
            return prob.holdout.codes if init == "holdout" else prior.sample(rows, rng)
        return prior.sample(_INIT_POOL_ROWS, rng)


def resolve(cfg: ExperimentConfig, pop: Dataset | None = None) -> Study:
    """The config resolved against its data, once: ``pop`` when given (already loaded and checked by
    :func:`load_population`), else the configured source's persons."""
    pop = load_population(cfg) if pop is None else pop
    return Study(cfg, pop, tuple(attributes(cfg, pop)), cfg.target.level)


def method_names(cfg: ExperimentConfig) -> list[str]:
    """Every attack task a config runs: one RAP-Rank per workload and initialisation, the trivial
    attack (one-way margins fitted to the published answers) per workload, and the exact attack
    (all its workloads) when ``attack.exact``."""
    return [cfg.rap_method(q, init) for q in cfg.queries for init in cfg.attack.init] + [
        cfg.unit_method(m, q) for m in cfg.attack.methods for q in cfg.queries] + (
        [k.name for k in attacks.on_tables(cfg)])


def build_workload(cfg: ExperimentConfig, q, domain, areas: dict | None = None):
    """The published queries of workload ``q`` over the attack domain
    (:func:`microdata.declared_workload.declared_workload` for the config's geography, target level and seed)."""
    return declared_workload(q, domain, data_levels(cfg.data), cfg.target.level, cfg.seed, areas)


def table_cells(cfg: ExperimentConfig, q, domain, areas: dict | None = None) -> tuple[list, dict]:
    """The cells tables workload ``q`` publishes and the areas they are published per
    (:func:`microdata.declared_workload.table_cells` for the config's geography and target level)."""
    return declared_cells(q, domain, data_levels(cfg.data), cfg.target.level, areas)


def unit_key(cfg: ExperimentConfig, *parts) -> jax.Array:
    """The JAX key of one attack: stable in the config seed and the parts naming the attack."""
    return jax.random.fold_in(jax.random.key(cfg.seed), stable_seed(*parts) & 0x7FFFFFFF)


def rarity_level(geo, level: str) -> str:
    """The unit an outsider sees around a target: the county for tracts and blocks (when the
    data has counties), else the next coarser level (the state for PUMAs)."""
    coarser = geo.coarser(level)
    return "county" if "county" in coarser else coarser[0]


def exact_answers(data: Dataset, w, plan=None) -> np.ndarray:
    """Q(D) as fractions. Large units go through the plan's matmul counter (exact integer
    counts, several times the rate of one bincount per marginal); small ones through bincounts."""
    if plan is not None and len(data) >= EXACT_CHUNK:
        return exact_counts(plan, data.codes) / len(data)
    return answers_of(data, w)


def workload_facts(q, w) -> dict:
    if isinstance(w, Workload):
        return {"kind": "marginals", "k": q.k, "num_marginals": len(w.marginals), "num_queries": w.num_queries}
    return {"kind": "census", "tables": q.tables, "num_queries": w.num_queries,
            "cells_per_table": dict(w.cells_per_table)}


def baseline_curves(cfg: ExperimentConfig, priors: dict, unit: str, scored, rng_of):
    """(name, match-rate curve, seconds) of each configured baseline this unit has data for, in
    config order; a baseline without data is named in a warning and skipped. ``scored``: what a ranking is
    scored against (``truth``, ``ks``, ``u``, and ``outside`` and ``block_class``, None where not measured: a
    :class:`experiments.runner.UnitWork`); ``rng_of(name)`` gives the generator that breaks that baseline's ties."""
    truth, ks, u, outside, block_class = scored.truth, scored.ks, scored.u, scored.outside, scored.block_class
    out = []
    for b in cfg.baselines.methods:
        if b not in priors:
            log.warning("unit %s: no data for baseline %s; skipped", unit, b)
            continue
        t0 = time.perf_counter()
        r = priors[b].ranking(rng=rng_of(b), limit=int(ks.max()))
        curve = match_rate_curve(r, truth, ks, u, priors[b].support_size(), outside, block_class)
        out.append((b, curve, round(time.perf_counter() - t0, 3)))
    return out
