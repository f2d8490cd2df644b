"""XLA's count of the census steps' bytes and FLOPs a run-step, for any checkout of the project: the "before" of a
change to the step is measured by the same count as its "after", on the same machine and JAX.

    python bench/step_cost_at.py                 # this checkout
    python bench/step_cost_at.py /path/to/other  # another checkout (e.g. git worktree add /tmp/before 5a152b0)

Prints one JSON object: per step (``census``: the 24-block tract, n' = 300; ``census85``: the 2010-sized tract,
n' = 1,000), per dtype, ``step_<name>[_bf16]_bytes_accessed`` and ``_xla_flops`` for one (unit, run) pair a call
(as RAP's CPU calls are per device), with the commit, backend and JAX version. Checkouts from before the step
was one function (``reconstruct.rap._step_fn``) are lowered as they ran it: the gradient of their ``_loss`` and
optax's Adam."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path


def _import_from(root: Path) -> None:
    """Make ``import censusrecon`` load ``root`` (the repository root is the package) ahead of the installed one."""
    link = Path(tempfile.mkdtemp()) / "censusrecon"
    link.symlink_to(root.resolve())
    sys.path.insert(0, str(link.parent))
    sys.path.insert(0, str(root / "bench"))


def costs() -> dict:
    import jax
    import jax.numpy as jnp
    import optax

    from censusrecon.reconstruct import rap
    from censusrecon.reconstruct.product_plan import ProductPlan
    from run import census_problem  # the bench's own problems, from the checkout measured

    out = {}
    for name, blocks, rows in (("census", None, 300), ("census85", 85, 1000)):
        tract, w = census_problem(blocks=blocks) if blocks else census_problem()
        plan = ProductPlan.build(w)
        for precision in ("float32", "bfloat16"):
            s = rap.RAPSettings(rows=rows, precision=precision)
            tag = "" if precision == "float32" else "_bf16"
            if hasattr(rap, "step_cost"):
                c = rap.step_cost(plan, s)
                nbytes, flops = c["bytes_accessed"], c["flops"]
            else:  # the step as it was: one jitted gradient of the loss and optax's update, vmapped over one pair
                opt, mask = optax.adam(s.learning_rate), jnp.asarray(plan.dense_mask)

                def step(lg, st, k, t):
                    g = jax.grad(rap._loss)(lg, t, k, plan, s, mask, precision)
                    u, st = opt.update(g, st, lg)
                    return optax.apply_updates(lg, u), st

                L = jnp.zeros((1, plan.layout.width, rows), jnp.float32)
                c = jax.jit(jax.vmap(step)).lower(L, jax.vmap(opt.init)(L), jax.random.split(jax.random.key(0), 1),
                                                  jnp.zeros((1, plan.dense_size), jnp.float32)).compile().cost_analysis()
                c = c[0] if isinstance(c, (list, tuple)) else c
                nbytes, flops = c["bytes accessed"], c["flops"]
            out[f"step_{name}{tag}_bytes_accessed"] = round(nbytes)
            out[f"step_{name}{tag}_xla_flops"] = round(flops)
    return out


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    root = Path(argv[0] if argv else Path(__file__).resolve().parents[1]).resolve()
    _import_from(root)
    import jax

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True).stdout
    print(json.dumps({"commit": commit.strip(), "backend": jax.default_backend(), "jax": jax.__version__, **costs()}))


if __name__ == "__main__":
    main()
