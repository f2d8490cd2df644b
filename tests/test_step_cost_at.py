"""bench/step_cost_at.py, which counts a compiled step's bytes for any checkout and for a GPU with none here: its
count of a compiled module read back from the module's text must be XLA's own count of that module (the GPU's
count is made that way), and a GPU count without the plugin must stop with what to run."""

import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from step_cost_at import analyse_hlo  # noqa: E402


def test_the_count_of_a_module_read_back_from_its_text_is_xlas_own():
    def f(a, b):  # a matmul, fused elementwise work and a reduction: the kinds of op the step is made of
        return jnp.sum(jnp.exp(a) @ b, axis=0) + jnp.max(b, axis=0)

    compiled = jax.jit(f).lower(jnp.ones((64, 48)), jnp.ones((48, 64))).compile()
    own = compiled.cost_analysis()
    own = own[0] if isinstance(own, (list, tuple)) else own
    got = analyse_hlo(compiled.as_text())
    assert got["bytes accessed"] == pytest.approx(own["bytes accessed"]) and own["bytes accessed"] > 64 * 48 * 4
    assert got["flops"] == pytest.approx(own["flops"]) and own["flops"] >= 2 * 64 * 48 * 64


def test_a_gpu_count_without_the_plugin_says_what_to_run(tmp_path):
    script = tmp_path / "bench" / "step_cost_at.py"  # a copy of the bench beside no .gpucount
    script.parent.mkdir()
    script.write_text((ROOT / "bench" / "step_cost_at.py").read_text())
    (script.parent / "gpu_targets").mkdir()
    (script.parent / "gpu_targets" / "h100.txtpb").write_text((ROOT / "bench" / "gpu_targets" / "h100.txtpb").read_text())
    out = subprocess.run([sys.executable, str(script), "--gpu", "h100", str(ROOT)], capture_output=True, text=True)
    assert out.returncode != 0 and "make gpu-count-env" in out.stderr


def test_a_custom_call_is_counted_as_its_operands_and_outputs():
    """XLA's analysis counts a custom call (here LAPACK's Cholesky factorisation, on the CPU; a Pallas kernel on a
    GPU) as moving no bytes: the count adds its operands and outputs, once each."""
    from step_cost_at import custom_call_bytes

    compiled = jax.jit(jnp.linalg.cholesky).lower(jnp.eye(64)).compile()
    text = compiled.as_text()
    assert "custom-call(" in text
    assert custom_call_bytes(text) >= 2 * 64 * 64 * 4
    own = compiled.cost_analysis()
    own = own[0] if isinstance(own, (list, tuple)) else own
    assert analyse_hlo(text)["bytes accessed"] == pytest.approx(own["bytes accessed"] + custom_call_bytes(text))
    assert custom_call_bytes(jax.jit(lambda a: a * 2).lower(jnp.ones(8)).compile().as_text()) == 0
    from step_cost_at import analyse_compiled  # a program with an analysis of its own: it, plus the custom calls

    assert analyse_compiled(compiled)["bytes accessed"] == pytest.approx(own["bytes accessed"] + custom_call_bytes(text))
