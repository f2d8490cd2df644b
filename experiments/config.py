"""Experiment configs: a typed pydantic schema (unknown keys are errors), --set overrides, a hash."""

from __future__ import annotations

import copy
import re
import hashlib
import json
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, Field, PrivateAttr, ValidationError, field_validator, model_validator

from censusrecon.baselines.baseline_settings import BaselinesConfig
from censusrecon.microdata.data_settings import DataConfig, QueryConfig, Strict, TargetConfig
from censusrecon.microdata.errors import ConfigError  # the schema's error, defined with the others (the audit raises it too)
from censusrecon.reconstruct import attacks
from censusrecon.reconstruct.attack_settings import AttackConfig
from censusrecon.synth import registry
from censusrecon.synth.release_settings import (AuditConfig, CellKeyConfig, ProgramMeasurementsConfig,  # noqa: F401
                                                ProgramSpendingConfig, ReleaseConfig, ReleaseFileConfig,
                                                ReleaseProgramConfig, TargetedSwapConfig, ToleranceConfig,
                                                TopDownConfig)


class CommercialFileConfig(Strict):
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


class ReidentificationConfig(Strict):
    """The Bureau's reidentification simulation: attacker files linked one to one to the
    reconstruction (and to the modal and proportional guessers), confirmed against D."""

    attacker_files: list[Literal["perfect", "commercial"]] = Field(
        ["perfect", "commercial"], min_length=1,
        description="perfect: every person of D, exactly (the Bureau's CEF attacker); commercial: a file with the "
        "commercial file's kinds of error (rates in commercial)")
    commercial: CommercialFileConfig = CommercialFileConfig()


class SweepConfig(Strict):
    """Fan-out of an experiment over seeds (and its units and methods): see `censusrecon sweep`."""

    seeds: list[int] = Field([0], description="each seed runs the whole config again (units, methods)")
    num_cpus: int | None = Field(None, ge=1, description="CPUs of the local Ray cluster (default: all)")
    methods: list[str] | None = Field(
        None, description="only these tasks: method names as a run's curves name them (exact: the exact attack; "
        "baselines: every baseline); default every method of the config and the baselines")


class ExperimentConfig(Strict):
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
