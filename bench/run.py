"""Bench: RAP-Rank's and the exact attack's speed, each a ratio or fraction measured in this one run.

Prints its figures, then one JSON object as the last line. The machine's matmul peak is
measured first for each dtype (a large matmul, float32 and bfloat16 operands with float32
accumulation) and every step throughput is also given as a fraction of the peak of the dtype
it uses; step rates difference fits of T and 3T steps, so that initialisation, rounding and
ranking cancel. For the 2010-sized census step it also prints the bound its own matmuls put on
that fraction (the step with nothing but them, timed alone in the same run). End-to-end
K = 100 × T = 1000 times (answers, fits, rounding, ranking) are given for every usable dtype,
measured on fewer runs/steps and projected linearly unless ``--full`` is given (the JSON says
which); ``rap_rank_*_s`` is the faster dtype's. Batches are the library defaults for this
backend (``reconstruct.rap.default_batch``).

    python bench/run.py            # about 2 minutes on a 2-core CPU
    python bench/run.py --full     # the K = 100 × T = 1000 fits for real (long on a CPU)
    python bench/run.py --quick    # a smoke run: tiny sizes, figures meaningless
    python bench/run.py --topdown  # TopDown's estimation for one county only (QP solvers compared)
    python bench/run.py --steps-only  # the step rates and fractions of peak only (about 4 minutes)
    python bench/run.py --parts 2way-fit,units --jsonl figures.jsonl  # chosen parts, in that order; each
                                   # figure appended to figures.jsonl as it is measured (bench/gpu.sh does)
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import resource
import time

import jax
import jax.numpy as jnp
import numpy as np

from censusrecon.microdata.census import TABLE_SETS, CensusWorkload, sf1_tables
from censusrecon.microdata.dataset import Dataset
from censusrecon.microdata.domain import Attribute, Domain
from censusrecon.microdata.marginals import Workload, answer, marginal_counts
from censusrecon.reconstruct.product_plan import ProductPlan
from censusrecon.reconstruct.kernels import usable_dtype
from censusrecon.reconstruct.queries import MarginalPlan, exact_counts, plan_for
from censusrecon.reconstruct.rap import (RAPSettings, default_batch, min_bytes_per_step, rap_rank, rap_rank_units,
                                         step_cost, use_cpu_cores_as_devices)

#: the goals for RAP-Rank K = 100 x T = 1000 on 2 CPU cores, seconds (2-way, 3-way)
MARGINAL_GOALS_S = {2: 15.0, 3: 300.0}
#: the goal for the census step (24-block tract, every SF1 table, n' = 300), run-steps/s
CENSUS_GOAL_PER_S = 600.0
#: the goal for the 2010-sized census step (85 blocks, every SF1 table, n' = 1,000, float32): the
#: fraction of the day's float32 matmul peak, in the FLOPs the step must do
CENSUS85_GOAL_FRAC = 0.60

# An ACS-coverage-like domain: 17 attributes, one-hot width 107.
SIZES = (10, 24, 5, 2, 9, 5, 4, 5, 4, 2, 2, 3, 2, 9, 2, 17, 2)


def _best_gflops(f, args, flop: float, reps: int) -> float:
    """GFLOP/s of ``f(*args)`` doing ``flop`` floating-point operations a call, the best of three
    timings of ``reps`` calls after one to compile: the machine is shared."""
    jax.block_until_ready(f(*args))
    best = 0.0
    for _ in range(3):
        t = time.perf_counter()
        for _ in range(reps):
            jax.block_until_ready(f(*args))
        best = max(best, flop * reps / (time.perf_counter() - t) / 1e9)
    return best


def _per_device(*arrays):
    """``arrays`` (each with a leading axis of one entry per device) split over this host's devices."""
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    sharding = NamedSharding(Mesh(np.array(jax.devices()), ("d",)), PartitionSpec("d"))
    return tuple(jax.device_put(a, sharding) for a in arrays)


def _matmul_gflops(dtype, a, matmuls: int, reps: int) -> float:
    """GFLOP/s of squaring ``a``'s n x n matrices (``matmuls`` of them a call)."""
    n = a.shape[-1]
    f = jax.jit(lambda x: jnp.matmul(x.astype(dtype), x.astype(dtype), preferred_element_type=jnp.float32))
    return _best_gflops(f, (a,), matmuls * 2 * n**3, reps)


def stream_gbps(mib: int, reps: int = 10) -> float:
    """GB/s of one device reading and writing an array of ``mib`` MiB (y = 2x + 1, float32; best of three): the
    memory traffic a step's bytes are measured against, as the matmul peak is for its FLOPs."""
    x = jnp.ones((mib << 18,), jnp.float32)
    return _best_gflops(jax.jit(lambda a: a * 2.0 + 1.0), (x,), 2 * x.nbytes, reps)  # "flops" counted in bytes


def step_costs(name: str, plan, rows: int, out) -> None:
    """XLA's own count of one compiled run-step (``reconstruct.rap.step_cost``: bytes accessed and FLOPs, per
    dtype, one (unit, run) pair a call as RAP's CPU calls are per device) beside the hand counts: the FLOPs the
    step must do and the least memory traffic it can have (``min_bytes_per_step``); on a GPU the same for the
    fused kernels (``kernel="pallas"``, counted as their operands and outputs, which XLA's analysis leaves out:
    bench/step_cost_at.py's ``analyse_compiled``). Compiles, runs nothing."""
    from step_cost_at import analyse_compiled

    floor = min_bytes_per_step(plan, rows)
    out[f"step_{name}_min_bytes"] = floor
    out[f"step_{name}_useful_flops"] = plan.useful_flops_per_step(rows)
    reads = plan.fused_cache_reads(rows)
    out[f"step_{name}_pallas_cache_reads_model"] = reads
    print(f"{name}: the fused kernels' gathers read {reads / 1e6:.1f} MB a run-step by the model of their tiles "
          "(reconstruct.fused.cache_reads: from cache, mostly; their memory traffic is the count below)")
    kernels = ("xla", "pallas") if jax.default_backend() == "gpu" else ("xla",)
    for kernel, precision in ((k, p) for k in kernels for p in ("float32", "bfloat16")):
        if usable_dtype(precision) != precision:
            continue
        tag = ("" if precision == "float32" else "_bf16") + ("" if kernel == "xla" else "_pallas")
        try:
            c = step_cost(plan, RAPSettings(rows=rows, precision=precision, kernel=kernel),
                          analyse=analyse_compiled)
        except Exception as exc:  # noqa: BLE001 - the fused kernels failing to compile must not lose XLA's counts
            if kernel == "xla":
                raise
            out[f"step_{name}{tag}_error"] = f"{type(exc).__name__}: {exc}"[:300]
            print(f"{name} {precision} ({kernel}): FAILED to compile ({type(exc).__name__}: {exc})")
            continue
        out[f"step_{name}{tag}_bytes_accessed"] = round(c["bytes_accessed"])
        out[f"step_{name}{tag}_xla_flops"] = round(c["flops"])
        print(f"{name} {precision} ({kernel}): XLA counts {c['bytes_accessed'] / 1e6:.1f} MB accessed a run-step "
              f"({c['bytes_accessed'] / floor:.1f}x the {floor / 1e6:.1f} MB floor counted by hand) and "
              f"{c['flops'] / 1e9:.3f} GFLOP ({plan.useful_flops_per_step(rows) / 1e9:.3f} needed"
              f"{'; the kernels not counted in it' if kernel != 'xla' else ''})")


def peak_gflops(dtype, n: int = 2048, reps: int = 10) -> float:
    return _matmul_gflops(dtype, jnp.ones((n, n), jnp.float32), 1, reps)


def concurrent_peak_gflops(dtype, n: int = 2048, reps: int = 10) -> float:
    """The matmul rate of every device at once, one n x n matmul each: how RAP's runs use a CPU
    (one device per core, each fitting its own runs). Not the goal's denominator (that is
    :func:`peak_gflops`, the best the machine does), but the ceiling of a step's matmuls run that
    way: on XLA:CPU it measured 12-15% below one device on both cores, in the same runs."""
    devices = len(jax.devices())
    return _matmul_gflops(dtype, *_per_device(jnp.ones((devices, n, n), jnp.float32)), devices, reps)


def product_matmul_gflops(plan: ProductPlan, rows: int, reps: int = 10) -> tuple[float, float]:
    """The matmuls of one float32 step of a census plan alone, at its shapes, every device at
    once (one run each, as RAP's runs are): each part's answers and both sides' cotangents, with
    the step's own matmul calls, on operands in memory. Returns (GFLOP/s, matmul GFLOP a step).
    What a step would run at if nothing but its matmuls took time: its fraction of the peak
    cannot exceed this one's."""
    from censusrecon.reconstruct.kernels import block_answers, plan_dot

    devices = len(jax.devices())
    shapes = [(len(p.left_combos), len(p.right_combos)) for p in plan.parts]
    rng = np.random.default_rng(0)
    operands = [_per_device(*(rng.random((devices,) + shape, np.float32)
                              for shape in ((nl, rows), (nr, rows), (nl, nr)))) for nl, nr in shapes]

    def one(ops):
        return [m for L, R, G in ops
                for m in (block_answers(L, R, "float32"), plan_dot(G, R, "float32"), plan_dot(G.T, L, "float32"))]

    flops = sum(6.0 * nl * nr * rows for nl, nr in shapes)
    return _best_gflops(jax.jit(jax.vmap(one)), (operands,), devices * flops, reps), flops / 1e9


def data(sizes, n, seed=0) -> Dataset:
    dom = Domain.from_sizes({f"X{i}": s for i, s in enumerate(sizes)})
    rng = np.random.default_rng(seed)
    z = rng.integers(0, 8, n)
    cols = [(z * (i + 3) + rng.integers(0, max(2, s // 3), n)) % s for i, s in enumerate(sizes)]
    return Dataset(dom, np.stack(cols, axis=1))


def timed_runs(plan, targets, dom, runs, steps, settings):
    """Seconds for ``runs`` fits of ``steps`` steps, after compiling on one batch of one block."""
    block = min(steps, settings.steps_per_call)
    s = dataclasses.replace(settings, steps=steps, steps_per_call=block)
    warm = dataclasses.replace(s, steps=block)
    rap_rank(plan, targets, dom, jax.random.key(0), default_batch(s, runs, plan), warm)  # compile
    t = time.perf_counter()
    rap_rank(plan, targets, dom, jax.random.key(1), runs, s)
    return time.perf_counter() - t


def step_rate(plan, targets, dom, runs, steps, settings, repeats: int = 3):
    """Run-steps per second of the compiled step itself: fits of ``steps`` and of 3 x ``steps``
    steps (the same program, one more block per ``steps``), differenced, so that what both
    have once (initialisation, rounding, ranking, dispatch) cancels. The best of ``repeats``
    differences, as the peak is the best of three: the machine is shared, and a neighbour's
    load only ever slows a run down."""
    best = 0.0
    for _ in range(repeats):
        one = timed_runs(plan, targets, dom, runs, steps, settings)
        three = timed_runs(plan, targets, dom, runs, 3 * steps, settings)
        if three - one < 0.2 * three:  # too few steps to tell them from the rest (--quick): plain rate
            best = max(best, runs * 3 * steps / three)
        else:
            best = max(best, runs * 2 * steps / (three - one))
    return best


def step_rates(name, plan, targets, dom, rows, steps, peaks, out, kernel: str = "xla",
               precisions=("float32", "bfloat16")):
    """Run-steps/s for dense and error-sampled steps, per dtype, and the dense step's FLOP rate as a
    fraction of the dtype's peak: of the FLOPs its matmuls do (``frac_peak``) and of the FLOPs it
    must do (``useful_frac_peak``: each queried cell once, no by-products; see the plans'
    ``useful_flops_per_step``). bfloat16 is also given as a fraction of the float32 peak (the
    same work done faster is what a user sees)."""
    for precision in precisions:
        if usable_dtype(precision) != precision:
            print(f"{name}: {precision} not usable on this backend; skipped")
            continue
        s = RAPSettings(rows=rows, steps=steps, precision=precision, steps_per_call=steps, kernel=kernel)
        batch = default_batch(s, 1 << 20, plan)
        tag = "" if precision == "float32" else "_bf16"
        dense = step_rate(plan, targets, dom, batch, steps, s)
        needed = plan.useful_flops_per_step(rows) * dense / 1e9  # GFLOP/s of the work the step must do
        frac = plan.flops_per_step(rows) * dense / (peaks[precision] * 1e9)
        useful = needed / peaks[precision]
        err = step_rate(plan, targets, dom, batch, steps, dataclasses.replace(s, sampling="error"), repeats=1)
        out[f"step_{name}{tag}_per_s"] = round(dense, 2)
        out[f"step_{name}{tag}_frac_peak"] = round(frac, 3)
        out[f"step_{name}{tag}_useful_frac_peak"] = round(useful, 3)
        out[f"step_{name}{tag}_error_sampled_per_s"] = round(err, 2)
        if "stream_gbps" in out:  # the share of the memory floor: the least traffic the step can have, at its rate
            mem = min_bytes_per_step(plan, rows) * dense / 1e9 / out["stream_gbps"]
            out[f"step_{name}{tag}_frac_memory_floor"] = round(mem, 3)
            print(f"{name} {precision}: {mem:.1%} of its memory floor ({min_bytes_per_step(plan, rows) / 1e6:.1f} MB "
                  f"a run-step at {out['stream_gbps']:.0f} GB/s)")
        of32 = ""
        if precision != "float32":
            f32 = needed / peaks["float32"]
            out[f"step_{name}{tag}_useful_frac_f32_peak"] = round(f32, 3)
            of32 = f", {f32:.1%} of the float32 peak"
        print(f"{name} {precision}: dense {dense:.1f} run-steps/s ({frac:.1%} of {precision} peak in the FLOPs done, "
              f"{useful:.1%} in the FLOPs needed{of32}; batch {batch}); error-sampled {err:.1f} run-steps/s")


def census_problem(rows_cap: int = 900, blocks: int | None = None):
    """A tract of the embedded population with BLOCK, and its SF1 person tables; with ``blocks``, a
    2010-sized tract of that many occupied blocks instead, made of a county's first blocks (the
    compact population's tracts hold about 23)."""
    from censusrecon.microdata.population import embedded_population

    pop = embedded_population(0)
    geo = pop.geography
    if blocks is None:
        for tr in geo.unit_ids("tract"):
            idx = np.flatnonzero(geo.mask("tract", tr))
            if 300 <= len(idx) <= rows_cap:
                break
    else:
        county = geo.unit_ids("county")[0]
        first = sorted(set(geo.units("block")[geo.mask("county", county)].tolist()))[:blocks]
        idx = np.flatnonzero(np.isin(geo.units("block"), first))
    tract = pop.take(idx).project(["AGE", "SEX", "HISP", "CENRACE"])
    blocks, code = np.unique(tract.geography.units("block"), return_inverse=True)
    tract = tract.with_column(Attribute("BLOCK", tuple(b[-10:] for b in blocks)), code, 0)  # tract + block codes
    cells = [c for name in TABLE_SETS["sf1"] for c in sf1_tables()[name]]
    w = CensusWorkload.build(tract.domain, cells)
    return tract, w


def exact_bench(out: dict, blocks: int = 24) -> None:
    """Exact reconstruction (count-form integer program, HiGHS) of a tract of ``blocks`` occupied
    blocks from every SF1 table, and the certification of its solution's support."""
    from censusrecon.microdata.population import embedded_population
    from censusrecon.reconstruct.exact import reconstruct_exact

    pop = embedded_population(0)
    geo = pop.geography
    best = None
    for tr in geo.unit_ids("tract"):
        idx = np.flatnonzero(geo.mask("tract", tr))
        n_blocks = len(set(geo.units("block")[idx].tolist()))
        if best is None or abs(n_blocks - blocks) < abs(best[1] - blocks):
            best = (tr, n_blocks, idx)
    tr, n_blocks, idx = best
    tract = pop.take(idx).project(["AGE", "SEX", "HISP", "CENRACE"])
    names, code = np.unique(tract.geography.units("block"), return_inverse=True)
    tract = tract.with_column(Attribute("BLOCK", tuple(b[-4:] for b in names)), code, 0)
    w = CensusWorkload.build(tract.domain, [c for name in TABLE_SETS["sf1"] for c in sf1_tables()[name]])
    t0 = time.perf_counter()
    res, _ = reconstruct_exact(w, w.counts(tract), time_limit=600)
    total = time.perf_counter() - t0
    f = res.facts()
    build = total - res.seconds_solve - res.seconds_certify
    out.update(exact_tract_blocks=n_blocks, exact_tract_persons=len(tract), exact_cells=w.num_queries,
               exact_variables=f["variables"], exact_build_s=round(build, 2), exact_solve_s=round(res.seconds_solve, 3),
               exact_certify_s=round(res.seconds_certify, 2), exact_total_s=round(total, 2),
               exact_ms_per_person=round(1000 * total / len(tract), 2), exact_integer_solves=res.integer_solves,
               exact_lp_solves=res.lp_solves, exact_certified_persons=f.get("certified_persons", 0))
    print(f"exact reconstruction: tract {tr}, {n_blocks} blocks, {len(tract)} persons, {w.num_queries} SF1 cells -> "
          f"{f['variables']} variables after published zeros; build {build:.1f} s, solve {res.seconds_solve:.2f} s, "
          f"certify {res.seconds_certify:.1f} s ({res.integer_solves} integer and {res.lp_solves} LP solves), "
          f"{1000 * total / len(tract):.1f} ms per person; {f.get('certified_persons', 0)} persons certified")


#: the goal for the exact attack on a 2010-average tract (4,257 persons, 85 blocks), seconds
EXACT_2010_GOAL_S = 60.0


def exact_2010_bench(out: dict, persons: int = 4257, blocks: float = 85.6) -> None:
    """The exact attack on a whole tract of the 2010-shaped population (microdata.population2010)
    nearest 2010's average in persons and occupied blocks: every SF1 table, the solve, the 38-bin zero variability of
    every block on all the tables (certification on the Bureau's schema) and every block's Bureau
    solution variability (solvar). Single-year certificates are not part of it."""
    from censusrecon.microdata.census import AGE_BIN38_OF_AGE
    from censusrecon.microdata.population2010 import Census2010Spec, census2010_population
    from censusrecon.reconstruct.exact import reconstruct_exact

    pop = census2010_population(0, Census2010Spec(states=1, counties_per_state=1, tracts_per_county=8))
    geo = pop.geography
    def off(t):  # how far a tract is from 2010's average in persons and in occupied blocks (log ratios)
        rows = geo.mask("tract", t)
        return abs(np.log(rows.sum() / persons)) + abs(np.log(len(np.unique(geo.units("block")[rows])) / blocks))

    tr = min(geo.unit_ids("tract"), key=off)
    tract = pop.take(np.flatnonzero(geo.mask("tract", tr))).project(["AGE", "SEX", "HISP", "CENRACE"])
    names, code = np.unique(tract.geography.units("block"), return_inverse=True)
    tract = tract.with_column(Attribute("BLOCK", tuple(b[-4:] for b in names)), code, 0)
    w = CensusWorkload.build(tract.domain, [c for name in TABLE_SETS["sf1"] for c in sf1_tables()[name]])
    t0 = time.perf_counter()
    res, _ = reconstruct_exact(w, w.counts(tract), time_limit=600, certify_support=False,
                               coarsen={"AGE": AGE_BIN38_OF_AGE})
    total = time.perf_counter() - t0
    f = res.facts()
    out.update(exact2010_persons=len(tract), exact2010_blocks=len(names), exact2010_variables=f["variables"],
               exact2010_solve_s=round(res.seconds_solve, 2), exact2010_variability_s=round(res.seconds_coarse, 2),
               exact2010_solvar_s=round(res.seconds_solvar, 2), exact2010_blocks_solvar_zero=f.get("solvar_blocks_zero"),
               exact2010_cumsolvar=f.get("cumsolvar"),
               exact2010_total_s=round(total, 2), exact2010_blocks_zero_variability=f.get("coarse_blocks_zero_variability"),
               exact2010_complete=f.get("coarse_complete"), exact2010_goal_s=EXACT_2010_GOAL_S,
               exact2010_goal_met=bool(total <= EXACT_2010_GOAL_S and f.get("coarse_complete")
                                       and f.get("solvar_complete")))
    print(f"exact attack, 2010-average tract {tr}: {len(tract)} persons, {len(names)} occupied blocks, "
          f"{f['variables']} variables; build + solve + 38-bin zero variability + solvar of every block {total:.1f} s "
          f"(solve {res.seconds_solve:.1f} s, variability {res.seconds_coarse:.1f} s, solvar {res.seconds_solvar:.1f} s, "
          f"{res.integer_solves} integer and {res.lp_solves} LP solves; {f.get('coarse_blocks_zero_variability')} of "
          f"{f.get('coarse_blocks')} blocks zero-variability on all the tables, {f.get('solvar_blocks_zero')} solvar 0, "
          f"cumulative solvar {f.get('cumsolvar')}%)")
    print(f"exact 2010 tract goal {EXACT_2010_GOAL_S:.0f} s: {'MET' if out['exact2010_goal_met'] else 'NOT MET'}")


def topdown_bench(out: dict, solvers=("clarabel", "osqp")) -> None:
    """TopDown's estimation (every node's detailed histogram and SF1 tables measured, then the top-down
    QPs, rounding and MDF) for one county of the embedded population, 4 tracts with their blocks,
    every SF1 person table, ε = 2: seconds per QP solver, and against the 60 s target."""
    from censusrecon.experiments.config import load_config
    from censusrecon.experiments.problem import load_population, resolve
    from censusrecon.synth.topdown_release import publish_topdown, topdown_root
    from censusrecon.synth.noise import SimulationNoise

    cfg = load_config("configs/agency/release_agency_compact.yaml", ["queries.tables=sf1", "release.epsilons=[2.0]"])
    pop = load_population(cfg)
    t0 = time.perf_counter()
    td = topdown_root(resolve(cfg, pop), cfg.target.unit_ids[0], True)
    tree_s = time.perf_counter() - t0
    out.update(topdown_nodes=[len(i) for i in td.shape.ids], topdown_types=td.strategy.types,
               topdown_table_cells=int(td.strategy.tables.shape[0]), topdown_tree_s=round(tree_s, 2))
    for solver in solvers:
        cfg_s = cfg.model_copy(update={"release": cfg.release.model_copy(update={
            "topdown": cfg.release.topdown.model_copy(update={"solver": solver})})})
        t0 = time.perf_counter()
        publish_topdown(cfg_s, td, 2.0, SimulationNoise(0))
        out[f"topdown_estimation_{solver}_s"] = round(time.perf_counter() - t0, 2)
    best = min(out[f"topdown_estimation_{s}_s"] for s in solvers)
    out["topdown_target_ratio"] = round(best / 60.0, 3)
    print(f"TopDown, county {td.root}: {out['topdown_nodes']} nodes, {td.strategy.types} person types, "
          f"{out['topdown_table_cells']} SF1 cells per node; tree {tree_s:.1f} s; measure + estimate + round: "
          + ", ".join(f"{s} {out[f'topdown_estimation_{s}_s']:.1f} s" for s in solvers)
          + f" ({best / 60:.2f} of the 60 s target)")


class Figures(dict):
    """The bench's figures. With ``path``, each figure is also appended to that file as a JSON line
    (``{"name": value}``) the moment it is recorded, so that a run cut short (a GPU lease's limit, a
    crash) keeps everything it measured before it stopped."""

    def __init__(self, path: str | None = None):
        super().__init__()
        self.path = path

    def __setitem__(self, key, value) -> None:
        super().__setitem__(key, value)
        if self.path:
            with open(self.path, "a") as f:
                f.write(json.dumps({key: value}) + "\n")

    def update(self, *args, **kwargs) -> None:
        for key, value in dict(*args, **kwargs).items():
            self[key] = value


#: every part of the bench, in the order a plain run does them
PARTS = ("cost", "profile", "2way-steps", "2way-fit", "3way-steps", "3way-fit", "census", "census85", "census85-pallas",
         "exact", "exact2010",
         "answers", "units", "state", "topdown")
#: the parts ``--steps-only`` keeps
STEP_PARTS = ("cost", "profile", "2way-steps", "3way-steps", "census", "census85", "census85-pallas")


def marginal_problem(k: int):
    d = data(SIZES, 20_000)
    w = Workload.all_kway(d.domain, k)
    return d, w, MarginalPlan.build(w)


def marginal_steps(k: int, args, peaks: dict, out: Figures) -> None:
    d, w, plan = marginal_problem(k)
    rows = args.rows
    print(f"{k}-way: {len(w.marginals)} marginals, {w.num_queries} queries, "
          f"{plan.flops_per_step(rows) / 1e9:.3f} GFLOP per step, {plan.useful_flops_per_step(rows) / 1e9:.3f} needed")
    steps = (5 if args.quick else (200 if k == 2 else 20))
    step_rates(f"{k}way", plan, answer(d, w), d.domain, rows, steps, peaks, out)


def marginal_fit(k: int, args, peaks: dict, out: Figures) -> None:
    """RAP-Rank K = 100 x T = 1000 end to end (answers, fits, rounding, ranking), every usable dtype."""
    d, w, plan = marginal_problem(k)
    t = answer(d, w)
    K, T = (100, 1000) if args.full else ((2, 10) if args.quick else ((16, 1000) if k == 2 else (4, 100)))
    times = {}
    for precision in peaks:  # every usable dtype, end to end
        s = RAPSettings(rows=args.rows, steps=T, precision=precision, steps_per_call=min(T, RAPSettings.steps_per_call))
        times[precision] = timed_runs(plan, t, d.domain, K, T, s) * (100 / K) * (1000 / T)
        out[f"rap_rank_{k}way_{precision}_s"] = round(times[precision], 1)
        print(f"RAP-Rank {k}-way K=100 x T=1000 ({precision}): {times[precision]:.0f} s (measured K={K}, T={T})")
    best = min(times, key=times.get)
    goal = MARGINAL_GOALS_S[k]
    met = times[best] <= goal
    out[f"rap_rank_{k}way_goal_s"] = goal
    out[f"rap_rank_{k}way_goal_met"] = met
    print(f"RAP-Rank {k}-way K=100 x T=1000 goal {goal:.0f} s on this machine: "
          f"{'MET' if met else 'NOT MET'} ({times[best]:.0f} s, {best})")
    out[f"rap_rank_{k}way_s"] = round(times[best], 1)
    out[f"rap_rank_{k}way_precision"] = best
    out[f"rap_rank_{k}way_measured"] = f"K={K}, T={T}" + ("" if args.full else ", projected to K=100, T=1000")
    if k == 3:
        out["rap_rank_3way_peak_rss_gb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6, 2)
        print(f"peak RSS so far: {out['rap_rank_3way_peak_rss_gb']} GB")


def census_costs(args, out: Figures) -> None:
    """Both census steps' bytes and FLOPs as XLA counts them (compiled, not run): what a change of the step is
    judged on before a GPU is lent."""
    tract, cw = census_problem()
    step_costs("census", ProductPlan.build(cw), 64 if args.quick else 300, out)
    big, bw = census_problem(blocks=85)
    step_costs("census85", ProductPlan.build(bw), 64 if args.quick else 1000, out)


def step_profile(args, out: Figures, top: int = 12) -> None:
    """Where the 85-block census step's time goes, by the profiler (``jax.profiler``): a fit of T steps of one run
    per device traced, and the ops XLA ran (a GPU's kernels on its device plane; on a CPU the XLA threads' ops)
    summed over the trace, the longest first, per run-step. Their names are the compiled step's (the HLO of
    ``reconstruct.rap.step_cost``'s program names the same fusions)."""
    import collections
    import glob
    import tempfile

    big, bw = census_problem(blocks=85)
    plan = ProductPlan.build(bw)
    rows, T = (64, 4) if args.quick else (1000, 30)
    s = RAPSettings(rows=rows, steps=T, steps_per_call=T)
    runs = default_batch(s, 1 << 20, plan) if jax.default_backend() == "cpu" else len(jax.devices())
    targets = bw.answer(big)
    rap_rank(plan, targets, big.domain, jax.random.key(0), runs, s)  # compiled before the trace
    folder = tempfile.mkdtemp(prefix="censusrecon-profile-")
    with jax.profiler.trace(folder):
        rap_rank(plan, targets, big.domain, jax.random.key(1), runs, s)
    data = jax.profiler.ProfileData.from_file(sorted(glob.glob(f"{folder}/**/*.xplane.pb", recursive=True))[-1])
    device = [p for p in data.planes if p.name.startswith("/device:")]
    total: collections.Counter = collections.Counter()
    for plane in device or [p for p in data.planes if p.name == "/host:CPU"]:
        lines = list(plane.lines)
        if device:  # a GPU plane has its modules, its ops and its streams' kernels: one of them, not all
            ops = [ln for ln in lines if ln.name == "XLA Ops"] or [ln for ln in lines if ln.name.startswith("Stream")]
            lines = ops or lines
        else:  # the CPU's XLA threads, not Python's
            lines = [ln for ln in lines if ln.name.startswith("tf_XLA")]
        for line in lines:
            for ev in line.events:
                if not ev.name.startswith(("ThunkExecutor", "$")):
                    total[ev.name] += ev.duration_ns
    run_steps = runs * T
    busy = max(sum(total.values()), 1)
    out["profile_where"] = "device kernels" if device else "XLA CPU threads' ops"
    out["profile_us_per_run_step"] = round(busy / 1e3 / run_steps, 2)
    out["profile_top"] = [[name, round(ns / 1e3 / run_steps, 2), round(ns / busy, 3)] for name, ns in total.most_common(top)]
    print(f"census85 profile ({out['profile_where']}, {runs} runs x {T} steps): {busy / 1e3 / run_steps:.1f} us of ops "
          "a run-step; the longest:")
    for name, us, share in out["profile_top"]:
        print(f"  {us:8.2f} us  {share:6.1%}  {name}")


def census24(args, peaks: dict, out: Figures) -> None:
    tract, cw = census_problem()
    cplan = ProductPlan.build(cw)
    print(f"census SF1 tables: {cw.num_queries} cells on a tract of {len(tract)} people, "
          f"{tract.domain.size('BLOCK')} blocks")
    step_rates("census", cplan, cw.answer(tract), tract.domain, 300, 5 if args.quick else 20, peaks, out)
    best = max(out.get("step_census_per_s", 0.0), out.get("step_census_bf16_per_s", 0.0))
    out["step_census_goal_met"] = best >= CENSUS_GOAL_PER_S
    print(f"census step goal {CENSUS_GOAL_PER_S:.0f} run-steps/s: {'MET' if best >= CENSUS_GOAL_PER_S else 'NOT MET'} "
          f"({best:.0f}, the better dtype)")


def census85(args, peaks: dict, out: Figures) -> None:
    big, bw = census_problem(blocks=85)
    bplan = ProductPlan.build(bw)
    print(f"census SF1 tables, 2010-sized tract: {bw.num_queries} cells, {len(big)} people, "
          f"{big.domain.size('BLOCK')} blocks, n' = 1000")
    step_rates("census85", bplan, bw.answer(big), big.domain, 1000, 3 if args.quick else 30, peaks, out)
    frac85 = out["step_census85_useful_frac_peak"]
    out["step_census85_goal_frac_peak"] = CENSUS85_GOAL_FRAC
    out["step_census85_goal_met"] = frac85 >= CENSUS85_GOAL_FRAC
    print(f"census 85-block step goal {CENSUS85_GOAL_FRAC:.0%} of the float32 peak (float32, FLOPs needed): "
          f"{'MET' if frac85 >= CENSUS85_GOAL_FRAC else 'NOT MET'} ({frac85:.1%})")
    if len(jax.devices()) > 1:  # the ceiling of the step's matmuls as it runs: every device at once
        both = concurrent_peak_gflops(jnp.float32, _peak_size(args))
        of_both = bplan.useful_flops_per_step(1000) * out["step_census85_per_s"] / 1e9 / both
        out["peak_gflops_all_devices"] = round(both, 1)
        out["step_census85_useful_frac_all_devices_peak"] = round(of_both, 3)
        print(f"  (float32 matmul with every device at once, one matmul each, as RAP's runs are: {both:.0f} GFLOP/s; "
              f"the step does {of_both:.1%} of that)")
    # the bound its own matmuls put on the goal's fraction: the step with nothing but them
    mm_rate, mm_gflop = product_matmul_gflops(bplan, 1000, 2 if args.quick else 10)
    bound = bplan.useful_flops_per_step(1000) / 1e9 * (mm_rate / mm_gflop) / peaks["float32"]
    out["step_census85_matmuls_alone_gflops"] = round(mm_rate, 1)
    out["step_census85_matmuls_alone_useful_frac_peak"] = round(bound, 3)
    print(f"  (the step's own matmuls alone, at its shapes, every device at once: {mm_rate:.0f} GFLOP/s, so a step "
          f"of nothing but them would reach {bound:.1%} of the float32 peak; the step reaches "
          f"{frac85 / bound:.0%} of that bound)")


def census85_pallas(args, peaks: dict, out: Figures) -> None:
    """The 85-block step on the fused kernels (``kernel="pallas"``, :mod:`reconstruct.fused`): run-steps/s and share
    of the memory floor beside ``census85``'s, and how far its answers are from the XLA step's after the same fit
    (float rounding: the kernels sum in another order). A GPU's part: on a CPU the kernels only run in Pallas's
    interpreter (the tests' check), far too slowly to time."""
    if jax.default_backend() != "gpu" and not args.quick:
        print("census85-pallas: the fused kernels are Triton programs, timed on a GPU only (--quick runs them in "
              "the interpreter at a small size: a check of this part, no timing); skipped")
        return
    big, bw = census_problem(blocks=85)
    bplan = ProductPlan.build(bw)
    targets = bw.answer(big)
    rows, steps = (64, 2) if args.quick else (1000, 30)
    # interpreted (--quick, a check of the part): float32 only; the kernels' bfloat16 is checked by the tests
    step_rates("census85_pallas", bplan, targets, big.domain, rows, steps, peaks, out, kernel="pallas",
               precisions=("float32",) if args.quick else ("float32", "bfloat16"))
    fits = {}
    for kernel in ("xla", "pallas"):
        s = RAPSettings(rows=rows, steps=steps, steps_per_call=steps, kernel=kernel)
        fits[kernel] = rap_rank(bplan, targets, big.domain, jax.random.key(5), 4, s)
    a, b = fits["xla"], fits["pallas"]
    out["step_census85_pallas_codes_equal_share"] = round(float(np.mean(a.codes == b.codes)), 4)
    out["step_census85_pallas_final_loss_rel_diff"] = round(float(np.max(np.abs(a.final_loss - b.final_loss)
                                                                         / np.maximum(np.abs(a.final_loss), 1e-30))), 6)
    print(f"census85-pallas against the XLA step, 4 runs of {steps} steps: {out['step_census85_pallas_codes_equal_share']:.2%} "
          f"of the rounded codes equal, final losses within {out['step_census85_pallas_final_loss_rel_diff']:.2e} "
          "(relative)")


def answers_bench(args, out: Figures) -> None:
    n_big = 100_000 if args.quick else 1_000_000
    big = data(SIZES, n_big)
    w2 = Workload.all_kway(big.domain, 2)
    p2 = plan_for(w2)
    exact_counts(p2, big.codes[:10])
    t0 = time.perf_counter()
    counts = exact_counts(p2, big.codes)
    rate = len(big) * len(w2.marginals) / (time.perf_counter() - t0)
    t0 = time.perf_counter()
    ref = np.concatenate([marginal_counts(big, m) for m in w2.marginals])
    rate_bincount = len(big) * len(w2.marginals) / (time.perf_counter() - t0)
    assert np.array_equal(counts, ref)
    out["answers_row_marginals_per_s"] = round(rate / 1e6, 1) * 1e6
    out["answers_speedup_over_bincount"] = round(rate / rate_bincount, 2)
    print(f"exact answers: {rate / 1e6:.0f} M row-marginals/s (N = {n_big}, {len(w2.marginals)} 2-way marginals; "
          f"{rate / rate_bincount:.1f}x one bincount per marginal)")


def units_bench(args, out: Figures) -> None:
    """Many tracts' RAP-Rank in shared compiled calls (all 2-way, without BLOCK), then 8 of them one at a time."""
    from censusrecon.microdata.population import embedded_population

    pop = embedded_population(0)
    sub = ["AGE", "SEX", "HISP", "RACE"]
    all_tracts = pop.geography.unit_ids("tract")
    n_units = 4 if args.quick else args.units
    tracts = [all_tracts[i % len(all_tracts)] for i in range(n_units)]  # past 48, tracts repeat (own keys)
    wk = Workload.all_kway(pop.project(sub).domain, 2)
    plan = plan_for(wk)
    targets = [answer(pop.take(np.flatnonzero(pop.geography.mask("tract", tr))).project(sub), wk) for tr in tracts]
    keys = [jax.random.key(i) for i in range(len(tracts))]
    K, T = args.units_runs, (20 if args.quick else args.units_steps)
    s = RAPSettings(rows=300, steps=T, steps_per_call=T)
    out["units_per_s_setting"] = (f"{len(tracts)} tracts without BLOCK, all 2-way, K={K}, T={T}, n'=300, "
                                  f"batch {default_batch(s, 1 << 20, plan)} (unit, run) pairs per call")
    rap_rank_units(plan, targets[:2], wk.domain, keys[:2], K, s)  # compile
    t0 = time.perf_counter()
    rap_rank_units(plan, targets, wk.domain, keys, K, s)
    together = time.perf_counter() - t0
    out["units_seconds"] = round(together, 2)
    out["units_per_s"] = round(len(tracts) / together, 3)
    print(f"{len(tracts)} units in {together:.1f} s: {len(tracts) / together:.2f} units/s together "
          f"({out['units_per_s_setting']})")
    alone_units = min(len(tracts), 8)  # one at a time is slow; 8 units give its rate
    t0 = time.perf_counter()
    for tgt, key in zip(targets[:alone_units], keys[:alone_units]):
        rap_rank(plan, tgt, wk.domain, key, K, s)
    alone = (time.perf_counter() - t0) * len(tracts) / alone_units
    out["units_per_s_one_at_a_time"] = round(len(tracts) / alone, 3)
    print(f"  one at a time: {len(tracts) / alone:.2f} units/s (8 units timed)")


#: census tracts of the 2010 nation (docs/pages/calibration.md): what a state's rate is projected to
NATION_TRACTS_2010 = 73_057


def state_bench(args, out: Figures) -> None:
    """A state in one call: RAP-Rank with BLOCK on every SF1 table over the tracts of a 2010-shaped state
    (configs/census/state_2010.yaml's population and padding: ``--state-tracts`` of them, 25 a county), streamed as
    the run streams them: chunks of at most 64 tracts, each chunk's tracts of one padded size in shared calls over
    every device. Tracts per second (with and without compiling), compile seconds apart (from this process's
    compile clock), programs, peak host memory and device memory, and the projection for the nation."""
    from censusrecon.experiments.config import load_config
    from censusrecon.experiments.problem import exact_answers, resolve, unit_key
    from censusrecon.reconstruct import kernel_choice
    from censusrecon.reconstruct.compile_cache import compile_facts, listen
    from censusrecon.reconstruct.queries import plan_for

    listen()
    kernel_choice.forget()  # the figure's own choices only
    n = 4 if args.quick else args.state_tracts
    K, T, rows = (2, 10, 50) if args.quick else (args.state_runs, args.state_steps, args.state_rows)
    cfg = load_config("configs/census/state_2010.yaml", [
        f"data.population.counties_per_state={-(-n // 25)}", f"data.population.tracts_per_county={min(n, 25)}",
        f"attack.strength=config", f"attack.runs={K}", f"attack.steps={T}", f"attack.rows={rows}"])
    t0 = time.perf_counter()
    study = resolve(cfg)
    units = study.units[:n]
    q = cfg.queries[0]
    settings = RAPSettings(rows=rows, steps=T, steps_per_call=min(T, RAPSettings.steps_per_call),
                           kernel=args.state_kernel)
    prepared = []
    for u in units:  # plan_for keeps the plan of each padded size: tracts of one size share it
        D = study.prepare(u, True).private
        w = study.workload(q, D.domain)
        plan = plan_for(w)
        prepared.append((u, plan, exact_answers(D, w, plan), D.domain))
    prep_s = time.perf_counter() - t0
    before = compile_facts()
    t0 = time.perf_counter()
    chunk = 64
    for start in range(0, len(prepared), chunk):
        groups: dict = {}
        for u, plan, answers, dom in prepared[start:start + chunk]:
            groups.setdefault(plan, []).append((u, answers, dom))
        for plan, members in groups.items():
            rap_rank_units(plan, [a for _, a, _ in members], members[0][2],
                           [unit_key(cfg, "rap", u, True, "random", q.label) for u, _, _ in members], K, settings,
                           limit=1000)
    fit_s = time.perf_counter() - t0
    after = compile_facts()
    compile_s = after["compile_seconds"] - before["compile_seconds"]
    device_peak = (jax.local_devices()[0].memory_stats() or {}).get("peak_bytes_in_use")
    # kernel auto: the first block of a shape is also run on the kernels not kept, once (choosing them)
    chosen = list(kernel_choice.choices().values())
    choose_s = sum(v for c in chosen if c["reason"] == "measured" for k, v in c["seconds"].items() if k != c["kernel"])
    rate = len(units) / max(fit_s - compile_s - choose_s, 1e-9)
    ran = "+".join(sorted({c["kernel"] for c in chosen})) if args.state_kernel == "auto" else args.state_kernel
    out.update(state_tracts=len(units), state_kernel=args.state_kernel, state_kernel_ran=ran,
               state_kernel_choices=chosen, state_choose_s=round(choose_s, 1),
               state_setting=f"K={K}, T={T}, n'={rows}, block_ladder "
               f"{cfg.target.block_ladder}", state_programs=len({p for _, p, _, _ in prepared}),
               state_prep_s=round(prep_s, 1), state_fit_s=round(fit_s, 1), state_compile_s=round(compile_s, 1),
               state_tracts_per_s=round(rate, 3), state_tracts_per_s_with_compile=round(len(units) / fit_s, 3),
               state_nation_hours=round(NATION_TRACTS_2010 / rate / 3600, 2),
               state_host_peak_rss_gb=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6, 2),
               state_device_peak_gb=None if device_peak is None else round(device_peak / 1e9, 2))
    print(f"state: {len(units)} 2010-shaped tracts with BLOCK, every SF1 table, {out['state_setting']}, kernel "
          f"{args.state_kernel} ({out['state_kernel_ran']} ran): "
          f"{out['state_programs']} programs; prepared in {prep_s:.0f} s, fitted in {fit_s:.0f} s of which compiling "
          f"{compile_s:.0f} s, choosing the kernels {choose_s:.0f} s: {rate:.2f} tracts/s ({len(units) / fit_s:.2f} "
          f"with compiling); the nation's "
          f"{NATION_TRACTS_2010:,} tracts in {out['state_nation_hours']:.1f} hours at this rate")


def _peak_size(args) -> int:
    """The peak's matmul size: large enough to fill the device (a GPU finishes 2048^3 in microseconds,
    where launch and sync would dominate)."""
    return 512 if args.quick else (8192 if jax.default_backend() == "gpu" else 2048)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--full", action="store_true", help="run K = 100 x T = 1000 for real")
    ap.add_argument("--quick", action="store_true", help="smoke run with tiny sizes")
    ap.add_argument("--rows", type=int, default=1000, help="n'")
    ap.add_argument("--units", type=int, default=16, help="tracts in the many-units figure")
    ap.add_argument("--units-runs", type=int, default=10, help="K in the many-units figure")
    ap.add_argument("--units-steps", type=int, default=100, help="T in the many-units figure")
    ap.add_argument("--state-tracts", type=int, default=1000, help="tracts in the state figure")
    ap.add_argument("--state-runs", type=int, default=100, help="K in the state figure")
    ap.add_argument("--state-steps", type=int, default=1000, help="T in the state figure")
    ap.add_argument("--state-rows", type=int, default=1000, help="n' in the state figure")
    ap.add_argument("--state-kernel", choices=("auto", "xla", "pallas"), default="auto",
                    help="the census plan's kernels in the state figure (RAPSettings.kernel; auto: as a run picks them)")
    ap.add_argument("--topdown", action="store_true", help="only TopDown's estimation for one county")
    ap.add_argument("--steps-only", action="store_true",
                    help="only the steps' rates (2-way, 3-way, census; no end-to-end fits, exact attack or TopDown)")
    ap.add_argument("--parts", default=",".join(PARTS),
                    help=f"the parts to run, in this order, comma-separated (default: all: {','.join(PARTS)})")
    ap.add_argument("--jsonl", default=None, metavar="PATH",
                    help="also append each figure to PATH as a JSON line the moment it is measured")
    ap.add_argument("--topdown-solvers", default="clarabel,osqp",
                    help="QP solvers to time (highs too is possible: over 10 minutes here)")
    args = ap.parse_args(argv)
    if args.topdown:
        args.parts = "topdown"
    parts = [p for p in args.parts.split(",") if p]
    unknown = sorted(set(parts) - set(PARTS))
    if unknown:
        ap.error(f"unknown parts {unknown}; the parts are {', '.join(PARTS)}")
    if args.steps_only:
        parts = [p for p in parts if p in STEP_PARTS]
    if args.quick:
        args.rows = 64
    out = Figures(args.jsonl)
    if parts != ["topdown"]:
        use_cpu_cores_as_devices()  # as the CLI does: one JAX device per core
        out.update(backend=jax.default_backend(), devices=[str(d) for d in jax.devices()], jax=jax.__version__,
                   rows=args.rows)
        peaks = {"float32": peak_gflops(jnp.float32, _peak_size(args))}
        print(f"matmul peak: float32 {peaks['float32']:.0f} GFLOP/s", end="")
        if usable_dtype("bfloat16") == "bfloat16":
            peaks["bfloat16"] = peak_gflops(jnp.bfloat16, _peak_size(args))
            print(f", bfloat16 operands {peaks['bfloat16']:.0f} GFLOP/s", end="")
        print()
        out["stream_gbps"] = round(stream_gbps(16 if args.quick else (1024 if jax.default_backend() == "gpu" else 64)), 1)
        print(f"memory: {out['stream_gbps']:.0f} GB/s read + written by one device")
        out["peak_gflops"] = round(peaks["float32"], 1)
        out["peak_gflops_bf16"] = round(peaks.get("bfloat16", 0.0), 1)
    run = {"cost": lambda: census_costs(args, out),
           "profile": lambda: step_profile(args, out),
           "2way-steps": lambda: marginal_steps(2, args, peaks, out),
           "2way-fit": lambda: marginal_fit(2, args, peaks, out),
           "3way-steps": lambda: marginal_steps(3, args, peaks, out),
           "3way-fit": lambda: marginal_fit(3, args, peaks, out),
           "census": lambda: census24(args, peaks, out),
           "census85": lambda: census85(args, peaks, out),
           "census85-pallas": lambda: census85_pallas(args, peaks, out),
           "exact": lambda: exact_bench(out),
           "exact2010": lambda: exact_2010_bench(out),
           "answers": lambda: answers_bench(args, out),
           "units": lambda: units_bench(args, out),
           "state": lambda: state_bench(args, out),
           "topdown": lambda: topdown_bench(out, tuple(args.topdown_solvers.split(",")))}
    failed = []
    for part in parts:
        t0 = time.perf_counter()
        try:
            run[part]()
        except Exception as exc:  # noqa: BLE001 - one part's failure must not lose the others' figures
            failed.append(part)
            out[f"{part}_error"] = f"{type(exc).__name__}: {exc}"[:500]
            print(f"{part}: FAILED ({type(exc).__name__}: {exc})")
        out[f"{part}_part_s"] = round(time.perf_counter() - t0, 1)
    print(json.dumps(out))
    if failed:
        raise SystemExit(f"bench parts failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()
