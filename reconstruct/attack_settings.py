"""RAP-Rank's and the other attacks' settings in a config (part of the schema :mod:`experiments.config` assembles):
every numerical default from :mod:`reconstruct.settings`, the attacks by their names in :mod:`reconstruct.attacks`."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from censusrecon.microdata.data_settings import Strict
from censusrecon.reconstruct import attacks
from censusrecon.reconstruct.settings import default as rap_default


#: the paper's attack strength (Dick et al. 2023: K = 100 runs of T = 1000 steps on n' = 1000 rows)
PAPER_STRENGTH = {"runs": 100, "steps": 1000, "rows": 1000}


class AttackConfig(Strict):
    """RAP-Rank's settings. ``draws_per_run`` and ``init_mode`` choose between our defaults and
    the paper code's sampling and initialisation (configs/paper/ uses the paper's)."""

    runs: int = Field(100, ge=1, description="K")
    max_runs: int | None = Field(None, ge=1, description="evaluate-release: the most K may be doubled to on a release "
                                 "where doubling it still adds persons (RAP-Rank not saturated); unset: K stays as "
                                 "given, and a release where it has not saturated cannot be published")
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
    kernel: Literal["auto", "xla", "pallas"] = Field(
        rap_default("kernel"), description="census tables: XLA's ops (xla), fused GPU kernels (Pallas) that never write "
        "the product rows (pallas), or auto: XLA's ops on a CPU, on a GPU the fused kernels where they agree with "
        "XLA's and run the first block faster on that card")
    draws_per_run: int | Literal["n"] | None = Field(
        None, description="rows drawn from each fitted relaxed dataset: null = one per relaxed row; an integer; "
        "or n = as many as D has persons (the paper code's census setting; the attacker reads n off the published "
        "total)")
    methods: list[str] = Field(
        [attacks.MARGINS_ATTACK], description="attacks run unit by unit on the published answers beside RAP-Rank, by "
        "their names in reconstruct.attacks: one_way_margins (the trivial attack), or any attack registered")
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
        if self.max_runs is not None and self.max_runs < self.runs:
            raise ValueError(f"attack.max_runs ({self.max_runs}) is the most K is raised to: give at least attack.runs "
                             f"({self.runs}), or leave it unset")
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
