"""The baselines' settings in a config (part of the schema :mod:`experiments.config` assembles): the comparators that
never see the statistics."""

from __future__ import annotations

from pydantic import Field, field_validator, model_validator

from censusrecon.microdata.data_settings import Strict


class BaselinesConfig(Strict):
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
