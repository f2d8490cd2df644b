"""XLA's count of the census steps' bytes and FLOPs a run-step, for any checkout of the project: the "before" of a
change to the step is measured by the same count as its "after", on the same machine and JAX.

    python bench/step_cost_at.py                 # this checkout, compiled for this machine (its CPU)
    python bench/step_cost_at.py /path/to/other  # another checkout (e.g. git worktree add /tmp/before 5a152b0)
    python bench/step_cost_at.py --gpu h100 --batch 256 [PATH]  # compiled for an H100, on a machine with no GPU
    python bench/step_cost_at.py --gpu h100 --batch 256 --kernel pallas --before 5a152b0  # and after over before

Prints one JSON object: per step (``census``: the 24-block tract, n' = 300; ``census85``: the 2010-sized tract,
n' = 1,000), per dtype, ``step_<name>[_bf16]_bytes_accessed`` and ``_xla_flops`` per run-step of a call of
``--batch`` (unit, run) pairs (default 1, as RAP's CPU calls are per device; a GPU's calls hold thousands), with
the commit, target and JAX version. Checkouts from before the step was one function (``reconstruct.rap._step_fn``)
are lowered as they ran it: the gradient of their ``_loss`` and optax's Adam.

``--gpu h100`` compiles for the GPU that ``bench/gpu_targets/h100.txtpb`` describes, without one (JAX's deviceless
ahead-of-time compilation: ``jax.experimental.topologies``), and counts the compiled program with XLA's cost
analysis: the GPU's own fusions, so the bytes a GPU step moves are judged before a GPU is lent. It needs JAX's CUDA
plugin and the CUDA compiler, in ``.gpucount`` (``make gpu-count-env``: 0.8 GB, nothing else changed). One
difference from a compile on the card: with no device XLA cannot time its matmul configurations (autotuning), so it
takes its default ones (a split of the contraction, for instance, where a card might pick another)."""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _import_from(root: Path) -> None:
    """Make ``import censusrecon`` load ``root`` (the repository root is the package) ahead of the installed one."""
    link = Path(tempfile.mkdtemp()) / "censusrecon"
    link.symlink_to(root.resolve())
    sys.path.insert(0, str(link.parent))
    sys.path.insert(0, str(root / "bench"))


_DTYPE_BYTES = {"f32": 4, "s32": 4, "u32": 4, "bf16": 2, "f16": 2, "s8": 1, "u8": 1, "pred": 1, "s64": 8, "f64": 8}
_INSTRUCTION = re.compile(r"^\s*(?:ROOT )?%(\S+) = (\(.*?\)|\w+\[[\d,]*\]\S*) custom-call\((.*?)\)")
_SHAPE = re.compile(r"^\s*(?:ROOT )?%(\S+) = (\(.*?\)|\w+\[[\d,]*\]\S*) ")


def _shape_bytes(shape: str) -> int:
    total = 0
    for dtype, dims in re.findall(r"\b(\w+)\[([\d,]*)\]", shape):
        total += _DTYPE_BYTES.get(dtype, 0) * math.prod(int(d) for d in dims.split(",") if d)
    return total


def custom_call_bytes(text: str) -> int:
    """What XLA's cost analysis leaves out of a module's bytes: its custom calls' (a Pallas kernel's, a library
    call's), which it counts as none. Each is counted as its operands read once and its outputs written once, the
    least it can move (a kernel's repeated reads of a small operand come from cache)."""
    entry = text[text.index("\nENTRY"):]
    shapes = {m.group(1): _shape_bytes(m.group(2)) for m in map(_SHAPE.match, entry.splitlines()) if m}
    total = 0
    for m in map(_INSTRUCTION.match, entry.splitlines()):
        if m:
            total += _shape_bytes(m.group(2)) + sum(shapes.get(a, 0) for a in re.findall(r"%([\w.\-]+)", m.group(3)))
    return total


def analyse_hlo(text: str) -> dict:
    """XLA's cost analysis (``{"flops", "bytes accessed", ...}``) of a compiled module given as its text: the
    deviceless compile has no analysis of its own, so the GPU's compiled module is parsed and analysed by the CPU
    client's cost model, which counts each op's (each fusion's) operands and outputs as it does for the CPU's (a
    test checks it gives the CPU's own count of a CPU program); plus :func:`custom_call_bytes`."""
    from jax._src import xla_bridge
    from jax._src.lib import xla_client

    module = xla_client.hlo.hlo_module_from_text(text)
    cost = dict(xla_client._xla.hlo_module_cost_analysis(xla_bridge.get_backend("cpu"), module))
    cost["bytes accessed"] = cost.get("bytes accessed", 0.0) + custom_call_bytes(text)
    return cost


def analyse_compiled(compiled) -> dict:
    """XLA's cost analysis of a compiled program, with its custom calls counted (:func:`custom_call_bytes`): the
    program's own analysis where its backend has one (a CPU's, a GPU's on the card), else its text's
    (:func:`analyse_hlo`: a program compiled for a GPU with none here)."""
    own = compiled.cost_analysis()
    own = own[0] if isinstance(own, (list, tuple)) else own
    if not own:
        return analyse_hlo(compiled.as_text())
    cost = dict(own)
    cost["bytes accessed"] = cost.get("bytes accessed", 0.0) + custom_call_bytes(compiled.as_text())
    return cost


def _gpu_target(name: str):
    """A sharding on one GPU of the kind ``bench/gpu_targets/<name>.txtpb`` describes, with no GPU here."""
    from jax.experimental import topologies
    from jax.sharding import NamedSharding, PartitionSpec

    spec = (HERE / "gpu_targets" / f"{name}.txtpb").read_text()
    topology = topologies.get_topology_desc(platform="cuda", target_config=spec, topology="1x1x1")
    return NamedSharding(topologies.make_mesh(topology, (1,), ("x",)), PartitionSpec())


class TritonKernels:
    """The Triton modules of the Pallas kernels lowered while it is open (``--kernel pallas``), compiled to PTX for
    the target's architecture with the CUDA plugin's own compiler, no GPU needed (JAX 0.10's plugin has it; later
    XLA compiles them itself in the program's compile, so ``compiled`` stays None): a kernel Triton cannot compile
    fails here, not on a lent GPU."""

    def __init__(self, arch: str):
        self.arch, self.modules, self.compiled = arch, [], None

    def __enter__(self):
        import io

        from jax._src.pallas.triton import lowering

        self._lowering, self._original = lowering, lowering.lower_jaxpr_to_triton_module

        def capture(*args, **kwargs):
            result = self._original(*args, **kwargs)
            buf = io.BytesIO()
            result.module.operation.write_bytecode(buf)
            self.modules.append(buf.getvalue())
            return result

        lowering.lower_jaxpr_to_triton_module = capture
        return self

    def __exit__(self, *exc):
        self._lowering.lower_jaxpr_to_triton_module = self._original
        from jax._src.lib import triton

        handler = getattr(triton, "_compilation_handlers", {}).get("CUDA")
        if handler is not None and self.modules and exc[0] is None:
            from censusrecon.reconstruct import fused

            self.compiled = [handler(m, self.arch, fused.NUM_WARPS, 1, fused.NUM_STAGES) for m in self.modules]
        return False


def _prepare_gpu() -> None:
    """Before JAX is imported: its CUDA plugin on the path, and no device looked for (the plugin's checks of a
    driver would fail with none; the CPU stays the default backend, the GPU only a compile target)."""
    plugin = HERE.parent / ".gpucount"
    if not plugin.is_dir():
        raise SystemExit("--gpu needs JAX's CUDA plugin and compiler in .gpucount: run `make gpu-count-env`")
    sys.path.insert(0, str(plugin))
    os.environ["CUDA_VISIBLE_DEVICES"] = "-1"
    os.environ["JAX_SKIP_CUDA_CONSTRAINTS_CHECK"] = "1"
    os.environ["JAX_PLATFORMS"] = "cpu"


def _step(plan, s):
    """One run's step ``f(logits, opt_state, key, targets)`` and its state's shapes, as this checkout runs it."""
    import jax
    import jax.numpy as jnp
    import optax

    from censusrecon.reconstruct import rap

    if hasattr(rap, "_step_fn"):
        step, opt = rap._step_fn(plan, s)
        f = lambda lg, st, k, t: step((lg, st), k, t)  # noqa: E731
    else:  # the step as it was: one jitted gradient of the loss and optax's update
        opt, mask = optax.adam(s.learning_rate), jnp.asarray(plan.dense_mask)

        def f(lg, st, k, t):
            g = jax.grad(rap._loss)(lg, t, k, plan, s, mask, s.precision)
            u, st = opt.update(g, st, lg)
            return optax.apply_updates(lg, u), st
    state_of = getattr(plan, "state_of", lambda x: x)
    logits = jax.eval_shape(lambda: state_of(jnp.zeros((plan.layout.width, s.rows), jnp.float32)))
    return f, (logits, jax.eval_shape(opt.init, logits))


def costs(gpu: str | None = None, batch: int = 1, kernel: str = "xla") -> dict:
    import jax
    import jax.numpy as jnp

    from censusrecon.reconstruct import rap
    from censusrecon.reconstruct.product_plan import ProductPlan
    from run import census_problem  # the bench's own problems, from the checkout measured

    sharding = _gpu_target(gpu) if gpu else None
    extra = {}
    if kernel != "xla":
        if "kernel" not in rap.RAPSettings.__dataclass_fields__:
            raise SystemExit(f"this checkout has no kernel setting (--kernel {kernel})")
        extra["kernel"] = kernel
        if gpu:  # the fused kernels compiled for the GPU by Triton, not run by the CPU's Pallas interpreter
            from censusrecon.reconstruct import fused
            fused.INTERPRET = False
    out = {}
    for name, blocks, rows in (("census", None, 300), ("census85", 85, 1000)):
        tract, w = census_problem(blocks=blocks) if blocks else census_problem()
        plan = ProductPlan.build(w)
        for precision in ("float32", "bfloat16"):
            s = rap.RAPSettings(rows=rows, precision=precision, **extra)
            f, (logits, state) = _step(plan, s)
            shapes = (logits, state, jax.eval_shape(lambda: jax.random.key(0)),
                      jax.ShapeDtypeStruct((plan.dense_size,), jnp.float32))
            args = jax.tree.map(lambda a: jax.ShapeDtypeStruct((batch,) + a.shape, a.dtype, sharding=sharding), shapes)
            tag = "" if precision == "float32" else "_bf16"
            if not (gpu and kernel != "xla"):
                compiled = jax.jit(jax.vmap(f)).lower(*args).compile()
            else:  # the kernels' Triton modules compiled to PTX too (the targets are all sm_90)
                with TritonKernels("9.0") as kernels:
                    compiled = jax.jit(jax.vmap(f)).lower(*args).compile()
                out[f"step_{name}{tag}_triton_kernels"] = len(kernels.modules)
                out[f"step_{name}{tag}_triton_ptx"] = (None if kernels.compiled is None else
                                                       [len(k.asm) for k in kernels.compiled])
            c = analyse_compiled(compiled)
            out[f"step_{name}{tag}_bytes_accessed"] = round(c["bytes accessed"] / batch)
            out[f"step_{name}{tag}_xla_flops"] = round(c["flops"] / batch)
    return out


def _count_before(commit: str, root: Path, args) -> dict:
    """This script's count of ``commit``'s step (XLA's ops: a checkout from before the kernel setting has no
    other), in a git worktree made for it and removed after, in a process of its own (each checkout is imported
    as the package)."""
    with tempfile.TemporaryDirectory(prefix="censusrecon-before-") as folder:
        tree = Path(folder) / "tree"
        subprocess.run(["git", "worktree", "add", "--detach", str(tree), commit], cwd=root, check=True,
                       capture_output=True, text=True)
        try:
            cmd = [sys.executable, str(Path(__file__).resolve()), str(tree), "--batch", str(args.batch)]
            run = subprocess.run(cmd + (["--gpu", args.gpu] if args.gpu else []), capture_output=True, text=True)
            if run.returncode != 0:
                raise SystemExit(f"counting {commit} failed:\n{run.stderr[-2000:]}")
            return json.loads(run.stdout.strip().splitlines()[-1])
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=root, capture_output=True)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("root", nargs="?", default=str(HERE.parent), help="the checkout to count (default: this one)")
    ap.add_argument("--gpu", choices=sorted(p.stem for p in (HERE / "gpu_targets").glob("*.txtpb")),
                    help="compile for this GPU (no GPU needed; make gpu-count-env first)")
    ap.add_argument("--batch", type=int, default=1, help="(unit, run) pairs a call (default 1); counts are per pair")
    ap.add_argument("--kernel", choices=("xla", "pallas"), default="xla",
                    help="the census parts' kernels (RAPSettings.kernel; pallas: the fused GPU kernels, with --gpu)")
    ap.add_argument("--before", metavar="COMMIT",
                    help="count COMMIT's step too (XLA's ops, in a temporary git worktree) and print after over before")
    args = ap.parse_args(argv)
    if args.batch < 1:
        ap.error("--batch must be at least 1")
    root = Path(args.root).resolve()
    before = _count_before(args.before, root, args) if args.before else None
    if args.gpu:
        _prepare_gpu()
    _import_from(root)
    figures = costs(args.gpu, args.batch, args.kernel)
    import jax

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True).stdout
    target = f"{args.gpu} (compiled with no device)" if args.gpu else jax.default_backend()
    after = {"commit": commit.strip(), "target": target, "batch": args.batch, "kernel": args.kernel,
             "jax": jax.__version__, **figures}
    if before is None:
        print(json.dumps(after))
        return
    ratios = {}
    for k, now in figures.items():
        if k.endswith("_bytes_accessed") and before.get(k):
            ratios[k.replace("_bytes_accessed", "_bytes_after_over_before")] = r = round(now / before[k], 3)
            print(f"{k[len('step_'):-len('_bytes_accessed')]}: {before[k] / 1e6:.1f} MB a run-step at "
                  f"{before['commit']}, {now / 1e6:.1f} MB now ({args.kernel}): {r:.3f} of before", file=sys.stderr)
    print(json.dumps({"before": before, "after": after, **ratios}))


if __name__ == "__main__":
    main()
