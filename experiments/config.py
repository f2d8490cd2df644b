"""Experiment configs: a typed pydantic schema (unknown keys are errors), --set overrides, a hash."""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from microdata.errors import CensusReconError


class ConfigError(CensusReconError):
    """A config file or override is invalid; the message names the key."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PopulationConfig(_Strict):
    """Sizes of the embedded population (see microdata.population.PopulationSpec)."""

    states: int = Field(4, ge=1, le=99)
    counties_per_state: int = Field(3, ge=1, le=999)
    tracts_per_county: int = Field(4, ge=1, le=9999)
    blocks_per_tract: tuple[int, int] = (12, 36)
    block_size_median: float = Field(22.0, gt=0)


class DataConfig(_Strict):
    source: Literal["embedded"] = "embedded"
    seed: int = 0
    population: PopulationConfig = PopulationConfig()


class TargetConfig(_Strict):
    level: Literal["tract", "block"] = "tract"
    units: int = Field(4, ge=1, description="how many target units to attack")
    selection: Literal["one_per_state", "random"] = "one_per_state"
    min_rows: int = Field(20, ge=2)
    max_rows: int | None = Field(None, ge=2)
    with_block: list[bool] = [True]
    unit_ids: list[str] | None = None

    @model_validator(mode="after")
    def _check(self):
        if self.level == "block" and any(self.with_block):
            raise ValueError("target.with_block must be [false] for block targets (a block has one BLOCK)")
        if not self.with_block:
            raise ValueError("target.with_block needs at least one value, e.g. [true, false]")
        if self.max_rows is not None and self.max_rows < self.min_rows:
            raise ValueError("target.max_rows must be >= target.min_rows")
        return self


class QueryConfig(_Strict):
    kind: Literal["marginals"] = "marginals"
    k: int = Field(2, ge=1, le=4)
    lower: bool = False


class AttackConfig(_Strict):
    runs: int = Field(100, ge=1, description="K")
    rows: int = Field(500, ge=1, description="n'")
    steps: int = Field(500, ge=1, description="T")
    learning_rate: float = Field(0.3, gt=0)
    sampling: Literal["dense", "error"] = "dense"
    queries_per_step: int = Field(1024, ge=1)
    init: list[str] = ["random"]
    init_confidence: float = Field(0.5, gt=0, lt=1)
    batch: int | None = Field(None, ge=1)
    steps_per_call: int = Field(1000, ge=1)

    @field_validator("init")
    @classmethod
    def _inits(cls, v):
        ok = {"random", "holdout", "block", "tract", "county", "state", "national"}
        bad = [x for x in v if x not in ok]
        if bad or not v:
            raise ValueError(f"attack.init entries must be among {sorted(ok)}, got {v}")
        return v


class ExperimentConfig(_Strict):
    """One experiment: what data, which units, which queries, which attack and baselines."""

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    seed: int = 0
    data: DataConfig = DataConfig()
    attributes: list[str] = ["AGE", "SEX", "HISP", "RACE"]
    target: TargetConfig = TargetConfig()
    holdout_fraction: float = Field(0.5, gt=0, lt=1)
    queries: QueryConfig = QueryConfig()
    attack: AttackConfig = AttackConfig()
    baselines: list[str] = ["holdout", "county", "state", "national"]
    grid_points: int = Field(100, ge=2, le=10000)

    @model_validator(mode="after")
    def _check(self):
        levels = {"tract": ["county", "state", "national"], "block": ["tract", "county", "state", "national"]}
        allowed = {"holdout", *levels[self.target.level]}
        bad = [b for b in self.baselines if b not in allowed]
        if bad:
            raise ValueError(f"baselines {bad} are not valid for {self.target.level} targets; choose from {sorted(allowed)}")
        bad_init = [i for i in self.attack.init if i not in {"random", *allowed}]
        if bad_init:
            raise ValueError(f"attack.init {bad_init} not valid for {self.target.level} targets; choose from {sorted({'random', *allowed})}")
        return self

    def digest(self) -> str:
        """12 hex digits of the SHA-256 of the canonical JSON of the resolved config."""
        blob = json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:12]


def _format_errors(err: ValidationError, source: str) -> str:
    lines = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"]) or "(top level)"
        if e["type"] == "extra_forbidden":
            lines.append(f"unknown key {loc!r}")
        else:
            lines.append(f"{loc}: {e['msg']}")
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
        node[parts[-1]] = yaml.safe_load(value)
    return out


def load_config(path: str | Path, overrides: list[str] | None = None) -> ExperimentConfig:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file {str(path)!r} does not exist")
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"config {path} is not valid YAML: {e}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"config {path} must be a mapping at the top level")
    return parse_config(apply_overrides(raw, overrides or []), str(path))


def parse_config(raw: dict[str, Any], source: str = "<dict>") -> ExperimentConfig:
    try:
        return ExperimentConfig.model_validate(raw)
    except ValidationError as e:
        raise ConfigError(_format_errors(e, source)) from None
