"""bench/gpu.sh, the GPU check, run dry here: the same script, the same offline install of the carried wheels
into an environment holding only what the GPU machine has (.venv-gpu-dry, made by make test), its stages on the
CPU at small sizes. Sessions lent the GPU are rare: the script must not rot between them."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import environment

ROOT = Path(__file__).resolve().parents[1]
VENV = ROOT / ".venv-gpu-dry"


def _machine_pin(name: str) -> str:
    for line in (ROOT / "bench" / "gpu_machine.txt").read_text().splitlines():
        if line.startswith(f"{name}=="):
            return line.split("==")[1]
    raise AssertionError(f"{name} is not pinned in bench/gpu_machine.txt")


def _gpu_check(out: Path, *args: str, **env: str) -> tuple[subprocess.CompletedProcess, list[dict]]:
    environment(VENV / ".installed", "make test makes it (make gpu-dry-env), with the GPU machine's packages",
                required=True)
    scratch = out / "tmp"
    scratch.mkdir()
    run = subprocess.run(["bash", "bench/gpu.sh", *args], cwd=ROOT, capture_output=True, text=True, timeout=600,
                         env={**os.environ, "OUT": str(out), "TMPDIR": str(scratch), **env})
    lines = [json.loads(x) for x in (out / "gpu.jsonl").read_text().splitlines()]
    # its install (about 300 MB) and its runs are removed however it ends, a refusal included
    assert not list(scratch.glob("censusrecon-gpu*")), sorted(p.name for p in scratch.iterdir())
    return run, lines


def test_the_gpu_check_runs_dry_as_it_will_on_the_gpu_machine(tmp_path):
    run, lines = _gpu_check(tmp_path, "--dry-run")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    figures = {k: v for line in lines for k, v in line.items()}
    env = figures["environment"]
    if env["python"].startswith("3.12"):  # the GPU machine's Python: its very JAX (without 3.12 here, the newest)
        assert env["jax"] == _machine_pin("jax")
    assert env["unimportable"] == {}  # every module imports with the machine's packages and the carried wheels
    assert env["versions"]["censusrecon"] is not None  # the project installed, offline, without its dependencies
    assert figures["tests_rc"] == 0 and figures["tests"] > 0 and figures["failures"] == figures["errors"] == 0
    assert figures["bench_rc"] == 0
    for name in ("peak_gflops", "rap_rank_2way_s", "units_seconds", "step_census_per_s", "step_census85_bytes_accessed",
                 "step_census_frac_memory_floor", "state_tracts_per_s", "step_census85_pallas_per_s"):
        assert figures[name] > 0, name
    # the fused kernels' part (in Pallas's interpreter here) against the XLA step: the same fit to float rounding
    assert figures["step_census85_pallas_codes_equal_share"] > 0.9
    assert figures["step_census85_pallas_final_loss_rel_diff"] < 1e-3
    assert figures["state_rc"] == 0 and figures["state_tracts"] == 4
    # the state's kernels as a run picks them (auto): XLA's ops on a CPU, decided without running anything
    assert figures["state_kernel"] == "auto" and figures["state_kernel_ran"] == "xla"
    assert {c["reason"] for c in figures["state_kernel_choices"]} == {"auto on a CPU"} and figures["state_choose_s"] == 0
    assert figures["profile_where"] == "XLA CPU threads' ops" and len(figures["profile_top"]) > 3  # a GPU: its kernels
    # the record a session commits from it: every figure, the machine as the check found it
    records = tmp_path / "records"
    records.mkdir()
    made = subprocess.run([sys.executable, "bench/record.py", "gpu", str(tmp_path), "--as", "gpu_dry", "--dir",
                           str(records)], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert made.returncode == 0, made.stderr
    record = json.loads((records / "gpu_dry.json").read_text())
    assert record["machine"]["jax"] == env["jax"] and record["machine"]["devices"] == len(env["devices"])
    assert record["figures"]["step_census85_bytes_accessed"] == figures["step_census85_bytes_accessed"]
    assert record["figures"]["commit"] in record["provenance"] and "environment" not in record["figures"]
    # each figure was appended as it was measured: the bench's lie between its start and its end
    order = [next(iter(line)) for line in lines]
    assert order.index("install_s") < order.index("peak_gflops") < order.index("units_seconds") < order.index("bench_rc")
    assert figures["tracts_2010_complete"] and figures["tracts_2010_units_done"] == 1
    assert (tmp_path / "tracts_2010_match_rate.png").stat().st_size > 0


def test_the_gpu_check_refuses_clearly_where_jax_sees_no_gpu(tmp_path):
    run, lines = _gpu_check(tmp_path, GPU_PYTHON=str(VENV / "bin" / "python"),
                            GPU_WHEELS=(VENV / "wheels").read_text().strip() if (VENV / "wheels").exists() else ".whl")
    assert run.returncode == 3
    assert lines[-1] == {"refused": "JAX sees no GPU on this machine: nothing measured"}
    assert "sees no GPU" in run.stderr
    assert not any("tests_rc" in line or "peak_gflops" in line for line in lines)
