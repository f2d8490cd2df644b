"""RAP (relaxed projection, optax Adam) and RAP-Rank: K runs batched, unioned, ranked by count."""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import time
from dataclasses import dataclass, field
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax

from censusrecon.microdata.domain import Domain
from censusrecon.microdata.errors import CensusReconError
from censusrecon.microdata.ranking import Ranking, rank_by_frequency
from censusrecon.reconstruct import kernel_choice
from censusrecon.reconstruct.product_plan import ProductPlan
from censusrecon.reconstruct.kernels import usable_dtype
from censusrecon.reconstruct.queries import MarginalPlan
from censusrecon.reconstruct.relaxed import logits_from_codes, random_logits, recentre, round_relaxed, stacked
from censusrecon.reconstruct.relaxed import probabilities as probs_of
from censusrecon.reconstruct.settings import RAPSettings  # noqa: F401  (defined there, light; the attack's callers import it here)

log = logging.getLogger(__name__)

#: Counts every trace of a RAP program ("n"; "split": of one split over devices by shard_map); tests use it to prove
#: a second fit does not recompile.
TRACE_COUNT = {"n": 0}


def use_cpu_cores_as_devices(count: int | None = None) -> int:
    """Ask JAX for one CPU device per available core, so that RAP runs proceed on every core
    at once (a 2-way step is bound by per-kernel overhead, which XLA's threads inside one
    kernel do not hide: two runs on two devices give ~2x one device). Must be called before
    JAX's first computation (the CLI and the benches do; library code never does it on its
    own); later it changes nothing. ``CENSUSRECON_CPU_DEVICES`` overrides the count.
    Returns the count asked for."""
    env = os.environ.get("CENSUSRECON_CPU_DEVICES")
    count = int(env) if env else (count or len(os.sched_getaffinity(0)))
    try:
        jax.config.update("jax_num_cpu_devices", max(1, count))
    except Exception as exc:  # noqa: BLE001 - the backend already started: keep what it has
        log.debug("CPU device count left as it is (%s)", exc)
    return count


def pair_bytes(plan, rows: int) -> int:
    """Estimated device bytes one (unit, run) pair needs inside a step: logits, Adam moments,
    gradient and probabilities (W × n' each), the dense answers and targets, and the row-wise
    products a step forms (float32)."""
    W = plan.layout.width
    return 4 * (6 * W * rows + 4 * plan.dense_size + 2 * plan.activation_rows * rows)


def min_bytes_per_step(plan, rows: int) -> int:
    """The least memory traffic one run-step can have, counted by hand, bytes: Adam's logits and moments and the
    gradient (W × n' floats, 7 passes: the gradient written, the logits and both moments read and written), every
    row of n' floats the plan forms written once and read once (``activation_rows``), and the dense answers,
    targets and mask read (float32). The floor a step's memory traffic is measured against (``bench/run.py``)."""
    W = plan.layout.width
    return 4 * (7 * W * rows + 2 * plan.activation_rows * rows + 3 * plan.dense_size)


#: bytes of per-pair working set a CPU batch aims to stay under (cache-sized: past it the
#: step leaves cache and a larger batch is slower per run; bench/rap.py measures it)
CPU_WORKING_SET = 48 << 20


def default_batch(settings: RAPSettings, n_pairs: int, plan=None) -> int:
    """(unit, run) pairs per compiled call. On a CPU split into several devices (the CLI splits
    it, one per core): one pair per device. On a single CPU device: as many as fit a
    cache-sized working set, at most 8. On accelerators: as many as fit 40% of one's memory
    (thousands for 2-way on a large GPU), because a big batch is what fills the device, times
    the host's accelerators (the batch is split over all of them).
    ``settings.batch`` overrides all three (bench/run.py measures them)."""
    if settings.batch is not None:
        return max(1, min(settings.batch, n_pairs))
    per = pair_bytes(plan, settings.rows) if plan is not None else 4 << 20
    if jax.default_backend() == "cpu":
        devices = len(jax.local_devices())
        # one pair per host device when the CPU is split into several (each device is a thread:
        # measured best for 2-way and 3-way alike); else a cache-sized batch on one device
        want = devices if devices > 1 else max(1, min(8, CPU_WORKING_SET // per))
    else:
        stats = jax.local_devices()[0].memory_stats() or {}
        return accelerator_batch(per, stats.get("bytes_limit", 16 << 30), len(jax.local_devices()), n_pairs)
    return max(1, min(want, n_pairs))


def accelerator_batch(per_pair: int, bytes_limit: int, devices: int, n_pairs: int) -> int:
    """Pairs per call on ``devices`` accelerators of ``bytes_limit`` bytes each: as many as fit 40% of one's memory
    (at most 8,192), on every one of them (the batch is split over all, see :func:`_pairs_sharding`); a stream
    shorter than that is padded up to a multiple of the devices (the extra runs are dropped) so it is still split.

    >>> accelerator_batch(20 << 20, 80 << 30, 1, 10**6), accelerator_batch(20 << 20, 80 << 30, 4, 10**6)
    (1638, 6552)
    >>> accelerator_batch(20 << 20, 80 << 30, 4, 10)  # 10 pairs over 4 GPUs: 3 each
    12
    """
    each = int(max(1, min(8192, 0.4 * bytes_limit // per_pair)))
    return max(1, min(each * devices, -(-n_pairs // devices) * devices))


# ---- one run, pure functions over explicit state ------------------------------------------------


def matmul_dtype(settings: RAPSettings) -> str:
    """The operand dtype the hot loop will use (see :func:`reconstruct.queries.usable_dtype`)."""
    return usable_dtype(settings.precision)


def _initial_logits(key, settings: RAPSettings, layout, pool):
    """Random logits, or logits centred on n' rows of ``pool``: drawn with replacement
    (``init_mode="resample"``), or its first n' rows in order (``"each_once"``)."""
    if pool is None:
        return random_logits(key, settings.rows, layout)
    rows, size = pool  # rows beyond ``size`` pad the pool to a shared shape and are never drawn
    if settings.init_mode == "each_once":
        return logits_from_codes(rows[: settings.rows], layout, settings.init_confidence)
    idx = jax.random.randint(key, (settings.rows,), 0, size)
    return logits_from_codes(rows[idx], layout, settings.init_confidence)


#: bound on how far one Adam step moves a logit, in units of the learning rate: |m̂/√v̂| is at most
#: (1 − β1)/√(1 − β2) ≈ 3.2 for optax's defaults
_ADAM_STEP_BOUND = 3.2
#: how far from 0 recentred logits may drift before the next recentring (exp(±24) is safe in
#: float32 with room to spare for sums over an attribute's values)
_DRIFT = 24.0


def recentre_every(settings: RAPSettings) -> int:
    """Steps between recentrings of the logits: each attribute's maximum is reset to 0, and
    until the next reset no logit can move more than ``_DRIFT``, so the step's softmax needs no
    maxima of its own (their per-attribute reductions were a third of a 2-way step's kernels)."""
    return max(1, int(_DRIFT // (settings.learning_rate * _ADAM_STEP_BOUND)))


def _loss(logits, targets, key, plan, settings: RAPSettings, mask, dtype):
    err = (plan.dense_answers_of_logits(logits, dtype, settings.kernel) - targets) * mask
    if settings.sampling == "dense":
        return jnp.sum(err**2)
    # Paper code's step: a fresh sample of queries each step, in proportion to |error|.
    k = min(settings.queries_per_step, plan.num_queries)
    noisy = jnp.log(jnp.abs(jax.lax.stop_gradient(err)) + 1e-12) + jax.random.gumbel(key, err.shape)
    _, idx = jax.lax.top_k(jnp.where(mask > 0, noisy, -jnp.inf), k)
    return jnp.sum(err[idx] ** 2)


def _step_fn(plan, settings: RAPSettings):
    """One Adam step of one run, ``step((logits, opt_state), key, targets) -> (logits, opt_state)``: the
    work every step of a fit does (a block is a scan of it, recentred every :func:`recentre_every` steps)."""
    dtype = matmul_dtype(settings)
    opt = optax.adam(settings.learning_rate)
    mask_np = plan.dense_mask

    def step(carry, key, targets):
        logits, opt_state = carry
        # the gradient only: the loss's value, a reduction per step, is computed once per block
        g = jax.grad(_loss)(logits, targets, key, plan, settings, jnp.asarray(mask_np), dtype)
        updates, opt_state = opt.update(g, opt_state, logits)
        return optax.apply_updates(logits, updates), opt_state

    return step, opt


def step_cost(plan, settings: RAPSettings, batch: int = 1, analyse=None) -> dict:
    """XLA's own cost analysis of one step (:func:`_step_fn`) vmapped over ``batch`` (unit, run) pairs, compiled
    for this backend, per run-step: ``{"flops", "bytes_accessed", "transcendentals"}``. Bytes accessed is the
    compiler's count of what every op of the compiled step reads and writes (each fusion's operands and
    outputs): the memory traffic a change of the step is judged on, on a CPU as on a GPU (which fuses
    differently, so the two counts differ). ``analyse(compiled)`` replaces the compiled program's own
    ``cost_analysis()`` (bench/step_cost_at.py's also counts kernels of ours, which XLA's leaves out).
    ``kernel="auto"`` is counted on XLA's ops (its choice is made on a card, by time: name the kernels to count)."""
    if settings.kernel == "auto":
        settings = dataclasses.replace(settings, kernel="xla")
    step, opt = _step_fn(plan, settings)
    logits = jax.vmap(plan.state_of)(jnp.zeros((batch, plan.layout.width, settings.rows), jnp.float32))
    state = jax.vmap(opt.init)(logits)
    keys = jax.random.split(jax.random.key(0), batch)
    targets = jnp.zeros((batch, plan.dense_size), jnp.float32)
    batched = jax.jit(jax.vmap(lambda lg, st, k, t: step((lg, st), k, t)))
    compiled = batched.lower(logits, state, keys, targets).compile()
    cost = analyse(compiled) if analyse is not None else compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, (list, tuple)) else cost
    names = {"flops": "flops", "bytes_accessed": "bytes accessed", "transcendentals": "transcendentals"}
    return {name: float(cost.get(key, 0.0)) / batch for name, key in names.items()}


def _split_over(mesh, fn, replicated: int = 0):
    """``fn`` (a function of batched pairs, the batch its arguments' and results' leading axis; its last
    ``replicated`` arguments not batched) run by each device of ``mesh`` on its share of the batch (``shard_map``):
    how the fused kernels' batch is split over devices, as XLA cannot split a kernel of ours itself (it would
    gather the whole batch onto each device)."""
    from jax.sharding import PartitionSpec

    def split(*args):
        TRACE_COUNT["split"] = TRACE_COUNT.get("split", 0) + 1
        batched = len(args) - replicated
        specs = (PartitionSpec("pairs"),) * batched + (PartitionSpec(),) * replicated
        return jax.shard_map(fn, mesh=mesh, in_specs=specs, out_specs=PartitionSpec("pairs"), check_vma=False)(*args)

    return split


def _build_program(plan, settings: RAPSettings, with_pool: bool, mesh=None):
    """The batched programs of a fit: init, a block of steps, rounding, the final error. ``mesh``: the devices a
    batch is split over with ``shard_map`` (the fused kernels' programs; None: as XLA places them)."""
    layout = plan.layout
    mask_np = plan.dense_mask
    dtype = matmul_dtype(settings)
    one_step, opt = _step_fn(plan, settings)

    def init_one(run_key, pool, pool_size):
        logits = plan.state_of(_initial_logits(jax.random.fold_in(run_key, 0), settings, layout,
                                               (pool, pool_size) if with_pool else None))
        return logits, opt.init(logits)

    def block_one(state, targets, run_key, block_index, n_steps):
        step_keys = jax.random.split(jax.random.fold_in(jax.random.fold_in(run_key, 1), block_index), n_steps)

        def step(carry, k):
            return one_step(carry, k, targets), None

        def steps_then_recentre(carry, keys):
            (logits, opt_state), _ = jax.lax.scan(step, carry, keys)
            return (recentre(logits, layout), opt_state), None

        every = recentre_every(settings)
        q, r = divmod(n_steps, every)
        state = (recentre(state[0], layout), state[1])  # a fresh or restored state may sit anywhere
        if q:
            state, _ = jax.lax.scan(steps_then_recentre, state, step_keys[: q * every].reshape(q, every))
        if r:
            state, _ = steps_then_recentre(state, step_keys[q * every:])
        # the loss of the block's final logits (on the last step's query sample when sampling)
        loss = _loss(state[0], targets, step_keys[-1], plan, settings, jnp.asarray(mask_np), dtype)
        return state, loss

    def round_one(state, run_key, draws):
        return round_relaxed(jax.random.fold_in(run_key, 2), stacked(state[0]), layout, draws)

    def max_error_one(state, targets):
        answers = plan.dense_answers(probs_of(stacked(state[0]), layout), dtype, settings.kernel)
        err = (answers - targets) * jnp.asarray(mask_np)
        return jnp.max(jnp.abs(err))

    # one flat batch of (unit, run) pairs: each pair carries its unit's targets (and pool), so a
    # compiled program depends on the plan, the settings and the batch size only — never on
    # which units, or how many, share a call
    def init_b(run_keys, pool, pool_sizes):
        TRACE_COUNT["n"] += 1
        if pool is None:
            return jax.vmap(lambda k: init_one(k, None, None))(run_keys)
        return jax.vmap(init_one)(run_keys, pool, pool_sizes)

    def block_b(state, targets, run_keys, block_index, n_steps):
        TRACE_COUNT["n"] += 1
        return jax.vmap(block_one, in_axes=(0, 0, 0, None, None))(state, targets, run_keys, block_index, n_steps)

    def round_b(state, run_keys, draws):
        TRACE_COUNT["n"] += 1
        if draws is None:
            return jax.vmap(lambda s, k: round_one(s, k, None))(state, run_keys)
        # many draws per run: one pair at a time, so a large batch never holds
        # (pairs x width x draws) gathered logits at once
        return jax.lax.map(lambda sk: round_one(sk[0], sk[1], draws), (state, run_keys))

    def max_error_b(state, targets):
        return jax.vmap(max_error_one)(state, targets)

    block_call = block_b
    if mesh is not None:  # the two programs that run the plan's kernels, each device on its share
        def block_call(state, targets, run_keys, block_index, n_steps):
            return _split_over(mesh, lambda s, t, k, b: block_b(s, t, k, b, n_steps), 1)(state, targets, run_keys,
                                                                                        block_index)
        max_error_b = _split_over(mesh, max_error_b)
    return (
        jax.jit(init_b),
        jax.jit(block_call, static_argnums=(4,)),
        jax.jit(round_b, static_argnums=(2,)),
        jax.jit(max_error_b),
    )


#: Compiled RAP programs a process keeps, the least recently used dropped first: one per (plan, the settings that
#: enter the compiled functions, pool or not). A run fits a handful; a long sweep of many plans stays bounded.
PROGRAM_CACHE_SIZE = 32


@functools.lru_cache(maxsize=PROGRAM_CACHE_SIZE)
def _cached_program(plan, settings: RAPSettings, with_pool: bool, mesh=None):
    return _build_program(plan, settings, with_pool, mesh)


def _program(plan, settings: RAPSettings, with_pool: bool, mesh=None):
    # T and the batch size do not enter the compiled functions (T is a host loop over blocks,
    # batch a shape jit retraces on), nor do the draws (a static argument of the rounding only),
    # so they do not select a program
    if settings.kernel not in ("xla", "pallas"):
        raise CensusReconError(f"a program runs XLA's ops or the fused kernels, not {settings.kernel!r}: "
                               "kernel 'auto' is decided before a program is built (reconstruct.kernel_choice)")
    return _cached_program(plan, dataclasses.replace(settings, steps=1, batch=None, draws=None), with_pool, mesh)


def clear_programs() -> None:
    """Drop every compiled RAP program: the next fit compiles afresh."""
    _cached_program.cache_clear()


@dataclass
class RAPRankResult:
    """The K rounded reconstructions D'_1..D'_K and the ranking R of their union.

    ``ranking`` may be cut to its top rows (``limit``); ``union_size`` is always the number of
    distinct rows in the whole union of the K reconstructions, before any cut."""

    codes: np.ndarray  # (K, rows drawn per run, d) int32
    ranking: Ranking
    final_loss: np.ndarray  # (K,)
    max_abs_error: np.ndarray  # (K,) max |Q(relaxed) - target| at the end of each fit
    union_size: int = 0
    domain: Domain | None = None
    seconds: float = 0.0
    timings: dict = field(default_factory=dict)
    kernel: str = ""  # the census plan's kernels the fits ran ("xla", "pallas"; what kernel="auto" chose)

    def run_fractions(self) -> tuple[np.ndarray, np.ndarray]:
        """Every distinct row of the union (sorted int64 keys) and the fraction of the K runs
        whose rounded output contains it, in (0, 1].

        >>> from censusrecon.microdata.domain import Domain
        >>> codes = np.array([[[0], [0], [1]], [[1], [2], [2]]])  # K = 2 runs of 3 rows
        >>> r = RAPRankResult(codes, Ranking(np.zeros(0), np.zeros(0)), np.zeros(2), np.zeros(2),
        ...                   domain=Domain.from_sizes({"A": 3}))
        >>> keys, fractions = r.run_fractions()
        >>> keys.tolist(), fractions.tolist()
        ([0, 1, 2], [0.5, 1.0, 0.5])
        """
        if self.domain is None:
            raise CensusReconError("run_fractions needs the result's domain")
        K = self.codes.shape[0]
        per_run = [np.unique(self.domain.encode(c)) for c in self.codes]
        keys, runs = np.unique(np.concatenate(per_run), return_counts=True)
        return keys, runs / K


def _pool_capacity(rows: int) -> int:
    """Pool rows padded to the next power of two, so pools of similar size share one program."""
    return 1 << max(0, int(rows - 1).bit_length())


def _pairs_sharding(n: int):
    """The batch axis of ``n`` pairs split over this host's devices, or None (one device, or
    ``n`` not a multiple of their count). On a CPU started with several host devices each is a
    thread running its share of the runs: small 2-way steps are bound by per-op overhead, which
    threads inside one op do not hide."""
    devs = jax.local_devices()
    if len(devs) < 2 or n % len(devs):
        return None
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    return NamedSharding(Mesh(np.array(devs), ("pairs",)), PartitionSpec("pairs"))


def _spread(arrays, sharding):
    return arrays if sharding is None else tuple(None if a is None else jax.device_put(a, sharding) for a in arrays)


def _fit_pairs(plan, settings: RAPSettings, targets: np.ndarray, run_keys: jax.Array,
               pools: list[np.ndarray] | None):
    """Fit and round one batch of (unit, run) pairs. ``targets`` (R, dense) per pair;
    ``pools`` per pair or None. Returns codes (R, n', d), final loss (R,), max abs error (R,), and the kernels
    the fit ran (``settings.kernel``, or what ``auto`` chose: :mod:`reconstruct.kernel_choice`)."""
    sharding = _pairs_sharding(len(targets))
    with_pool = pools is not None
    if pools is None:
        pool, sizes = None, None
    else:
        cap = _pool_capacity(max(len(p) for p in pools))
        pool = np.zeros((len(pools), cap, pools[0].shape[1]), np.int32)
        for i, p in enumerate(pools):
            pool[i, : len(p)] = p
        sizes = np.array([len(p) for p in pools], np.int32)
    t, run_keys, pool, sizes = _spread((jnp.asarray(targets), run_keys, pool, sizes), sharding)
    # the start is the same program whatever the kernels (it never answers a query)
    state = _program(plan, dataclasses.replace(settings, kernel="xla"), with_pool)[0](run_keys, pool, sizes)
    if sharding is not None:
        # laid out as every block's output is (init leaves Adam's step count replicated), so the
        # second block reuses the first block's program instead of compiling another
        state = jax.device_put(state, sharding)
    kernel, first = _kernel_of(plan, settings, with_pool, sharding, state, t, run_keys)
    settings = dataclasses.replace(settings, kernel=kernel)
    # the fused kernels' programs split the batch themselves (shard_map); XLA's ops are split by the layout
    mesh = sharding.mesh if sharding is not None and kernel != "xla" else None
    _, block_b, round_b, max_error_b = _program(plan, settings, with_pool, mesh)
    done, block = 0, 0
    loss = None
    if first is not None:  # the first block, run while choosing the kernels
        (state, loss), done, block = first, min(settings.steps_per_call, settings.steps), 1
    while done < settings.steps:
        n = min(settings.steps_per_call, settings.steps - done)
        state, loss = block_b(state, t, run_keys, block, n)
        done += n
        block += 1
    codes = round_b(state, run_keys, settings.draws)
    return np.asarray(codes), np.asarray(loss), np.asarray(max_error_b(state, t)), kernel


def _kernel_of(plan, settings: RAPSettings, with_pool: bool, sharding, state, t, run_keys):
    """The kernels a batch's fit runs, and the first block's ``(state, loss)`` where choosing them ran it (else
    None): ``settings.kernel``, or for ``auto`` what :func:`reconstruct.kernel_choice.choose` decides (once per
    shape: checked on one pair and timed on this batch's first block, on the card)."""
    kernel = kernel_choice.fixed(plan, settings)
    if kernel is not None:
        return kernel, None
    key = kernel_choice.shape_key(plan, settings, t.shape[0])
    kernel = kernel_choice.remembered(key)
    if kernel is not None:
        return kernel, None
    # one pair's first state and targets, checked on both kernels in a process of the check's own
    logits, target = jax.tree.map(lambda a: np.asarray(a[0]), state[0]), np.asarray(t[0])
    check = functools.partial(kernel_choice.check_kernels, plan, settings, logits, target)

    def first_block(k):  # compiled first, then timed: the block's run alone
        mesh = sharding.mesh if sharding is not None and k != "xla" else None
        block = _program(plan, dataclasses.replace(settings, kernel=k), with_pool, mesh)[1]
        n = min(settings.steps_per_call, settings.steps)
        compiled = block.lower(state, t, run_keys, 0, n).compile()
        return kernel_choice.timed(lambda: compiled(state, t, run_keys, 0))

    return kernel_choice.choose(key, check, first_block)


def run_rap(plan, targets: np.ndarray, key: jax.Array, run_ids: np.ndarray,
            settings: RAPSettings, init_pool: np.ndarray | None = None):
    """Fit and round the runs ``run_ids`` (run k keyed by ``fold_in(key, k)``) of one unit in one
    batch. ``targets`` are in workload order. Returns (codes (B, n', d) int32, final loss (B,),
    max abs error (B,))."""
    dense = plan.dense_targets(np.asarray(targets, dtype=np.float32))
    ids = jnp.asarray(run_ids, dtype=jnp.uint32)
    run_keys = jax.vmap(lambda k: jax.random.fold_in(key, k))(ids)
    pools = None if init_pool is None else [np.asarray(init_pool, np.int32)] * len(run_ids)
    return _fit_pairs(plan, settings, np.broadcast_to(dense, (len(run_ids), dense.size)), run_keys, pools)[:3]


def run_rap_each(plan, targets: np.ndarray, key: jax.Array, settings: RAPSettings) -> np.ndarray:
    """One RAP run fitted to each row of ``targets`` (B, queries), every run keyed by ``fold_in(key, 0)``: what
    :func:`run_rap` fits to each alone as its run 0, here in shared compiled calls of ``default_batch`` runs.
    Returns the rounded codes (B, n', d)."""
    targets = np.atleast_2d(np.asarray(targets, dtype=np.float32))
    if targets.shape[1] != plan.num_queries:
        raise CensusReconError(f"targets must have {plan.num_queries} entries (one per query), got {targets.shape[1]}")
    dense = np.stack([plan.dense_targets(t) for t in targets])
    # a batch of fixed size whatever the number of fits (the last call padded): one program for every call
    batch = default_batch(settings, 1 << 20, plan)
    one = jax.random.fold_in(key, 0)
    out = []
    for start in range(0, len(dense), batch):
        part = dense[start:start + batch]
        pad = np.concatenate([part, np.repeat(part[-1:], batch - len(part), axis=0)]) if len(part) < batch else part
        run_keys = jnp.broadcast_to(one, (batch, *one.shape))
        out.append(_fit_pairs(plan, settings, pad, run_keys, None)[0][:len(part)])
    return np.concatenate(out)


def rap_rank(plan: MarginalPlan | ProductPlan, targets: np.ndarray, domain: Domain, key: jax.Array, runs: int,
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
    return rap_rank_units(plan, [targets], domain, [key], runs, settings,
                          None if init_pool is None else [init_pool], on_batch,
                          None if rng is None else [rng], limit)[0]


#: a call's run keys in one dispatch (module level: a jit built per call would recompile per call)
_fold_keys = jax.jit(jax.vmap(jax.random.fold_in))


def rap_rank_units(plan, targets: list[np.ndarray], domain: Domain, keys: list[jax.Array], runs: int,
                   settings: RAPSettings, init_pools: list[np.ndarray] | None = None,
                   on_batch: Callable[[int], None] | None = None,
                   rngs: list[np.random.Generator] | None = None,
                   limit: int | list[int] | None = None) -> list[RAPRankResult]:
    """RAP-Rank for many units that publish the same workload (tracts of a state, say), in
    shared compiled calls: the K runs of every unit are one stream of (unit, run) pairs cut
    into batches of ``default_batch`` pairs, so a call may hold the last runs of one unit and
    the first of the next, and all calls reuse one program. Unit u's run k is keyed by
    ``fold_in(keys[u], k)``: a unit gets the same runs alone or among others."""
    if runs < 1:
        raise CensusReconError(f"runs (K) must be >= 1, got {runs}")
    if len(targets) != len(keys) or not targets:
        raise CensusReconError(f"need one key per unit: {len(targets)} target vectors, {len(keys)} keys")
    dense = []
    for t in targets:
        t = np.asarray(t)
        if t.shape != (plan.num_queries,):
            raise CensusReconError(f"targets must have {plan.num_queries} entries (one per query), got {t.shape}")
        dense.append(plan.dense_targets(t))
    if init_pools is not None:
        if len(init_pools) != len(targets):
            raise CensusReconError(f"need one init pool per unit: {len(init_pools)} for {len(targets)} units")
        init_pools = [domain.check_codes(p).astype(np.int32) for p in init_pools]
        if any(len(p) == 0 for p in init_pools):
            raise CensusReconError("init_pool is empty; give at least one row to initialise from")
        if settings.init_mode == "each_once" and any(len(p) != settings.rows for p in init_pools):
            raise CensusReconError(
                f"init_mode 'each_once' starts relaxed row i at pool row i: every pool needs exactly n' = "
                f"{settings.rows} rows, got {sorted({len(p) for p in init_pools})}")
    U = len(targets)
    batch = default_batch(settings, runs * U, plan)
    pairs = [(u, k) for u in range(U) for k in range(runs)]
    n_real = len(pairs)
    pairs += [(0, runs + j) for j in range(-len(pairs) % batch)]  # pad the last call; dropped
    t0 = time.perf_counter()
    codes = [[] for _ in range(U)]
    losses = [[] for _ in range(U)]
    errs = [[] for _ in range(U)]
    unit_keys = jnp.stack(keys)
    kernels: set[str] = set()
    for start in range(0, len(pairs), batch):
        chunk = pairs[start:start + batch]
        units = np.array([u for u, _ in chunk])
        ids = np.array([k for _, k in chunk], dtype=np.uint32)
        run_keys = _fold_keys(unit_keys[units], jnp.asarray(ids))
        pools = None if init_pools is None else [init_pools[u] for u in units]
        c, l, e, kernel = _fit_pairs(plan, settings, np.stack([dense[u] for u in units]), run_keys, pools)
        kernels.add(kernel)
        done = 0
        for i, (u, k) in enumerate(chunk):
            if start + i < n_real:
                codes[u].append(c[i])
                losses[u].append(l[i])
                errs[u].append(e[i])
                done += 1
        if on_batch is not None:
            on_batch(done)
    seconds = time.perf_counter() - t0
    out = []
    for u in range(U):
        cu = np.stack(codes[u])
        all_keys = domain.encode(cu.reshape(-1, cu.shape[-1]))
        ranking = rank_by_frequency(all_keys, rng=None if rngs is None else rngs[u],
                                    limit=limit[u] if isinstance(limit, (list, tuple)) else limit)
        out.append(RAPRankResult(cu, ranking, np.array(losses[u]), np.array(errs[u]),
                                 union_size=int(np.unique(all_keys).size), domain=domain, seconds=seconds / U,
                                 kernel="+".join(sorted(kernels))))
    return out
