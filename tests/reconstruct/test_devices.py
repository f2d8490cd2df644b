"""RAP runs spread over several host devices (one per CPU core, as the CLI asks for)."""

import functools
import json
import subprocess
import sys
from pathlib import Path

ROOT = str(Path(__file__).resolve().parents[2])

SNIPPET = r"""
import json, logging, sys
import jax
import numpy as np
from censusrecon.reconstruct.rap import RAPSettings, run_rap, use_cpu_cores_as_devices
assert use_cpu_cores_as_devices(int(sys.argv[1])) == int(sys.argv[1])
from censusrecon.microdata.dataset import Dataset
from censusrecon.microdata.domain import Domain
from censusrecon.microdata.marginals import Workload, answer
from censusrecon.reconstruct.queries import MarginalPlan
dom = Domain.from_sizes({"A": 2, "B": 3, "C": 3})
rng = np.random.default_rng(1)
data = Dataset(dom, np.stack([rng.integers(0, s, 12) for s in dom.sizes], axis=1))
if sys.argv[3] == "census":  # census tables: per-block and whole-unit cells of value sets (the product plan)
    from censusrecon.microdata.census import Cell, CensusWorkload
    from censusrecon.reconstruct.product_plan import ProductPlan
    cells = [Cell("T", 1, "all", (), "block"), Cell("T", 2, "b", (("B", frozenset({1, 2})),), "block"),
             Cell("T", 3, "bc", (("B", frozenset({0})), ("C", frozenset({1, 2}))), "tract"),
             Cell("T", 4, "ac", (("A", frozenset({1})), ("C", frozenset({2}))), "block")]
    w = CensusWorkload.build(dom, cells)
    plan, t = ProductPlan.build(w), w.answer(data)
else:
    w = Workload.all_kway(dom, 2)
    plan, t = MarginalPlan.build(w), answer(data, w)
T = int(sys.argv[4])  # steps a block
kernel = sys.argv[5]
if kernel == "auto-gpu":  # kernel auto on the GPU's path: checked, then timed (the fused kernels' block said faster)
    from censusrecon.reconstruct import kernel_choice
    kernel_choice.on_gpu = lambda: True
    said = iter([1.0, 0.5])
    kernel_choice.timed = lambda fn: (jax.block_until_ready(fn()), next(said))
    kernel = "auto"
s = RAPSettings(rows=48, steps=T, steps_per_call=T, batch=int(sys.argv[2]), kernel=kernel)
run_rap(plan, t, jax.random.key(1), np.arange(4), s)  # compiles; one block
compiles = []
class Count(logging.Handler):
    def emit(self, record):
        if record.getMessage().startswith("Compiling"):
            compiles.append(record.getMessage()[:60])
logging.getLogger("jax").addHandler(Count())
with jax.log_compiles(True):  # three blocks of the same program: nothing new to compile
    codes, _, err = run_rap(plan, t, jax.random.key(0), np.arange(4), RAPSettings(
        rows=48, steps=3 * T, steps_per_call=T, batch=int(sys.argv[2]), kernel=kernel))
from censusrecon.reconstruct.rap import TRACE_COUNT
from censusrecon.reconstruct.kernel_choice import choices
print(json.dumps({"chosen": sorted({c["kernel"] + " " + c["reason"] for c in choices().values()}),"devices": len(jax.devices()), "codes": codes.tolist(), "max_err": float(err.max()),
                  "compiles": compiles, "split": TRACE_COUNT.get("split", 0)}))
"""


@functools.lru_cache(maxsize=None)  # a run two tests compare against is run once (a module runs in one worker)
def _run(devices: int, batch: int, plan: str = "marginal", steps: int = 500, kernel: str = "xla") -> dict:
    out = subprocess.run([sys.executable, "-c", SNIPPET, str(devices), str(batch), plan, str(steps), kernel], capture_output=True, text=True,
                         check=True, env={"PATH": "", "CENSUSRECON_CPU_DEVICES": "", "PYTHONPATH": ROOT,
                              "JAX_PLATFORMS": "cpu"})  # host devices: the CPU's, on a GPU machine too
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_runs_spread_over_two_host_devices_fit_as_on_one_without_recompiling():
    two = _run(2, 4)  # 4 runs, two per device
    one = _run(1, 4)
    assert two["devices"] == 2 and one["devices"] == 1
    assert two["max_err"] < 1e-3 and one["max_err"] < 1e-3
    assert two["codes"] == one["codes"]  # each run is computed the same wherever it runs
    # a block's output state is laid out over the devices as its input was: the next block
    # reuses the program (a different layout of Adam's step count recompiled it once)
    assert two["compiles"] == [] and one["compiles"] == [], (two["compiles"], one["compiles"])


def test_a_census_batch_sharded_over_four_host_devices_matches_it_unsharded():
    """The (unit, run) batch of a census plan split over 4 devices (jax.sharding, one run each), as a node's GPUs
    or a CPU's cores take it, against the same batch on one device. Stopped before the fit converges: a converged
    relaxed row may sit exactly between two values, where the last bit of float rounding decides its draw. Every
    attribute is in some cell: one that no cell restricts has a gradient of zero but for rounding, which Adam's
    normalisation turns into whole steps that differ with the layout (measured: 0.005 in its probabilities)."""
    four = _run(4, 4, "census", steps=10)
    one = _run(1, 4, "census", steps=10)
    assert four["devices"] == 4 and one["devices"] == 1
    assert abs(four["max_err"] - one["max_err"]) < 1e-5 and one["max_err"] > 1e-3  # the same fits, not yet converged
    assert four["codes"] == one["codes"]
    assert four["compiles"] == [] and one["compiles"] == []


def test_the_fused_kernels_split_a_batch_over_four_host_devices_as_it_runs_on_one():
    """kernel="pallas": XLA cannot split a kernel of ours over devices (it would gather the whole batch onto each),
    so the fit's programs split the batch themselves (shard_map), each device running its share's kernels (here
    Pallas's interpreter on 4 host CPU devices; a node's GPUs on a GPU): the same codes as on one device, and as
    XLA's ops give, no program compiled twice."""
    four = _run(4, 4, "census", steps=10, kernel="pallas")
    one = _run(1, 4, "census", steps=10, kernel="pallas")
    xla = _run(1, 4, "census", steps=10)
    assert four["devices"] == 4 and one["devices"] == 1
    assert four["codes"] == one["codes"] == xla["codes"]
    assert abs(four["max_err"] - xla["max_err"]) < 1e-5
    assert four["compiles"] == [] and one["compiles"] == []
    assert four["split"] > 0 and one["split"] == xla["split"] == 0  # split by the program itself, on several devices


def test_kernel_auto_decides_on_a_split_batch_and_the_fit_goes_on_without_compiling_again():
    """kernel auto on the GPU's path, the batch split over 4 host devices: the fused kernels checked and their first
    block timed (here said faster) on the split programs; the fit goes on from that block; a later fit of the same
    shape (three blocks) reads the choice and compiles nothing: the timed block's program is the one the fit runs."""
    four = _run(4, 4, "census", steps=10, kernel="auto-gpu")
    xla = _run(1, 4, "census", steps=10)
    assert four["devices"] == 4 and four["chosen"] == ["pallas measured"]
    assert four["codes"] == xla["codes"] and abs(four["max_err"] - xla["max_err"]) < 1e-5
    assert four["split"] > 0 and four["compiles"] == [], four["compiles"]
