"""RAP (relaxed projection, optax Adam) and RAP-Rank: K runs batched, unioned, ranked by count."""

from __future__ import annotations

import dataclasses
import functools
import logging
import time
from dataclasses import dataclass, field
from typing import Callable, Literal

import jax
import jax.numpy as jnp
import numpy as np
import optax

from microdata.domain import Domain
from microdata.errors import CensusReconError
from microdata.ranking import Ranking, rank_by_frequency
from reconstruct.queries import MarginalPlan
from reconstruct.relaxed import logits_from_codes, random_logits, round_relaxed
from reconstruct.relaxed import probabilities as probs_of

log = logging.getLogger(__name__)

#: Counts every trace of a RAP program; tests use it to prove a second fit does not recompile.
TRACE_COUNT = {"n": 0}


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
        batch: runs vmapped into one compiled call; ``None`` picks per backend.
    """

    rows: int = 1000
    steps: int = 1000
    learning_rate: float = 0.3
    sampling: Literal["dense", "error"] = "dense"
    queries_per_step: int = 1024
    init_confidence: float = 0.5
    steps_per_call: int = 1000
    batch: int | None = None

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
        if self.batch is not None and self.batch < 1:
            raise CensusReconError(f"batch must be >= 1 or None, got {self.batch}")


def default_batch(settings: RAPSettings, n_runs: int) -> int:
    """Runs per compiled call: small on CPU (the working set stays in cache and a batch of 4
    keeps both cores busy: ~2-3x over one run at a time, see bench/rap.py), large on
    accelerators, where a big batch is what fills the device."""
    if settings.batch is not None:
        return max(1, min(settings.batch, n_runs))
    backend = jax.default_backend()
    want = 4 if backend == "cpu" else 128
    return max(1, min(want, n_runs))


# ---- one run, pure functions over explicit state ------------------------------------------------


def _initial_logits(key, settings: RAPSettings, sizes, pool):
    """Random logits, or logits centred on n' rows drawn (with replacement) from ``pool``."""
    if pool is None:
        return random_logits(key, settings.rows, sizes)
    idx = jax.random.randint(key, (settings.rows,), 0, pool.shape[0])
    return logits_from_codes(pool[idx], sizes, settings.init_confidence)


def _loss(logits, targets, key, plan: MarginalPlan, settings: RAPSettings):
    err = plan.answers(probs_of(logits)) - targets
    if settings.sampling == "dense":
        return jnp.sum(err**2)
    # Paper code's step: a fresh sample of queries each step, in proportion to |error|.
    k = min(settings.queries_per_step, plan.num_queries)
    score = jnp.log(jnp.abs(jax.lax.stop_gradient(err)) + 1e-12) + jax.random.gumbel(key, err.shape)
    _, idx = jax.lax.top_k(score, k)
    return jnp.sum(err[idx] ** 2)


def _build_program(plan: MarginalPlan, settings: RAPSettings, with_pool: bool):
    sizes = plan.sizes
    opt = optax.adam(settings.learning_rate)
    grad = jax.value_and_grad(functools.partial(_loss, plan=plan, settings=settings))

    def init_one(run_key, pool):
        logits = _initial_logits(jax.random.fold_in(run_key, 0), settings, sizes, pool if with_pool else None)
        return logits, opt.init(logits)

    def block_one(state, targets, run_key, block_index, n_steps):
        step_keys = jax.random.split(jax.random.fold_in(jax.random.fold_in(run_key, 1), block_index), n_steps)

        def step(carry, k):
            logits, opt_state = carry
            loss, g = grad(logits, targets, k)
            updates, opt_state = opt.update(g, opt_state, logits)
            return (optax.apply_updates(logits, updates), opt_state), loss

        state, losses = jax.lax.scan(step, state, step_keys)
        return state, losses[-1]

    def round_one(state, run_key):
        return round_relaxed(jax.random.fold_in(run_key, 2), state[0])

    def init_b(run_keys, pool):
        TRACE_COUNT["n"] += 1
        return jax.vmap(init_one, in_axes=(0, None))(run_keys, pool)

    def block_b(state, targets, run_keys, block_index, n_steps):
        TRACE_COUNT["n"] += 1
        return jax.vmap(block_one, in_axes=(0, None, 0, None, None))(state, targets, run_keys, block_index, n_steps)

    def round_b(state, run_keys):
        TRACE_COUNT["n"] += 1
        return jax.vmap(round_one)(state, run_keys)

    def answers_b(state):
        logits, _ = state
        return jax.vmap(lambda ls: plan.answers(probs_of(ls)))(logits)

    return (
        jax.jit(init_b),
        jax.jit(block_b, static_argnums=(4,)),
        jax.jit(round_b),
        jax.jit(answers_b),
    )


_PROGRAMS: dict = {}


def _program(plan: MarginalPlan, settings: RAPSettings, with_pool: bool):
    # T and the batch size do not enter the compiled functions (T is a host loop over blocks,
    # batch a shape jit retraces on), so they do not select a program
    key = (plan, dataclasses.replace(settings, steps=1, batch=None), with_pool)
    if key not in _PROGRAMS:
        _PROGRAMS[key] = _build_program(plan, settings, with_pool)
    return _PROGRAMS[key]


@dataclass
class RAPRankResult:
    """The K rounded reconstructions D'_1..D'_K and the ranking R of their union."""

    codes: np.ndarray  # (K, n', d) int32
    ranking: Ranking
    final_loss: np.ndarray  # (K,)
    max_abs_error: np.ndarray  # (K,) max |Q(relaxed) - target| at the end of each fit
    seconds: float = 0.0
    timings: dict = field(default_factory=dict)


def run_rap(plan: MarginalPlan, targets: np.ndarray, key: jax.Array, run_ids: np.ndarray,
            settings: RAPSettings, init_pool: np.ndarray | None = None):
    """Fit and round the runs ``run_ids`` (run k keyed by ``fold_in(key, k)``) in one batch.

    Returns (codes (B, n', d) int32, final loss (B,), max abs error (B,), relaxed answers).
    ``targets`` are in workload order.
    """
    init_b, block_b, round_b, answers_b = _program(plan, settings, init_pool is not None)
    t = jnp.asarray(plan.to_plan_order(np.asarray(targets, dtype=np.float32)))
    run_keys = jax.vmap(lambda k: jax.random.fold_in(key, k))(jnp.asarray(run_ids, dtype=jnp.uint32))
    pool = None if init_pool is None else jnp.asarray(init_pool, dtype=jnp.int32)
    state = init_b(run_keys, pool)
    done, block = 0, 0
    loss = None
    while done < settings.steps:
        n = min(settings.steps_per_call, settings.steps - done)
        state, loss = block_b(state, t, run_keys, block, n)
        done += n
        block += 1
    codes = round_b(state, run_keys)
    ans = answers_b(state)
    max_err = jnp.max(jnp.abs(ans - t[None, :]), axis=1)
    return np.asarray(codes), np.asarray(loss), np.asarray(max_err), ans


def rap_rank(plan: MarginalPlan, targets: np.ndarray, domain: Domain, key: jax.Array, runs: int,
             settings: RAPSettings, init_pool: np.ndarray | None = None,
             on_batch: Callable[[int], None] | None = None, rng: np.random.Generator | None = None,
             limit: int | None = None) -> RAPRankResult:
    """RAP-Rank (Dick et al. 2023, Algorithm 1): run RAP ``runs`` = K times, union the rounded
    datasets with multiplicity, and rank distinct rows by their count.

    Args:
        plan: the evaluation plan of the published workload Q.
        targets: Q(D) in workload order (fractions of rows); the attack sees nothing else of D.
        domain: the domain of the reconstructed rows (the workload's).
        key: JAX PRNG key; run k uses ``fold_in(key, k)``, so runs do not change when K changes.
        runs: K.
        settings: n', T, optimiser and batching.
        init_pool: optional (m, d) codes of a baseline dataset to initialise from; each run
            draws its own n' rows from it.
        on_batch: called with the number of runs finished after each compiled batch.
        rng: breaks ties between equally counted rows (default: by key).
        limit: keep only the top ``limit`` rows of the ranking.
    """
    if runs < 1:
        raise CensusReconError(f"runs (K) must be >= 1, got {runs}")
    targets = np.asarray(targets)
    if targets.shape != (plan.num_queries,):
        raise CensusReconError(f"targets must have {plan.num_queries} entries (one per query), got {targets.shape}")
    if init_pool is not None:
        init_pool = domain.check_codes(init_pool)
        if len(init_pool) == 0:
            raise CensusReconError("init_pool is empty; give at least one row to initialise from")
    batch = default_batch(settings, runs)
    t0 = time.perf_counter()
    codes, losses, errs = [], [], []
    for start in range(0, runs, batch):
        ids = np.arange(start, min(start + batch, runs))
        if ids.size < batch:  # pad the last batch to the compiled shape; extra runs are dropped
            ids = np.concatenate([ids, np.arange(runs, runs + batch - ids.size)])
        c, l, e, _ = run_rap(plan, targets, key, ids, settings, init_pool)
        keep = ids < runs
        codes.append(c[keep])
        losses.append(l[keep])
        errs.append(e[keep])
        if on_batch is not None:
            on_batch(int(keep.sum()))
    codes_all = np.concatenate(codes)
    keys = domain.encode(codes_all.reshape(-1, codes_all.shape[-1]))
    ranking = rank_by_frequency(keys, rng=rng, limit=limit)
    return RAPRankResult(codes_all, ranking, np.concatenate(losses), np.concatenate(errs),
                         seconds=time.perf_counter() - t0)
