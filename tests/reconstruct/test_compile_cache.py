"""The command line's persistent compilation cache: a second process loads what the first compiled, the cache
stays within its bound, and compile time is reported apart."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = str(Path(__file__).resolve().parents[2])

SNIPPET = r"""
import json, sys
from censusrecon.reconstruct.compile_cache import compile_facts, use_compilation_cache
folder = use_compilation_cache()
import jax, numpy as np
from censusrecon.microdata.domain import Domain
from censusrecon.microdata.dataset import Dataset
from censusrecon.microdata.marginals import Workload, answer
from censusrecon.reconstruct.queries import MarginalPlan
from censusrecon.reconstruct.rap import RAPSettings, run_rap
dom = Domain.from_sizes({"A": 2, "B": 3, "C": 4})
rng = np.random.default_rng(0)
data = Dataset(dom, np.stack([rng.integers(0, s, 20) for s in dom.sizes], axis=1))
w = Workload.all_kway(dom, 2)
codes, _, _ = run_rap(MarginalPlan.build(w), answer(data, w), jax.random.key(0), np.arange(2),
                      RAPSettings(rows=16, steps=20, steps_per_call=20))
print(json.dumps({"folder": None if folder is None else str(folder), "codes": codes.tolist(), **compile_facts()}))
"""


def _run(env: dict) -> dict:
    out = subprocess.run([sys.executable, "-c", SNIPPET], capture_output=True, text=True, check=True,
                         env={"PATH": "", "PYTHONPATH": ROOT, "JAX_PLATFORMS": "cpu", "HOME": env.pop("HOME", "/"),
                              **env})
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_second_process_loads_the_programs_the_first_compiled(tmp_path):
    env = {"CENSUSRECON_JAX_CACHE": str(tmp_path / "cache"), "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"}
    first, second = _run(dict(env)), _run(dict(env))
    assert first["folder"] == second["folder"] == str(tmp_path / "cache")
    assert first["compiles"] > 0 and first["compile_seconds"] > 0  # compile time is counted apart
    assert first["cache_hits"] == 0 and second["cache_hits"] >= 3  # init, block, rounding (and more) loaded
    assert second["codes"] == first["codes"]  # a loaded program computes what the compiled one did
    assert any((tmp_path / "cache").iterdir())


def test_the_cache_is_bounded_and_can_be_turned_off(tmp_path):
    bounded = _run({"CENSUSRECON_JAX_CACHE": str(tmp_path / "small"), "CENSUSRECON_JAX_CACHE_MB": "0.05",
                    "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"})
    whole = _run({"CENSUSRECON_JAX_CACHE": str(tmp_path / "whole"), "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"})
    assert bounded["compiles"] == whole["compiles"] > 0

    def size(folder):
        return sum(f.stat().st_size for f in (tmp_path / folder).rglob("*") if f.is_file())

    bound = int(0.05 * (1 << 20))
    assert size("whole") > 2 * bound  # the bound had something to drop ...
    assert size("small") <= bound, (size("small"), size("whole"))  # ... and it did, least recently used first
    off = _run({"CENSUSRECON_JAX_CACHE": "off", "HOME": str(tmp_path / "home")})
    assert off["folder"] is None and off["cache_hits"] == 0
    assert not (tmp_path / "home").exists()  # nothing written under the default folder either
