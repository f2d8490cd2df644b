"""The data's and the published workload's settings in a config: where the persons come from (the embedded population,
a person file with its declared geography and attributes) and the tables published. Part of the schema
:mod:`experiments.config` assembles; validated when built."""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from censusrecon.microdata.census import TABLE_SETS, sf1_tables
from censusrecon.microdata.sources import source


class Strict(BaseModel):
    """A config section: unknown keys are errors, values frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class PopulationConfig(Strict):
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


class GeoLevelConfig(Strict):
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


class AttributeDeclConfig(Strict):
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


class DataConfig(Strict):
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


class TableDeclConfig(Strict):
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


class QueryConfig(Strict):
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


class TargetConfig(Strict):
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
    block_ladder: float | None = Field(
        None, gt=1.0, le=2.0, description="with BLOCK, pad further, to the next size of a geometric ladder of this "
        "ratio (block_bucket, then each size times the ratio, rounded up to a multiple of block_bucket), so a "
        "state's tracts of 20 to 300 blocks share a handful of compiled programs (1.25 with block_bucket 8: 11 sizes "
        "instead of 36, at most 25% padding); null: multiples of block_bucket only")

    def padded_blocks(self, blocks: int) -> int:
        """How many blocks a unit of ``blocks`` listed blocks is padded to for the attack (see ``block_bucket`` and
        ``block_ladder``).

        >>> t = TargetConfig(); t.padded_blocks(85), t.padded_blocks(1)
        (88, 8)
        >>> t = TargetConfig(block_ladder=1.25); [t.padded_blocks(n) for n in (8, 9, 20, 85, 300)]
        [8, 16, 24, 96, 304]
        """
        bucket = self.block_bucket
        size = -(-blocks // bucket) * bucket
        if self.block_ladder is None or size == 0:
            return size
        rung = bucket
        while rung < size:
            rung = -(-math.ceil(rung * self.block_ladder) // bucket) * bucket
        return rung
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
