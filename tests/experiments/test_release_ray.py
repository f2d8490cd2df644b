"""evaluate-release on Ray: each unit a task through the same per-unit step as the local backend, and each
(BLOCK variant, ε) of the audit a task too; a worker killed mid-run costs its unit a rerun and nothing else, and
the verdict and the audit are the local backend's."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

SETS = ["target.units=4", "release.mechanisms=[laplace_tables, cell_key]", "release.epsilons=[1.0, 4.0]",
        "release.cell_key.variances=[1.0]", "release.audit.runs=2000", "release.audit.seed=1", "release.risks=false",
        "sweep.num_cpus=2"]


def _cmd(root: Path, out: Path, backend: str) -> list[str]:
    cmd = [sys.executable, "-m", "censusrecon.experiments.cli", "evaluate-release", str(root / "configs" / "release_tiny.yaml"),
           "--backend", backend, "--out", str(out), "--no-progress"]
    for s in SETS:
        cmd += ["--set", s]
    return cmd


def _workers(task: str = "unit_task") -> list[int]:
    """The Ray workers running ``task`` now (Ray names a task's process ray::<function>)."""
    out = subprocess.run(["pgrep", "-f", f"ray::{task}"], capture_output=True, text=True)
    return [int(p) for p in out.stdout.split()]


def test_a_killed_ray_worker_costs_one_unit_and_the_verdict_is_the_local_one(tmp_path, root):
    pytest.importorskip("ray")
    proc = subprocess.Popen(_cmd(root, tmp_path / "ray", "ray"), cwd=root, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    killed = None
    try:
        deadline = time.time() + 240
        while time.time() < deadline and proc.poll() is None and killed is None:
            workers = _workers()
            if workers:
                time.sleep(1.0)  # well inside its unit: started, nothing written yet
                os.kill(workers[0], signal.SIGKILL)
                killed = workers[0]
            time.sleep(0.05)
        audited = set()  # the audit's jobs as Ray tasks of their own
        while time.time() < deadline + 360 and proc.poll() is None:
            audited |= set(_workers("audit_task"))
            time.sleep(0.05)
        out, err = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        subprocess.run([str(Path(sys.executable).parent / "ray"), "stop", "--force"], capture_output=True, timeout=60)
    assert killed is not None, "no Ray worker was seen evaluating a unit"
    assert audited, "no Ray worker was seen auditing"
    local = subprocess.run(_cmd(root, tmp_path / "local", "local"), cwd=root, capture_output=True, text=True,
                           timeout=600)
    assert proc.returncode == local.returncode, err[-3000:]
    decided = [json.loads(p.read_text()) for p in sorted(tmp_path.glob("*/release_tiny/*/release/decision.json"))]
    assert len(decided) == 2 and decided[0]["lines"] == decided[1]["lines"]
    assert decided[0]["mechanisms"] == decided[1]["mechanisms"]
    units = sorted((tmp_path / "ray").glob("release_tiny/*/release/units/*.json"))
    assert len(units) == 4  # every unit evaluated once it was retried
    audits = [json.loads(p.read_text()) for p in sorted(tmp_path.glob("*/release_tiny/*/release/audit.json"))]
    same = [{k: a[k] for k in ("mechanism", "declared_epsilon", "epsilon_lower_bound", "checks")} for a in audits[0]]
    assert len(same) == 2 and same == [{k: a[k] for k in same[0]} for a in audits[1]]  # the DP one × 2 ε
