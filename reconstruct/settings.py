"""RAP's numerical settings, defined once: the attack reads them, and the configuration schema takes every
default from here (no JAX import, so reading a config stays fast)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

from censusrecon.microdata.errors import CensusReconError


@dataclass(frozen=True)
class RAPSettings:
    """Numerical settings of one RAP fit (hashable: they select a compiled program).

    Attributes:
        rows: n', the number of relaxed rows (each rounds to one row of D').
        steps: T, Adam steps per fit.
        learning_rate: Adam step size on the logits.
        sampling: ``"dense"`` fits every query every step; ``"error"`` is the paper code's
            step: ``queries_per_step`` queries drawn each step with probability proportional
            to their current absolute error (Gumbel top-k, without replacement).
        queries_per_step: queries per step when ``sampling="error"``.
        init_confidence: when initialised from a dataset, the probability the relaxed row
            puts on that dataset's value (the rest spread uniformly); 1 would freeze softmax.
        steps_per_call: T is run in compiled blocks of this many steps (``lax.scan``); the
            host only sees the state (for progress) between blocks.
        batch: (unit, run) pairs vmapped into one compiled call; ``None`` picks per backend.
        precision: operand dtype of the hot loop's matmuls (accumulation is always float32).
            ``"bfloat16"`` is opt-in and used only when a self-test on this backend passes.
        kernel: how a census plan's parts are computed. ``"xla"``: XLA's ops (every backend). ``"pallas"``: each
            part's answers and cotangents as fused GPU kernels (:mod:`reconstruct.fused`) that never write the
            product rows to memory (on a CPU, Pallas's interpreter: for tests, slow). ``"auto"`` (the default):
            XLA's ops on a CPU; on a GPU, the fused kernels where they agree with XLA's ops on this card and run
            the fit's first block faster, once per shape (:mod:`reconstruct.kernel_choice`). Marginal plans have
            no product rows and run as they are.
        init_mode: how a run initialised from a dataset (``init_pool``) uses it. ``"resample"``:
            n' rows drawn with replacement from the pool, afresh per run. ``"each_once"`` (the
            paper code's ``--init_split``): the pool has exactly n' rows and relaxed row i starts
            at pool row i, so every pool row is used once in every run.
        draws: rows drawn from each fitted relaxed dataset when it is rounded. ``None``: one per
            relaxed row (each row rounded once). An integer m (the paper code's
            ``num_samples``): every relaxed row is rounded floor(m/n') times and m mod n'
            distinct relaxed rows, chosen at random, once more; each draw takes every
            attribute from that row's softmax independently.
    """

    rows: int = 500
    steps: int = 500
    learning_rate: float = 0.3
    sampling: Literal["dense", "error"] = "dense"
    queries_per_step: int = 1024
    init_confidence: float = 0.5
    steps_per_call: int = 1000
    batch: int | None = None
    precision: Literal["float32", "bfloat16"] = "float32"
    kernel: Literal["auto", "xla", "pallas"] = "auto"
    init_mode: Literal["resample", "each_once"] = "resample"
    draws: int | None = None

    def __post_init__(self) -> None:
        if self.rows < 1:
            raise CensusReconError(f"rows (n') must be >= 1, got {self.rows}")
        if self.steps < 1:
            raise CensusReconError(f"steps (T) must be >= 1, got {self.steps}")
        if not self.learning_rate > 0:
            raise CensusReconError(f"learning_rate must be > 0, got {self.learning_rate}")
        if self.sampling not in ("dense", "error"):
            raise CensusReconError(f"sampling must be 'dense' or 'error', got {self.sampling!r}")
        if self.queries_per_step < 1:
            raise CensusReconError(f"queries_per_step must be >= 1, got {self.queries_per_step}")
        if not 0.0 < self.init_confidence < 1.0:
            raise CensusReconError(f"init_confidence must lie in (0, 1), got {self.init_confidence}")
        if self.steps_per_call < 1:
            raise CensusReconError(f"steps_per_call must be >= 1, got {self.steps_per_call}")
        if self.precision not in ("float32", "bfloat16"):
            raise CensusReconError(f"precision must be 'float32' or 'bfloat16', got {self.precision!r}")
        if self.kernel not in ("auto", "xla", "pallas"):
            raise CensusReconError(f"kernel must be 'auto', 'xla' or 'pallas', got {self.kernel!r}")
        if self.batch is not None and self.batch < 1:
            raise CensusReconError(f"batch must be >= 1 or None, got {self.batch}")
        if self.init_mode not in ("resample", "each_once"):
            raise CensusReconError(f"init_mode must be 'resample' or 'each_once', got {self.init_mode!r}")
        if self.draws is not None and self.draws < 1:
            raise CensusReconError(f"draws must be >= 1 or None (one per relaxed row), got {self.draws}")


def default(name: str):
    """The default of one of :class:`RAPSettings`' fields (the configuration schema's default too).

    >>> default("rows"), default("learning_rate")
    (500, 0.3)
    """
    return RAPSettings.__dataclass_fields__[name].default


#: The fields a configuration sets by the same name (init_mode and draws come from the config's own choices).
CONFIG_FIELDS = tuple(f.name for f in dataclasses.fields(RAPSettings) if f.name not in ("init_mode", "draws"))


def rap_settings(cfg, **over) -> RAPSettings:
    """The RAP settings of a config's ``attack`` section: every field the schema shares with :class:`RAPSettings`
    by name (:data:`CONFIG_FIELDS`), then ``over``."""
    return RAPSettings(**({name: getattr(cfg.attack, name) for name in CONFIG_FIELDS} | over))
