"""Experiment configs: a typed pydantic schema (unknown keys are errors), --set overrides, a hash."""

from __future__ import annotations

import copy
import re
import hashlib
import json
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator, model_validator

from censusrecon.experiments import attacks
from censusrecon.microdata.errors import ConfigError  # the schema's error, defined with the others (the audit raises it too)
from censusrecon.reconstruct.settings import default as rap_default
from censusrecon.synth import registry
from censusrecon.synth.mechanism import MIN_EPSILON
from censusrecon.synth.registry import FILE_PREFIX, PROGRAM_PREFIX
from censusrecon.microdata.census import TABLE_SETS, sf1_tables
from censusrecon.microdata.sources import source


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PopulationConfig(_Strict):
    """The embedded population: its shape and sizes. ``shape: compact`` (the default) is
    microdata.population's small-blocked population; ``shape: "2010"`` is microdata.population2010's,
    shaped like the 2010 Census where reconstruction attacks are sensitive (block sizes, tract sizes,
    empty blocks, clustering by block size; ``censusrecon describe-population`` prints each statistic
    beside its 2010 figure). The sizes default per shape; ``blocks_per_tract`` and
    ``block_size_median`` are the compact shape's only (2010's come from the 2010 distributions)."""

    shape: Literal["compact", "2010"] = Field("compact", description="compact: small blocks, tracts of about 800 "
            "persons; 2010: block and tract sizes, empty blocks and clustering drawn from the 2010 Census")
    states: int | None = Field(None, ge=1, le=99, description="states generated (default per shape)")
    counties_per_state: int | None = Field(None, ge=1, le=999, description="counties in each state (default per shape)")
    tracts_per_county: int | None = Field(None, ge=1, le=9999, description="tracts in each county (default per shape)")
    blocks_per_tract: tuple[int, int] | None = Field(None, description="compact only: [low, high] blocks per tract, "
            "drawn uniformly")
    block_size_median: float | None = Field(None, gt=0, description="compact only: the median persons per occupied "
            "block")
    race_mix: Literal["dirichlet", "rarity"] | None = Field(None, description="2010 only: how areas' race x "
            "ethnicity mixes vary around their parent's. rarity (the default): rare groups spread thinly over "
            "most areas, as 2010's are (fitted to the tuned statistics, the block groups' among them; every "
            "validation statistic within its tolerance on 6 seeds of 8: docs/pages/calibration.md); dirichlet: "
            "a rare group all but absent from most areas, numerous in a few (the mixes of every 2010-shape "
            "figure before 2026-12-03)")

    @model_validator(mode="after")
    def _keys_of_shape(self):
        if self.shape == "2010":
            bad = [k for k in ("blocks_per_tract", "block_size_median") if getattr(self, k) is not None]
            if bad:
                raise ValueError(f"{bad} set for shape '2010', whose block sizes and blocks per tract are "
                                 f"2010's; they apply to shape 'compact' only")
        elif self.race_mix is not None:
            raise ValueError("race_mix applies to shape '2010' only (the compact population has mixes of its own)")
        return self


class GeoLevelConfig(_Strict):
    """One geography level of a person file: its name and the column holding its codes."""

    level: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", description="the level's name (state, county, tract, "
            "block, ...; name the finest block to attack with BLOCK)")
    column: str = Field(description="the file's column holding this level's codes")

    @field_validator("level")
    @classmethod
    def _not_national(cls, v):
        if v == "national":
            raise ValueError("'national' is the level above every file's first; name the file's levels below it")
        return v


class AttributeDeclConfig(_Strict):
    """One declared attribute of a person file: its column and its codes (``values``, which become
    codes 0, 1, ... in that order) or an inclusive integer ``range``."""

    column: str = Field(description="the file's column holding this attribute")
    values: list[str | int] | None = Field(None, description="its codes, in order (a categorical attribute); any "
            "other value in the file is an error")
    range: tuple[int, int] | None = Field(None, description="[low, high] of an integer attribute such as AGE, "
            "inclusive; a value outside is an error")

    @model_validator(mode="after")
    def _one(self):
        if (self.values is None) == (self.range is None):
            raise ValueError("declare exactly one of values (a list of codes) or range ([low, high])")
        if self.values is not None and (not self.values or len({str(v) for v in self.values}) != len(self.values)):
            raise ValueError(f"values must be distinct and non-empty, got {self.values}")
        if self.range is not None and self.range[1] < self.range[0]:
            raise ValueError(f"range [{self.range[0]}, {self.range[1]}] is empty")
        return self


class DataConfig(_Strict):
    """Where the persons come from. Each source reads some of these keys (``microdata.sources``);
    a key the chosen source does not read is an error rather than silently ignored."""

    source: Literal["embedded", "acs_nist", "folktables", "ppmf", "bureau", "table"] = Field(
        "embedded", description="embedded: the generated population; acs_nist: NIST's ACS excerpts; folktables: ACS "
                "PUMS by task; ppmf: the 2010 privacy-protected microdata file; bureau: the Census Bureau's 2010 "
                "reconstruction extract (real 2010 records, microdata/data/bureau_2010); table: your own person file "
                "(CSV or Parquet)")
    seed: int = Field(0, description="embedded: the population's seed")
    population: PopulationConfig = PopulationConfig()
    path: str | None = Field(None, description="acs_nist, ppmf, bureau, table: the person file; folktables: the root directory")
    dictionary: str | None = Field(None, description="acs_nist: data dictionary (default: beside the CSV)")
    bounds: dict[str, tuple[float, float]] = Field(default_factory=dict, description="bin bounds per numeric column")
    bins: int = Field(10, ge=1, le=1000, description="acs_nist, folktables: bins of each numeric column (between its "
            "bounds)")
    task: Literal["employment", "coverage", "mobility"] | None = Field(
        None, description="folktables: the prediction task whose row filter and columns are used")
    states: list[str] = Field(default_factory=list, description="folktables: postal codes; ppmf: FIPS filter")
    counties: list[str] = Field(default_factory=list, description="ppmf: keep these SSCCC counties")
    tracts: list[str] = Field(default_factory=list, description="ppmf, bureau: keep these SSCCCTTTTTT tracts")
    age: Literal["binned", "single"] | None = Field(
        None, description="bureau: AGE as SF1's 38 age groups (binned, the default: the extract is exact on them, its "
        "single year is one feasible value, not the true one) or the single year")
    year: int = Field(2018, ge=2014, description="folktables: the ACS year")
    horizon: Literal["1-Year", "5-Year"] = Field("1-Year", description="folktables: the ACS sample")
    include_target: bool = Field(True, description="folktables: keep the task's target column as an attribute")
    download: bool = Field(False, description="folktables: fetch missing PUMS files from the Census Bureau (else an "
            "error names the file to place under path)")
    geography: list[GeoLevelConfig] = Field(
        default_factory=list, description="table: the file's geography levels, coarsest first, each one column")
    units_file: str | None = Field(
        None, description="table: the public list of every unit of the finest level with its parents, empty ones "
        "included (the published block list comes from here, never from the persons); bureau: a CSV of every "
        "block's Block ID")
    attributes: dict[str, AttributeDeclConfig] = Field(
        default_factory=dict, description="table: each attribute's column and its values or range")

    @model_validator(mode="after")
    def _check(self):
        src = source(self.source)
        for name, field in type(self).model_fields.items():
            if name == "source" or name in src.keys:
                continue
            if getattr(self, name) != field.get_default(call_default_factory=True):
                raise ValueError(f"data.{name} is not read by source {self.source!r}, which reads "
                                 f"{sorted(src.keys) or 'no other key'}: remove it, or choose the source that reads it")
        for name in sorted(src.required):
            if getattr(self, name) in (None, [], {}, ""):
                raise ValueError(f"data.{name} is required for source {self.source!r}")
        for c, (lo, hi) in self.bounds.items():
            if not hi > lo:
                raise ValueError(f"data.bounds.{c}: high must exceed low, got [{lo}, {hi}]")
        levels = [g.level for g in self.geography]
        if len(set(levels)) != len(levels):
            raise ValueError(f"data.geography repeats a level: {levels}")
        return self


class TargetConfig(_Strict):
    """Which units are attacked (and released): their level, how many and which, and whether each
    person's block is an attribute."""

    level: str = Field("tract", description="a level of the data's geography: tract, block, puma, ...")
    units: int | Literal["all"] = Field(
        4, description="how many target units to attack, or all (every unit between min_rows and max_rows)")
    selection: Literal["one_per_state", "random", "size_quantiles"] = Field(
        "one_per_state", description="which eligible units: one_per_state = round robin over states; random = a "
                "seeded sample; size_quantiles = spread evenly over the units' sizes")
    min_rows: int = Field(20, ge=2, description="eligible units have at least this many persons")
    max_rows: int | None = Field(None, ge=2, description="eligible units have at most this many persons (null: no "
            "bound)")
    with_block: list[bool] = Field([False], description="attack without BLOCK (false), with each person's block as an "
            "attribute (true), or both (each a variant of the results)")
    block_bucket: int = Field(
        8, ge=1, description="with BLOCK, pad each unit's blocks up to a multiple of this with empty blocks "
        "(published as all-zero cells), so units of one bucket share a compiled program; 1 = no padding")
    unit_ids: list[str] | None = Field(
        None, description="the units to attack, by id (a public choice; overrides units, selection and the size "
        "bounds); a unit the public unit list names but nobody lives in may be named: it is reported as empty")
    require_siblings: bool = Field(
        False, description="only units whose enclosing unit has other units, so its baseline has data")
    whole_units: bool = Field(
        False, description="(default: true for data.source: table, an agency's own person file; else false) "
        "attack each unit whole, as the Census Bureau tabulated whole blocks: D is every "
        "person of the unit and there is no D_holdout (no holdout baseline or init; the baselines are the "
        "chance and geographic priors from outside the unit and, with reidentification, the modal and "
        "proportional guessers). With a release, every mechanism releases whole units (needed by release.files: "
        "a release made elsewhere covers every person); without it, a release protects D, a random half of each unit, "
        "and the other half is the holdout baseline")

    @model_validator(mode="after")
    def _check(self):
        if not self.with_block:
            raise ValueError("target.with_block needs at least one value, e.g. [true, false]")
        if self.units != "all" and self.units < 1:
            raise ValueError(f"target.units must be at least 1 or all, got {self.units}")
        if self.max_rows is not None and self.max_rows < self.min_rows:
            raise ValueError("target.max_rows must be >= target.min_rows")
        return self


class TableDeclConfig(_Strict):
    """A table to publish: a cross-tabulation of ``by`` (variable names, or ``{NAME: [groups]}`` with
    each group a list of value labels, or [low, high] for a range variable) at ``level`` (the
    finest geography level, one table per block, or the target level). ``by: []`` is a total."""

    name: str = Field(pattern=r"^[A-Za-z0-9_]+$", description="the table's name in the results and reports")
    level: str = Field("block", description="the geography level tabulated: the finest (one table per block) or the "
            "target level")
    by: list[str | dict[str, list]] = Field(default_factory=list, description="the variables crossed: names, or "
            "{NAME: [groups]} (each group a list of value labels, or [low, high] of a range); [] = a total")
    partial: bool = Field(False, description="groups may leave values out or overlap (else an error: a gap drops "
                                             "persons from the table, an overlap counts them twice)")


class QueryConfig(_Strict):
    """One published workload: all k-way marginals (optionally a seeded sample of them), or tables
    (``kind: tables``): a named preset (sf1, race_hispanic, reference: the 2010 SF1 person tables),
    or a list of SF1 table names and declared tables. ``kind: census`` is the same as tables."""

    kind: Literal["marginals", "tables", "census"] = Field(
        "marginals", description="marginals: all k-way marginals of the attributes; tables (census is the same): SF1 "
                "and declared tables")
    k: int = Field(2, ge=1, le=4, description="marginals: their order")
    lower: bool = Field(False, description="marginals: also every lower order")
    max_marginals: int | None = Field(None, ge=1, description="publish a seeded random subset of this many")
    tables: str | list[str | TableDeclConfig] = Field(
        "sf1", description="a preset (sf1, race_hispanic, reference), or SF1 table names and declared tables")
    name: str | None = Field(None, pattern=r"^[A-Za-z0-9_]+$", description="the workload's name in the results "
            "(default: from its kind and tables)")

    @model_validator(mode="after")
    def _check(self):
        if self.kind in ("census", "tables"):
            known = set(sf1_tables())
            if isinstance(self.tables, str):
                if self.tables not in (*TABLE_SETS, "reference"):
                    raise ValueError(f"queries.tables {self.tables!r} is not a preset; "
                                     f"use {sorted((*TABLE_SETS, 'reference'))} or a list of tables")
            else:
                bad = [t for t in self.tables if isinstance(t, str) and t not in known]
                if bad or not self.tables:
                    raise ValueError(f"unknown SF1 tables {bad}: declare your own as {{name, level, by}}, or use "
                                     f"SF1's: {sorted(known, key=lambda t: (len(t), t))}")
                names = [t if isinstance(t, str) else t.name for t in self.tables]
                if len(set(names)) != len(names):
                    raise ValueError(f"queries.tables names a table twice: {names}")
        return self

    @property
    def is_tables(self) -> bool:
        return self.kind in ("census", "tables")

    def describe(self) -> str:
        """What this workload publishes, in words (for titles and reports; never hard-coded)."""
        if not self.is_tables:
            what = f"all {self.k}-way marginals" + (" and every lower order" if self.lower else "")
            return what if self.max_marginals is None else f"{self.max_marginals} randomly chosen of {what}"
        if isinstance(self.tables, str):
            names = TABLE_SETS.get(self.tables)
            return (f"the SF1 tables preset '{self.tables}' ({', '.join(names)})" if names else
                    "the paper code's SF1 query set ('reference': P1, P6, P7, P9, P11, P12, P12A-I per block; PCT12 "
                    "per unit)")
        parts = []
        for t in self.tables:
            if isinstance(t, str):
                parts.append(f"SF1 {t}")
                continue
            by = [b if isinstance(b, str) else f"{next(iter(b))} in {len(next(iter(b.values())))} groups" for b in t.by]
            parts.append(f"{t.name} ({' × '.join(by) if by else 'total'}, per {t.level})")
        return "tables " + "; ".join(parts)

    @property
    def label(self) -> str:
        if self.name:
            return self.name
        if self.is_tables:
            return self.tables if isinstance(self.tables, str) else "tables"
        return f"{self.k}way"


#: the paper's attack strength (Dick et al. 2023: K = 100 runs of T = 1000 steps on n' = 1000 rows)
PAPER_STRENGTH = {"runs": 100, "steps": 1000, "rows": 1000}


class AttackConfig(_Strict):
    """RAP-Rank's settings. ``draws_per_run`` and ``init_mode`` choose between our defaults and
    the paper code's sampling and initialisation (configs/paper/ uses the paper's)."""

    runs: int = Field(100, ge=1, description="K")
    rows: int = Field(rap_default("rows"), ge=1, description="n'")
    steps: int = Field(rap_default("steps"), ge=1, description="T")
    learning_rate: float = Field(rap_default("learning_rate"), gt=0, description="Adam's step size on the relaxed rows' logits")
    sampling: Literal["dense", "error"] = Field(rap_default("sampling"), description="dense: every query every step; error: the paper "
            "code's, queries_per_step queries drawn each step by their current error")
    queries_per_step: int = Field(rap_default("queries_per_step"), ge=1, description="sampling error: queries per step")
    init: list[str] = Field(["random"], description="how runs start, each a method of the results: random, holdout, "
            "or a geography level (a baseline's rows)")
    init_confidence: float = Field(rap_default("init_confidence"), gt=0, lt=1, description="a run started from rows puts this probability on "
            "each row's value, the rest spread evenly")
    batch: int | None = Field(rap_default("batch"), ge=1, description="(unit, run) pairs per compiled call; default per backend")
    steps_per_call: int = Field(rap_default("steps_per_call"), ge=1, description="steps run in one compiled block; progress is reported "
            "between blocks")
    precision: Literal["float32", "bfloat16"] = Field(
        rap_default("precision"), description="matmul operand dtype (float32 accumulation); bfloat16 only where a self-test passes")
    draws_per_run: int | Literal["n"] | None = Field(
        None, description="rows drawn from each fitted relaxed dataset: null = one per relaxed row; an integer; "
        "or n = as many as D has persons (the paper code's census setting; the attacker reads n off the published "
        "total)")
    methods: list[str] = Field(
        [attacks.MARGINS_ATTACK], description="attacks run unit by unit on the published answers beside RAP-Rank, by "
        "their names in experiments.attacks: one_way_margins (the trivial attack), or any attack registered")
    exact: bool = Field(
        False, description="also reconstruct every tables workload exactly by integer programming (HiGHS) and "
        "certify rows: methods exact and exact_certified")
    exact_time_limit: float = Field(300.0, gt=0, description="seconds per unit for the exact attack's solve and "
                                    "certificates, and as many for building its count model")
    exact_swap_rate: float = Field(
        0.0, ge=0, le=1, description="the exact attack reads tables tabulated from D with this share of its records "
        "swapped between blocks (persons of the same sex and P12 age group exchange blocks, those unique in their "
        "block first): the Bureau's HDF, standing in for 2010's undisclosed swapping; its agreement is measured "
        "against the swapped file, as the Bureau's, and reidentification confirmed against D (the CEF), with the "
        "swapped file's own agreement and precision beside (method hdf). 0: D's own tables. RAP-Rank still reads D's")
    init_mode: Literal["resample", "each_once"] = Field(
        rap_default("init_mode"), description="init from a baseline: resample = n' rows drawn from it per run; each_once = the "
        "paper code's: n' = |D_holdout| and each of its rows starts one relaxed row (other baselines: "
        "|D_holdout| rows drawn from them once per unit)")
    strength: Literal["config", "paper"] = Field(
        "config", description="config = K, T and n' as given; paper = the paper's K = 100, T = 1000, n' = 1000 "
        "whatever runs, steps and rows say (--set attack.strength=paper; minutes per unit on a GPU, hours on a CPU)")

    @model_validator(mode="after")
    def _strength(self):
        if self.strength == "paper":
            for name, value in PAPER_STRENGTH.items():
                object.__setattr__(self, name, value)
        return self

    @field_validator("draws_per_run")
    @classmethod
    def _draws(cls, v):
        if isinstance(v, int) and v < 1:
            raise ValueError(f"attack.draws_per_run must be >= 1, null or n, got {v}")
        return v

    @field_validator("init")
    @classmethod
    def _inits(cls, v):
        if not v or len(set(v)) != len(v):
            raise ValueError(f"attack.init needs distinct entries (random, holdout or a geography level), got {v}")
        return v

    @field_validator("methods")
    @classmethod
    def _methods(cls, v):
        unit_by_unit = attacks.per_unit()
        wrong = [m for m in v if m not in unit_by_unit]
        if wrong or len(set(v)) != len(v):
            raise ValueError(f"attack.methods: {', '.join(map(repr, wrong)) or 'repeated entries'}: the attacks run "
                             f"unit by unit are {', '.join(unit_by_unit)} (RAP-Rank always runs; the exact attack: "
                             "attack.exact)")
        return v


class CommercialFileConfig(_Strict):
    """Error rates of the simulated commercial attacker file (:mod:`experiments.reid`). The defaults
    give the Bureau's commercial file's structure (HDSR Table 4 and its notes): about 104 records per
    100 persons, 37% of them right on person, block, sex and 38-bin age, the errors mostly of block
    (a record in another occupied block) and of identity (records of persons not in the tables),
    while records right on person and block disagree on sex and age bin only trivially. How the
    Bureau's wrong records split between those two is not published: the split is ours."""

    coverage: float = Field(0.93, ge=0, le=1, description="share of D's persons with a record (the Bureau's: 92.9% "
                            "of the CEF's persons are in its commercial file's universe)")
    wrong_block: float = Field(0.58, ge=0, le=1, description="share of records placed in another occupied block of the "
                               "unit (the block errors)")
    wrong_sex: float = Field(0.005, ge=0, le=1, description="share of records with the other sex")
    age_error: float = Field(0.03, ge=0, le=1, description="share of records with an age off by 1 to age_error_years")
    age_error_years: int = Field(2, ge=0, description="the largest age error, in years")
    extra: float = Field(0.11, ge=0, le=1, description="records of persons not in D (the identity errors), as a share "
                         "of D's persons: with coverage, about 104 records per 100 persons")


class ReidentificationConfig(_Strict):
    """The Bureau's reidentification simulation: attacker files linked one to one to the
    reconstruction (and to the modal and proportional guessers), confirmed against D."""

    attacker_files: list[Literal["perfect", "commercial"]] = Field(
        ["perfect", "commercial"], min_length=1,
        description="perfect: every person of D, exactly (the Bureau's CEF attacker); commercial: a file with the "
        "commercial file's kinds of error (rates in commercial)")
    commercial: CommercialFileConfig = CommercialFileConfig()


class BaselinesConfig(_Strict):
    """Comparators that never see the statistics. A plain list in a config is shorthand for
    ``{methods: [...]}``."""

    methods: list[str] = Field(["holdout", "chance", "county", "state", "national"], description="holdout "
            "(D_holdout), chance, and geography levels (rows pooled from the enclosing unit of that level)")
    include_target: bool = Field(
        False, description="geographic pools include the target unit's own rows, as the paper's did; the default "
        "excludes them, so a baseline never guesses from D itself")

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, v):
        return {"methods": v} if isinstance(v, (list, tuple)) else v

    @field_validator("methods")
    @classmethod
    def _distinct(cls, v):
        if len(set(v)) != len(v):
            raise ValueError(f"baselines.methods repeats an entry: {v}")
        return v


class ToleranceConfig(_Strict):
    """What the publication board accepts: persons reconstructed by the best attack beyond the best
    guess without the release, per unit. A setting is called safe only when the one-sided upper 95%
    limit of that excess across units is below the tolerance (an equivalence test); give one of the
    two forms. The excess is measured in the form's own terms: each unit's share of its own persons
    unique in D, or persons."""

    share_of_unique: float | None = Field(
        0.01, gt=0, le=1, description="the tolerance as a share of each unit's persons unique in D (default 1%: "
        "a unit of 500 persons unique in D tolerates 5 more persons reconstructed than the best guess finds); "
        "each unit's excess is taken as a share of its own unique persons and their mean over units is tested")
    per_unit: float | None = Field(None, gt=0, description="the tolerance in persons per unit, the same for every "
                                                           "unit (replaces the default share_of_unique)")

    @model_validator(mode="before")
    @classmethod
    def _per_unit_replaces_the_default(cls, data):
        if isinstance(data, dict) and data.get("per_unit") is not None and "share_of_unique" not in data:
            data = {**data, "share_of_unique": None}
        return data

    @model_validator(mode="after")
    def _one(self):
        if (self.share_of_unique is None) == (self.per_unit is None):
            raise ValueError("release.tolerance takes exactly one of share_of_unique and per_unit")
        return self

    def words(self) -> str:
        """'1% of persons unique in D' or '2 persons per unit'."""
        if self.per_unit is not None:
            return f"{self.per_unit:g} person{'s' if self.per_unit != 1 else ''} per unit"
        return f"{100 * self.share_of_unique:g}% of persons unique in D"


class AuditConfig(_Strict):
    """The empirical ε audit of every mechanism, run on the code that publishes."""

    epsilons: Literal["all", "extremes"] | list[float] = Field(
        "all", description="audit every ε of release.epsilons (the default: a decision to publish names only an ε "
        "the audit checked), only the smallest and the largest, or these ε of release.epsilons")
    runs: int = Field(100_000, ge=1000, description="releases on each of the two neighbouring inputs")
    confidence: float = Field(0.95, gt=0.5, lt=1, description="the least confidence of every statistical check")
    false_alarm: float = Field(0.001, gt=0, lt=0.5, description="the chance that an audit of correct mechanisms "
                               "fails, at most: every check runs at 1 - false_alarm / (the audit's number of checks); "
                               "0.1% keeps the measured rate's upper 95% limit below 1% (bench/audit_false_alarm.py)")
    seed: int | None = Field(None, description="the audit's noise key; unset: a fresh one each audit, recorded in "
                             "audit.json (a re-run under another seed is a new audit, recorded as such)")
    whole_releases: int = Field(100, ge=20, description="whole releases of every audited unit (TopDown: of its "
                                "production tree) for the checks over the whole output: noise scale per node, table "
                                "and band of true counts, shape and far tail, independence across cells and releases")
    replay_pairs: int = Field(50, ge=1, description="neighbouring pairs of the real data (persons moved between "
                              "blocks and areas, types changed, added or removed) for the post-processing replay")
    replay_draws: int = Field(2, ge=1, description="recorded releases each replay pair is replayed with")
    replay_far: int = Field(3, ge=0, description="datasets far from the real data (as many persons per unit; under "
                            "TopDown as many under the root, spread over its units at random; every attribute and "
                            "block drawn at random) also replayed: post-processing may read nothing "
                            "but the measurements and the public facts, so any data must give the same output; a "
                            "tie broken or a rounding steered by the true counts shows at once")
    backend: Literal["local", "ray"] = Field(
        "local", exclude=True, description="where `censusrecon audit` runs the audit unless --backend says: local (one "
        "process) or ray (each (BLOCK variant, ε, mechanism or program) a task on a local Ray cluster of sweep.num_cpus "
        "CPUs: the same results); not part of the config's digest")
    units: Literal["all"] | int = Field("all", description="the units audited: all released units (the default: "
                                        "a decision to publish covers only what was audited), or a sample of this "
                                        "many (at least 4): the smallest, the median, the largest and one drawn with "
                                        "the audit's seed, then the rest drawn likewise; the decision then covers the "
                                        "sampled units only, and says so")

    @field_validator("units")
    @classmethod
    def _cover(cls, v):
        if v != "all" and v < 4:
            raise ValueError(f"release.audit.units: {v} cannot cover the units' size range; give at least 4 (the "
                             "smallest, the median, the largest and a random one) or 'all'")
        return v


class TopDownConfig(_Strict):
    """The TopDown-style release: its root level, and each level's share of ε (default: the 2020
    production shares for persons, renormalised over the levels from the root down)."""

    root: str = Field("county", description="the level whose unit around each target is the release's root")
    shares: dict[str, float] | None = Field(None, description="budget share per level, e.g. {county: 1, tract: 2}")
    detailed_share: float = Field(0.25, gt=0, lt=1, description="each level's share of its budget for the detailed "
                                  "histogram (every person type); the rest measures the tables")
    accounting: Literal["pure", "zcdp"] = Field(
        "pure", description="pure: discrete Laplace, pure ε-DP; zcdp: discrete Gaussian under zero-concentrated DP, "
                            "as 2020 production, with the ρ that converts to (ε, delta)")
    delta: float = Field(1e-10, gt=0, lt=1, description="zcdp: the δ of the (ε, δ) each ε of the grid means")
    solver: Literal["clarabel", "highs", "osqp"] = Field(
        "clarabel", description="QP solver of the estimation (bench/run.py compares them)")


class ReleaseFileConfig(_Strict):
    """A release made outside censusrecon, evaluated as it is: noisy tables in the declared tables'
    layout (``censusrecon release-template`` writes it) or microdata in the person file's columns
    and codes. It covers every person of its units, so it needs ``target.whole_units: true``."""

    name: str = Field(pattern=r"^[A-Za-z0-9_]+$", description="the release's name in the results (as file:<name>); "
                      "several files of one name are one release at several ε")
    kind: Literal["tables", "microdata"] = Field(
        "tables", description="tables: one row a published cell (unit, table, cell, geography, value); microdata: one "
        "row a person, the person file's columns and codes (data.source: table)")
    path: str = Field(description="CSV or Parquet (by extension), relative to the config's folder")
    epsilon: float | None = Field(None, gt=0, description="the ε the agency declares it was made at (recorded as "
                                  "declared: a file cannot be audited; null: not DP, evaluated as released)")
    made_with: str = Field("", description="how it was made (library, mechanism, settings), for the report")


class ProgramMeasurementsConfig(_Strict):
    """A program's first measurements, audited on their own: the step of a synthesizer (MST, AIM) that
    adds Gaussian noise to every column's one-way marginal. The program, given ``params`` besides its
    own, returns those measurements for one-way cells (one value of one attribute at the unit, or
    one block); cheap enough to run ``runs`` times per neighbour, where a whole release (a fit) is not."""

    params: dict = Field(default_factory=lambda: {"stage": "measurements"}, description="given to the program "
                         "besides its own params to have it return its first measurements")
    runs: int = Field(300, ge=50, description="measurements per neighbour")
    share: float = Field(gt=0, le=1, description="the share of the program's zCDP ρ its design spends on them: ρ from "
                         "the declared ε and delta by OpenDP's conversion (MST: 1/3, McKenna et al. 2021; AIM: 0.9/16 "
                         "with its default 16·d rounds, McKenna et al. 2022)")
    delta: float = Field(gt=0, lt=1, description="the δ of the program's (ε, δ) accounting (the program's own "
                         "params.delta, if it has one, must be the same)")


class ProgramSpendingConfig(_Strict):
    """A synthesizer's privacy ledger, recorded as real fits of the unit run: its adapter, given ``params``
    besides its own, returns per fit what every Gaussian measurement and every selection by the exponential
    mechanism spent (synth/audit/spending.py's LEDGER). The audit checks the spending against the ρ the
    synthesizer declares and OpenDP's conversion, the measurements' noise against the σ they declare, and the
    selections against their law; with it, the program's whole releases are drawn for D and its worst-case
    neighbour only (a canary: a person of a type nobody of D has, in the block with fewest persons), on the first
    ``whole_units`` units, for the empirical bound."""

    params: dict = Field(default_factory=lambda: {"stage": "spending"}, description="given to the program besides its "
                         "own params to have it return its spending ledger")
    runs: int = Field(3, ge=1, description="fits of the unit's D per ε whose every step is recorded")
    whole_units: int = Field(1, ge=0, description="the first units of the audit on which whole releases are drawn too "
                             "(audit_runs of D and of its canary neighbour, each a fit: the empirical bound); the "
                             "ledger alone on the others")
    delta: float = Field(gt=0, lt=1, description="the δ of the program's (ε, δ) accounting (the program's own "
                         "params.delta, if it has one, must be the same)")


class ReleaseProgramConfig(_Strict):
    """A release program made outside censusrecon, run by it over the ε grid, attacked and audited as
    a black box. The contract (docs: Evaluate your own release): ``release(persons, cells, domain,
    epsilon, runs, seed, relation, **params)`` returns ``runs`` independent releases, one value per
    row of ``cells``; a command is started once with ``--serve`` and gets the same as files, one job
    per line of standard input, and writes a .npy array for each (synth/adapters/contract.py)."""

    name: str = Field(pattern=r"^[A-Za-z0-9_]+$", description="the release's name in the results (as program:<name>)")
    function: str | None = Field(None, description="module:function, or path/to/file.py:function (relative to the "
                                 "config's folder), called in this process")
    command: list[str] | None = Field(None, description="the command that runs the program in its own environment, "
                                      "e.g. [.venv-tumult/bin/python, adapters/tumult_tables.py] (relative paths from "
                                      "the config's folder); the contract's arguments are appended")
    params: dict = Field(default_factory=dict, description="passed to the program as they are (its own settings)")
    noise: Literal["laplace", "gaussian"] | None = Field(
        None, description="the noise family the program declares (independent noise on each cell's count): the audit "
        "then also checks the noise's scale and shape from output minus truth; null: the statistical bound alone")
    delta: float | None = Field(None, gt=0, lt=1, description="noise: gaussian: the δ of the (ε, δ) each ε of the "
                                "grid means (default params.delta); the audit checks its noise against the zCDP ρ "
                                "that OpenDP's conversion gives for them")
    audit_runs: int | None = Field(None, ge=10, description="releases per neighbour in its audit (default "
                                   "release.audit.runs); each is a whole release of the unit. Few runs reach only a "
                                   "small ε: the audit says how far (bound_power)")
    measurements: ProgramMeasurementsConfig | None = Field(
        None, description="audit also the program's first (Gaussian) measurements, many times: for a synthesizer "
        "whose whole releases are too slow to audit with power")
    spending: ProgramSpendingConfig | None = Field(
        None, description="audit the synthesizer where its privacy is spent: every measurement and selection of real "
        "fits, recorded (synth/audit/spending.py)")
    calls: Literal["single", "batch"] = Field(
        "single", description="how the audit calls it. single: one release per call, each call with a seed of its own, "
        "as publication calls it; batch: audit_runs releases per call (for a program too slow to start once per "
        "release, e.g. a Spark session), and single_runs releases of the unit one per call besides, whose noise must "
        "be the same law as the batches' (a program that behaves differently when asked for one release fails)")
    single_runs: int = Field(50, ge=10, description="calls: batch: the releases drawn one per call (each its own seed) "
                             "beside the batches")
    single_units: int | None = Field(None, ge=1, description="calls: batch: the first units of the audit on which those "
                                     "releases one per call are drawn (the call-shape check); null: every unit. For a "
                                     "program slow to call (a Spark job each), whose call shape does not depend on "
                                     "the unit")

    @model_validator(mode="after")
    def _one(self):
        if (self.function is None) == (self.command is None):
            raise ValueError(f"release.programs {self.name!r}: give exactly one of function and command")
        if self.function is not None and ":" not in self.function:
            raise ValueError(f"release.programs {self.name!r}: function is module:function or file.py:function, got "
                             f"{self.function!r}")
        if self.noise == "gaussian" and self.delta_of() is None:
            raise ValueError(f"release.programs {self.name!r}: Gaussian noise spends a zCDP ρ that depends on the δ of "
                             "its (ε, δ): give release.programs[].delta (or params.delta)")
        if self.delta is not None and "delta" in self.params and float(self.params["delta"]) != self.delta:
            raise ValueError(f"release.programs {self.name!r}: params.delta ({self.params['delta']}) and delta "
                             f"({self.delta}) must be the same δ")
        for key in ("measurements", "spending"):
            m = getattr(self, key)
            if m is not None and "delta" in self.params and float(self.params["delta"]) != m.delta:
                raise ValueError(f"release.programs {self.name!r}: params.delta ({self.params['delta']}) and "
                                 f"{key}.delta ({m.delta}) must be the same δ")
        return self

    def delta_of(self) -> float | None:
        """The δ of its (ε, δ): ``delta``, else ``params.delta``."""
        return self.delta if self.delta is not None else (
            float(self.params["delta"]) if "delta" in self.params else None)


class CellKeyConfig(_Strict):
    """The cell key method (ABS; ONS 2021): record keys, a perturbation table of maximum perturbation D and
    variance V (one setting per variance), the same perturbation for a cell in every table. Not DP."""

    max_perturbation: int = Field(3, ge=1, le=20, description="D: no count moves by more than this")
    variances: list[float] = Field([0.5, 1.0, 2.0], description="the perturbation table's variance V, each a "
                                   "setting (larger: more protective); a count too small for V gets the most it can")
    key_range: int = Field(256, ge=3, description="record keys are 0 … key_range - 1; a cell's key is their sum "
                           "modulo this")

    @model_validator(mode="after")
    def _check(self):
        if not self.variances or any(not v > 0 for v in self.variances) or self.key_range < 2 * self.max_perturbation + 1:
            raise ValueError(f"release.cell_key: variances must be positive and key_range at least 2·max_perturbation "
                             f"+ 1, got {self.variances}, {self.key_range}")
        return self


class TargetedSwapConfig(_Strict):
    """Targeted record swapping (ONS 2021's manner): records at risk swapped first with matching records
    of another area of the enclosing unit, then others at random, up to each rate. Not DP."""

    rates: list[float] = Field([0.02, 0.1], description="share of the unit's records swapped, each a setting (the ONS "
                               "reports 7% to 10% of households for 2021)")
    risk: list[str] | None = Field(None, description="attributes a record is at risk on (default: every attack "
                                   "attribute but BLOCK)")
    threshold: int = Field(1, ge=1, description="at risk: at most this many persons of the block share the record's "
                           "risk attributes (1: unique in its block)")
    match: list[str] = Field(["SEX", "AGE"], description="a partner from the other area matches on these (AGE by "
                             "P12 age group)")

    @model_validator(mode="after")
    def _check(self):
        if not self.rates or any(not 0 < r <= 1 for r in self.rates):
            raise ValueError(f"release.targeted_swap.rates must be shares in (0, 1], got {self.rates}")
        return self


class ReleaseConfig(_Strict):
    """The defence: which releases to evaluate (DP at each ε; swapping at each swap rate), under which
    neighbouring relation."""

    epsilons: list[float] = Field([0.1, 0.3, 1.0, 3.0, 10.0], description="the ε of each release evaluated (each "
            "mechanism but swapping)")
    mechanisms: list[str] = Field(
        ["laplace_tables", "synthetic", "perturbed_histogram", "smoothed_histogram"], description="the releases "
        "evaluated side by side, by their names in synth.registry: noisy tables (laplace_tables), synthetic microdata "
        "fitted to them, the perturbed and smoothed histograms, TopDown (2020's), record swapping (2010's, not DP), "
        "the cell key method and targeted record swapping (ONS 2021's, not DP), and any mechanism registered")
    settings: dict[str, list[float]] = Field(default_factory=dict, description="a registered mechanism's settings "
                                             "when it has no field of its own here: {name: [setting, ...]}")
    options: dict[str, dict] = Field(default_factory=dict, description="a registered mechanism's own options when "
                                     "it has no section of its own here: {name: {...}}, given to it as they are")
    swap_rates: list[float] = Field([0.02, 0.1, 0.5], description="swapping: share of records swapped, each a setting")
    swap_match: list[str] = Field(["SEX", "AGE"], description="swapping: pairs match on these (AGE by P12 age group)")
    cell_key: CellKeyConfig = CellKeyConfig()
    targeted_swap: TargetedSwapConfig = TargetedSwapConfig()
    topdown: TopDownConfig = TopDownConfig()
    relation: Literal["replace_one", "add_remove"] = Field(
        "replace_one", description="the neighbouring datasets ε protects against: one person replaced (n public) or "
                "one added or removed")
    backend: Literal["simulation", "opendp"] = Field(
        "simulation", description="simulation: seeded keyed noise for studies (not for publication); opendp: OpenDP's "
                "samplers, for a release you publish")
    invariants: list[Literal["unit_total", "occupied_blocks", "root_total"]] = Field(
        default_factory=list, description="facts the agency publishes exactly and declares as such (recorded in the "
        "ledger): unit_total = each unit's person count; occupied_blocks = a block list taken from the persons, for "
        "data that has no public one; root_total = the TopDown root's total (a state total in 2020)")
    audit: AuditConfig = AuditConfig()
    tolerance: ToleranceConfig = Field(ToleranceConfig(), description="what the board accepts: extra persons "
                                       "reconstructed beyond the best guess; safe means shown below it")
    files: list[ReleaseFileConfig] = Field(default_factory=list, description="releases made outside censusrecon "
                                           "(an agency's own tables or microdata), evaluated beside the mechanisms")
    programs: list[ReleaseProgramConfig] = Field(
        default_factory=list, description="release programs made outside censusrecon (OpenDP, Tumult Analytics, your "
        "own), run at each ε, attacked and audited as black boxes beside the mechanisms")
    risks: bool = Field(True, description="measure singling-out, linkability and attribute-inference risk of every "
                                          "microdata file a release publishes, with anonymeter (make risk-env)")
    risk_attacks: int = Field(500, ge=10, description="attacks per anonymeter evaluator (anonymeter's default, 500), "
                              "capped by the smallest of the published, private and control files; fewer attacks: "
                              "wider intervals")

    @model_validator(mode="after")
    def _check(self):
        if not self.epsilons or any(not (e >= MIN_EPSILON) or e == float("inf") for e in self.epsilons):
            raise ValueError(f"release.epsilons must be finite numbers >= {MIN_EPSILON:g}, got {self.epsilons}")
        unknown = [m for m in self.mechanisms if not registry.is_mechanism(m)]
        if unknown:
            raise ValueError(f"release.mechanisms: no mechanism is named {', '.join(map(repr, unknown))}; the "
                             f"registered ones: {', '.join(registry.names())}")
        for m in self.mechanisms:
            kind = registry.mechanism(m)
            if self.relation not in kind.relations:
                raise ValueError(f"{kind.title.lower()} is DP only under {' or '.join(kind.relations)} neighbours"
                                 + (" (n public)" if kind.relations == ("replace_one",) else ""))
            where = f"release.{kind.settings_field or 'settings.' + m}"
            if not self.settings_of(m):
                raise ValueError(f"{where}: give {kind.title.lower()}'s {kind.settings_word}")
            if kind.percent and any(not 0 < v <= 1 for v in self.settings_of(m)):
                raise ValueError(f"{where} must be shares in (0, 1], got {self.settings_of(m)}")
        if len(set(self.mechanisms)) != len(self.mechanisms) or not (self.mechanisms or self.files or self.programs):
            raise ValueError(f"release.mechanisms must be distinct, and non-empty unless release.files or "
                             f"release.programs names a release, got {self.mechanisms}")
        names = [p.name for p in self.programs]
        if len(set(names)) != len(names):
            raise ValueError(f"release.programs: names must be distinct, got {names}")
        named: dict[str, list] = {}
        for f in self.files:
            named.setdefault(f.name, []).append(f.epsilon)
        for name, eps in named.items():
            if len(eps) > 1 and (None in eps or len(set(eps)) != len(eps)):
                raise ValueError(f"release.files: the {len(eps)} files named {name!r} are one release at several ε: "
                                 f"each needs its own epsilon, got {eps}")
        if isinstance(self.audit.epsilons, list):
            stray = [e for e in self.audit.epsilons if e not in self.epsilons]
            if not self.audit.epsilons or stray:
                raise ValueError(f"release.audit.epsilons: {', '.join(f'{e:g}' for e in stray) or 'an empty list'} "
                                 f"{'is' if len(stray) == 1 else 'are'} not among release.epsilons "
                                 f"({', '.join(f'{e:g}' for e in self.epsilons)}): audit the ε you release at, or "
                                 "all (the default) or extremes")
        totals = [i for i in self.invariants if i in ("unit_total", "root_total")]
        if totals and self.relation == "add_remove":
            raise ValueError(
                f"release.invariants {totals} publish an exact person count, and adding or removing one person changes "
                "it (ε = ∞ under add_remove). An exact total restricts the neighbours to those of the same size: "
                "declare release.relation: replace_one, or drop the invariant")
        return self

    def settings_of(self, mechanism: str) -> list[float]:
        """The settings a release is evaluated at: its mechanism's own (ε, swap rates, ptable variances: the
        field the registry names), the declared ε of a file release (``file:<name>``; 0 for one not declared
        DP), ε for a program."""
        if registry.is_file(mechanism):
            return [f.epsilon or 0.0 for f in self.files if FILE_PREFIX + f.name == mechanism]
        if registry.is_program(mechanism):
            return list(self.epsilons)
        field = registry.mechanism(mechanism).settings_field
        if field is None:
            return list(self.settings.get(mechanism, []))
        value = self
        for part in field.split("."):
            value = getattr(value, part)
        return list(value)

    def options_of(self, mechanism: str):
        """A mechanism's own section of this config (swapping's match list, the cell key method's ptable)."""
        field = registry.mechanism(mechanism).options_field
        return self.options.get(mechanism, {}) if field is None else getattr(self, field)

    @property
    def evaluated(self) -> list[str]:
        """Every release evaluated: the mechanisms, each program as program:<name>, each file as file:<name>."""
        return (list(self.mechanisms) + [PROGRAM_PREFIX + p.name for p in self.programs]
                + list(dict.fromkeys(FILE_PREFIX + f.name for f in self.files)))

    def program(self, mechanism: str) -> "ReleaseProgramConfig":
        return next(p for p in self.programs if PROGRAM_PREFIX + p.name == mechanism)

    def file(self, mechanism: str, setting: float) -> "ReleaseFileConfig":
        return next(f for f in self.files if FILE_PREFIX + f.name == mechanism and (f.epsilon or 0.0) == setting)

    @property
    def row_mechanisms(self) -> list[str]:
        """The releases evaluated that publish rows: mechanisms that do, and microdata files."""
        return ([m for m in self.mechanisms if registry.mechanism(m).rows]
                + list(dict.fromkeys(FILE_PREFIX + f.name for f in self.files if f.kind == "microdata")))

    @property
    def dp_mechanisms(self) -> list[str]:
        """The mechanisms censusrecon runs and audits as DP (files are not run, so not audited)."""
        return [m for m in self.mechanisms if registry.mechanism(m).dp]

    def audited_epsilons(self) -> list[float]:
        """The ε the audit checks (``audit.epsilons``), in increasing order; PUBLISH names no other."""
        eps = sorted(set(self.epsilons))
        if isinstance(self.audit.epsilons, list):
            return sorted(set(self.audit.epsilons))
        return eps if self.audit.epsilons == "all" else sorted({eps[0], eps[-1]})


class SweepConfig(_Strict):
    """Fan-out of an experiment over seeds (and its units and methods): see `censusrecon sweep`."""

    seeds: list[int] = Field([0], description="each seed runs the whole config again (units, methods)")
    num_cpus: int | None = Field(None, ge=1, description="CPUs of the local Ray cluster (default: all)")
    methods: list[str] | None = Field(
        None, description="only these tasks: method names as a run's curves name them (exact: the exact attack; "
        "baselines: every baseline); default every method of the config and the baselines")


class ExperimentConfig(_Strict):
    """One experiment: what data, which units, which queries, which attack and baselines.

    Relative file paths of ``data`` (path, units_file, dictionary) are read from the config's
    folder (``base_dir``, set by :func:`load_config`; the working directory for a config built in
    code), so a config and its data move together. The folder is not part of the config hash."""

    _base_dir: str | None = PrivateAttr(None)

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$", description="the results' folder: OUT/<name>/<config-hash>/")
    seed: int = Field(0, description="seeds the unit choice, the halves D / D_holdout, the attack and the simulation "
            "noise")
    data: DataConfig = DataConfig()
    attributes: list[str] | None = Field(None, description="attack attributes; default: the source's own")
    target: TargetConfig = TargetConfig()
    holdout_fraction: float = Field(0.5, gt=0, lt=1, description="share of each unit's persons kept out as D_holdout")
    queries: list[QueryConfig] = [QueryConfig()]
    attack: AttackConfig = AttackConfig()
    baselines: BaselinesConfig = BaselinesConfig()
    grid_points: int = Field(100, ge=2, le=10000, description="points of k/u at which match rates are averaged across "
            "units")
    release: ReleaseConfig | None = None
    reidentification: ReidentificationConfig | None = None
    sweep: SweepConfig = SweepConfig()

    @field_validator("queries", mode="before")
    @classmethod
    def _one_or_many(cls, v):
        return [v] if isinstance(v, dict) else v

    @model_validator(mode="before")
    @classmethod
    def _own_data_whole_units(cls, raw):
        """Whole units by default where the user brings their own person file (data.source: table): an
        agency evaluates the release it would publish, of every person; the half split only when asked
        (target.whole_units: false). Written into the config, so its hash says which."""
        if not isinstance(raw, dict):
            return raw
        data, target = raw.get("data"), raw.get("target")
        source = data.get("source") if isinstance(data, dict) else getattr(data, "source", None)
        if target is None:
            target = {}
        if isinstance(target, dict) and target.get("whole_units") is None:
            raw = {**raw, "target": {**target, "whole_units": source == "table"}}
        return raw

    @model_validator(mode="after")
    def _check(self):
        labels = [q.label for q in self.queries]
        if not labels or len(set(labels)) != len(labels):
            raise ValueError(f"queries need at least one workload and distinct names, got {labels}")
        if self.attack.exact and not any(q.is_tables for q in self.queries):
            raise ValueError("attack.exact reconstructs published tables: add a kind: tables workload")
        tables_only = [m for m in (self.release.mechanisms if self.release else []) if registry.mechanism(m).needs_tables]
        if tables_only and not self.published.is_tables:
            raise ValueError(f"the {tables_only[0]} release publishes tables: make the first workload kind: tables")
        if self.target.whole_units:
            if "holdout" in self.baselines.methods or "holdout" in self.attack.init:
                own = (" (the default for your own person file, data.source: table; target.whole_units: false attacks "
                       "a random half of each unit and keeps the other half as the holdout)"
                       if self.data.source == "table" else "")
                raise ValueError(f"target.whole_units{own} leaves no D_holdout: drop 'holdout' from baselines and "
                                 "attack.init")
            if self.attack.init_mode == "each_once" and any(i != "random" for i in self.attack.init):
                raise ValueError("attack.init_mode each_once takes n' = |D_holdout|, which target.whole_units "
                                 "does not have: use init_mode resample")
        if self.release is not None and self.release.files:
            if not self.target.whole_units:
                raise ValueError("release.files are releases made outside censusrecon, of every person of their "
                                 "units: set target.whole_units: true (the attacks then target each whole unit, "
                                 "and the tool's own mechanisms release whole units too)")
            if any(f.kind == "microdata" for f in self.release.files) and self.data.source not in ("table", "bureau"):
                raise ValueError("a microdata release file is read as the person file is, by its source: it needs "
                                 "data.source: table (your columns and codes) or bureau (the Bureau's extract format)")
            if any(f.kind == "tables" for f in self.release.files) and not self.published.is_tables:
                raise ValueError("a tables release file publishes the declared tables: make the first workload "
                                 "kind: tables")
        if self.release is not None and self.release.programs and not self.published.is_tables:
            raise ValueError("a release program publishes the declared tables: make the first workload kind: tables")
        if self.reidentification is not None and not self.attack.exact:
            raise ValueError("reidentification links the exact reconstruction's rows: set attack.exact: true")
        return self

    def rap_method(self, query: "QueryConfig", init: str) -> str:
        """rap_rank[_<workload> when several][_init_<baseline>]."""
        name = attacks.RAP_RANK + (f"_{query.label}" if len(self.queries) > 1 else "")
        return name if init == "random" else f"{name}_init_{init}"

    def __eq__(self, other) -> bool:  # the fields, not where the config was read from
        return isinstance(other, ExperimentConfig) and self.model_dump() == other.model_dump()

    def __hash__(self) -> int:
        return hash(self.digest())

    @property
    def base_dir(self) -> str | None:
        """The folder relative data paths are read from (None: the working directory)."""
        return self._base_dir

    def with_base_dir(self, base_dir: str | Path | None) -> "ExperimentConfig":
        self._base_dir = None if base_dir is None else str(Path(base_dir).resolve())
        return self

    def data_file(self, value: str | None) -> str | None:
        """A data path of this config as the file system finds it: absolute, or from ``base_dir``."""
        if value is None or self._base_dir is None or Path(value).is_absolute():
            return value
        return str(Path(self._base_dir) / value)

    @property
    def published(self) -> "QueryConfig":
        """The published workload: the first of ``queries``, what every release publishes and is attacked on (the
        others are studied by ``run`` only)."""
        return self.queries[0]

    def unit_method(self, attack: str, query: "QueryConfig") -> str:
        """An attack run unit by unit, on one workload: <attack>[_<workload> when several]."""
        return attack + (f"_{query.label}" if len(self.queries) > 1 else "")

    def digest(self) -> str:
        """12 hex digits of the SHA-256 of the canonical JSON of the resolved config."""
        blob = json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:12]


def _keys_at(loc: tuple) -> list[str]:
    """The keys the config takes in the section at ``loc`` (a list's index or a dict's key skipped over)."""
    import typing

    model: Any = ExperimentConfig
    for part in loc:
        if isinstance(part, int) or not (isinstance(model, type) and issubclass(model, BaseModel)):
            continue
        field = model.model_fields.get(str(part))
        if field is None:
            return []
        sub = [a for a in typing.get_args(field.annotation) for a in ([a] + list(typing.get_args(a)))] or [field.annotation]
        model = next((a for a in sub if isinstance(a, type) and issubclass(a, BaseModel)), None)
    return list(model.model_fields) if isinstance(model, type) and issubclass(model, BaseModel) else []


def _did_you_mean(word, options) -> str:
    """' (did you mean 'epsilons'?)' when one of ``options`` is close to ``word``.

    >>> _did_you_mean("epsilon", ["epsilons", "mechanisms"]), _did_you_mean("zzz", ["epsilons"])
    (" (did you mean 'epsilons'?)", '')
    """
    import difflib

    close = difflib.get_close_matches(str(word), [str(o) for o in options], n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _format_errors(err: ValidationError, source: str) -> str:
    lines = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"]) or "(top level)"
        if e["type"] == "extra_forbidden":
            lines.append(f"unknown key {loc!r}" + _did_you_mean(e["loc"][-1], _keys_at(e["loc"][:-1])))
        elif e["type"] == "literal_error":  # a value not among those allowed: the closest one, if any is close
            allowed = re.findall(r"'([^']*)'", str(e.get("ctx", {}).get("expected", "")))
            lines.append(f"{loc}: {e['msg']}, got {e['input']!r}" + _did_you_mean(e["input"], allowed))
        else:  # our validators' own words, without the library's "Value error, " prefix
            msg = str(e["ctx"]["error"]) if e["type"] == "value_error" and "error" in e.get("ctx", {}) else e["msg"]
            lines.append(f"{loc}: {msg}" if loc != "(top level)" else msg)
    return f"invalid config {source}: " + "; ".join(lines)


def apply_overrides(raw: dict, overrides: list[str]) -> dict:
    """Apply ``key.sub=value`` overrides (values parsed as YAML) to a raw config mapping."""
    out = copy.deepcopy(raw)
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"--set expects key=value, got {item!r}")
        key, value = item.split("=", 1)
        parts = key.strip().split(".")
        if not all(parts):
            raise ConfigError(f"--set key {key!r} is malformed")
        node = out
        for p in parts[:-1]:
            node = node.setdefault(p, {})
            if not isinstance(node, dict):
                raise ConfigError(f"--set {key}: {p!r} is not a section")
        if key.strip() in {f"data.{k}" for k in DATA_PATH_KEYS} and value.strip():
            node[parts[-1]] = value.strip().strip("'\"")  # a path is a string, whatever YAML would make of it
            continue
        try:
            node[parts[-1]] = yaml.safe_load(value)
        except yaml.YAMLError as e:
            what = getattr(e, "problem", None) or str(e).splitlines()[0]
            raise ConfigError(f"--set {key.strip()}: {value!r} is not a YAML value ({what}); quote it") from None
    return out


def load_config(path: str | Path, overrides: list[str] | None = None) -> ExperimentConfig:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file {str(path)!r} does not exist")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"config {path} is not UTF-8 text (byte {e.start}); save it as UTF-8") from None
    except OSError as e:
        raise ConfigError(f"config {path} cannot be read: {e.strerror}") from None
    try:
        raw = yaml.safe_load(text) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"config {path} is not valid YAML{_yaml_where(e, text)}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"config {path} must be a mapping at the top level")
    _check_set_paths(path, overrides or [])
    return parse_config(apply_overrides(raw, overrides or []), str(path)).with_base_dir(path.parent)


def _yaml_where(e: yaml.YAMLError, text: str) -> str:
    r"""Where a YAML error is and what it is, at the line that is wrong: a key without its colon is reported by
    the parser on the line after (where it gave up looking for the colon), so that one is named by the line the
    key started on; the line itself is quoted.

    >>> try:
    ...     yaml.safe_load("a: 1\nb 2\nc: 3\n")
    ... except yaml.YAMLError as err:
    ...     print(_yaml_where(err, "a: 1\nb 2\nc: 3\n").strip())
    at line 2 ('b 2'): a key without its ':' (could not find expected ':')
    """
    problem = getattr(e, "problem", None) or str(e).splitlines()[0]
    mark = getattr(e, "problem_mark", None)
    context = getattr(e, "context_mark", None)
    what = problem
    if context is not None and "could not find expected ':'" in problem:
        mark, what = context, f"a key without its ':' ({problem})"
    if mark is None:
        return f": {what}"
    lines = text.splitlines()
    line = lines[mark.line].strip() if mark.line < len(lines) else ""
    return f" at line {mark.line + 1}" + (f" ({line!r})" if line else f", column {mark.column + 1}") + f": {what}"


#: The data keys that name files; a relative one is read from the config's folder.
DATA_PATH_KEYS = ("path", "units_file", "dictionary")


def _check_set_paths(config: Path, overrides: list[str]) -> None:
    """A data path given with --set is read like the same key in the file: from the config's folder. One
    that is not there but is where the command runs would be read from the wrong place in silence: a
    one-line error says both places and what to write."""
    import os

    for item in overrides:
        key, sep, value = item.partition("=")
        value = value.strip().strip("'\"")
        if not (sep and key.strip() in {f"data.{k}" for k in DATA_PATH_KEYS} and value) or Path(value).is_absolute():
            continue
        there = config.parent / value
        if not there.exists() and Path(value).exists():
            rel = os.path.relpath(Path(value).resolve(), config.parent.resolve())
            raise ConfigError(f"--set {key.strip()}={value}: a path given with --set is read from the config's folder, "
                              f"like the same key in the file, and {there} does not exist; {value} from here is "
                              f"--set {key.strip()}={rel} (or give an absolute path)")


def parse_config(raw: dict[str, Any], source: str = "<dict>") -> ExperimentConfig:
    try:
        return ExperimentConfig.model_validate(raw)
    except ValidationError as e:
        raise ConfigError(_format_errors(e, source)) from None
