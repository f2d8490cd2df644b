"""kernel: auto, the default: XLA's ops on a CPU; on a GPU the fused kernels only where they agree with XLA's ops on
one pair and run the fit's first block faster, decided once per shape and remembered. The GPU's path is run here
with the fused kernels in Pallas's interpreter (``on_gpu`` replaced) and the block's timings decided by the test."""

import logging
import os
import time

import jax
import numpy as np
import pytest

from censusrecon.microdata.dataset import Dataset
from censusrecon.microdata.domain import Domain
from censusrecon.microdata.errors import CensusReconError
from censusrecon.microdata.marginals import Workload, answer
from censusrecon.reconstruct import compile_cache, fused, kernel_choice
from censusrecon.reconstruct import rap as rap_mod
from censusrecon.reconstruct.queries import MarginalPlan
from censusrecon.reconstruct.rap import RAPSettings, rap_rank


SETTINGS = RAPSettings(rows=24, steps=6, steps_per_call=3, batch=2)


@pytest.fixture
def gpu(monkeypatch, tmp_path):
    """The GPU's path: ``auto`` measures; choices forgotten before and after; none written to disk unless a test
    turns the cache folder on."""
    monkeypatch.setattr(kernel_choice, "on_gpu", lambda: True)
    monkeypatch.setitem(compile_cache._FACTS, "cache_dir", None)
    monkeypatch.setattr(kernel_choice, "APART", False)  # checked in this process, where a test can break a kernel
    kernel_choice.forget()
    yield monkeypatch
    kernel_choice.forget()


def _timings(monkeypatch, seconds: dict):
    """The first block's seconds on each kernel, as the test says (the block still runs, in order xla, pallas)."""
    order = iter(["xla", "pallas"])
    timed = []

    def fake(fn):
        kernel = next(order)
        timed.append(kernel)
        return jax.block_until_ready(fn()), seconds[kernel]

    monkeypatch.setattr(kernel_choice, "timed", fake)
    return timed


def fit(small_census, **kw):
    plan, targets, dom = small_census
    return rap_rank(plan, targets, dom, jax.random.key(4), 2, RAPSettings(**{**SETTINGS.__dict__, **kw}))


#: on a GPU (bench/gpu.sh runs these tests there) the fused kernels are Triton's: TF32 and atomic adds in any order
REAL_GPU = jax.default_backend() == "gpu"


def test_auto_is_the_default_and_runs_xla_on_a_cpu_and_for_marginal_plans(small_census, monkeypatch):
    kernel_choice.forget()
    monkeypatch.setattr(kernel_choice, "on_gpu", lambda: False)
    monkeypatch.setattr(kernel_choice, "choose", lambda *a: pytest.fail("a CPU measures nothing"))
    assert RAPSettings().kernel == "auto"
    auto, xla = fit(small_census), fit(small_census, kernel="xla")
    assert auto.kernel == "xla" and xla.kernel == "xla"
    np.testing.assert_array_equal(auto.codes, xla.codes)
    assert {c["reason"] for c in kernel_choice.choices().values()} == {"auto on a CPU"}
    monkeypatch.setattr(kernel_choice, "on_gpu", lambda: True)  # marginals have no product rows: nothing to choose
    dom = Domain.from_sizes({"A": 2, "B": 3})
    w = Workload.all_kway(dom, 2)
    data = Dataset(dom, np.array([[0, 1], [1, 2], [1, 0]]))
    res = rap_rank(MarginalPlan.build(w), answer(data, w), dom, jax.random.key(0), 2, RAPSettings(rows=6, steps=3))
    assert res.kernel == "xla" and kernel_choice.choices()["marginal"]["reason"] == "marginal plan"
    with pytest.raises(CensusReconError, match="kernel"):
        RAPSettings(kernel="triton")
    with pytest.raises(CensusReconError, match="decided before a program is built"):
        rap_mod._program(small_census[0], SETTINGS, False)


def test_auto_on_a_gpu_keeps_the_fused_kernels_where_their_first_block_is_faster(small_census, gpu):
    timed = _timings(gpu, {"xla": 1.0, "pallas": 0.5})
    auto = fit(small_census)
    assert timed == ["xla", "pallas"] and auto.kernel == "pallas"
    (choice,) = kernel_choice.choices().values()
    assert choice["reason"] == "measured" and choice["seconds"] == {"xla": 1.0, "pallas": 0.5}
    assert choice["difference"] < (kernel_choice.TOLERANCE if REAL_GPU else 1e-4)  # float rounding
    forced = fit(small_census, kernel="pallas")
    # the fit went on from the fused kernels' first block: the same fit as one that named them
    if REAL_GPU:
        np.testing.assert_allclose(auto.final_loss, forced.final_loss, rtol=1e-3)
    else:
        np.testing.assert_array_equal(auto.codes, forced.codes)
        np.testing.assert_array_equal(auto.final_loss, forced.final_loss)
    assert fit(small_census).kernel == "pallas" and timed == ["xla", "pallas"]  # decided once per shape


def test_auto_on_a_gpu_keeps_xla_within_the_margin_and_goes_on_from_its_block(small_census, gpu):
    _timings(gpu, {"xla": 1.0, "pallas": 0.97})
    auto = fit(small_census)
    assert auto.kernel == "xla"
    np.testing.assert_array_equal(auto.codes, fit(small_census, kernel="xla").codes)


@pytest.mark.parametrize("fault", ["wrong", "raises"])
def test_auto_on_a_gpu_refuses_fused_kernels_that_disagree_or_fail_whatever_their_speed(small_census, gpu, caplog,
                                                                                        fault):
    _timings(gpu, {"xla": 1.0, "pallas": 0.1})
    answers = fused.answers

    def broken(*a, **k):
        if fault == "raises":
            raise RuntimeError("Triton: out of shared memory")
        return answers(*a, **k) * 1.02  # every answer 2% off: a wrong tile, say

    gpu.setattr(fused, "answers", broken)
    with caplog.at_level(logging.WARNING, logger=kernel_choice.__name__):
        auto = fit(small_census)
    assert auto.kernel == "xla"
    (choice,) = kernel_choice.choices().values()
    assert choice["reason"] == ("fused kernels disagree" if fault == "wrong" else "fused kernels failed")
    assert "kernel auto: xla" in caplog.text and ("relative difference" in caplog.text or "shared memory" in caplog.text)
    np.testing.assert_array_equal(auto.codes, fit(small_census, kernel="xla").codes)


def test_a_choice_is_remembered_beside_the_compiled_programs_and_keyed_by_shape(small_census, gpu, tmp_path):
    gpu.setitem(compile_cache._FACTS, "cache_dir", str(tmp_path))
    _timings(gpu, {"xla": 1.0, "pallas": 0.5})
    assert fit(small_census).kernel == "pallas"
    assert (tmp_path / kernel_choice.FILE).exists()
    kernel_choice.forget()  # a later process: read from the file, nothing measured
    gpu.setattr(kernel_choice, "timed", lambda fn: pytest.fail("remembered: nothing timed"))
    assert fit(small_census).kernel == "pallas"
    assert {c["reason"] for c in kernel_choice.choices().values()} == {"remembered"}
    plan = small_census[0]
    key = kernel_choice.shape_key(plan, SETTINGS, 2)
    assert key == kernel_choice.shape_key(plan, RAPSettings(**{**SETTINGS.__dict__, "steps": 99}), 2)
    assert key != kernel_choice.shape_key(plan, SETTINGS, 4)
    assert key != kernel_choice.shape_key(plan, RAPSettings(**{**SETTINGS.__dict__, "rows": 25}), 2)
    (tmp_path / kernel_choice.FILE).write_text("{not json")  # a damaged file: measured again, never fatal
    kernel_choice.forget()
    _timings(gpu, {"xla": 1.0, "pallas": 2.0})
    assert fit(small_census).kernel == "xla"


def test_the_check_runs_in_a_process_of_its_own_and_its_death_or_silence_is_a_failure(small_census, gpu):
    """The fused kernels are checked in a new process: a kernel that ran out of bounds on a card could leave the GPU
    unusable to its process, which must not be the run's. Here the real check runs apart (Pallas's interpreter in
    it) and its difference comes back; a process that dies, fails or does not answer is a failure, named, and the
    run goes on on XLA's ops."""
    gpu.setattr(kernel_choice, "APART", True)
    _timings(gpu, {"xla": 1.0, "pallas": 0.5})
    answers = fused.answers  # broken in this process only: the check, apart, never sees it
    gpu.setattr(fused, "answers", lambda *a, **k: answers(*a, **k) * 1.02)
    assert fit(small_census).kernel == "pallas"
    gpu.setattr(fused, "answers", answers)
    (choice,) = kernel_choice.choices().values()
    assert 0 < choice["difference"] < 1e-4  # computed in the check's process, returned here
    with pytest.raises(kernel_choice.CheckFailed, match="exit code 7 before answering"):
        kernel_choice.run_apart(os._exit, (7,), 60)
    with pytest.raises(kernel_choice.CheckFailed, match="ValueError"):
        kernel_choice.run_apart(int, ("seven",), 60)
    with pytest.raises(kernel_choice.CheckFailed, match="no answer within 1 s"):
        kernel_choice.run_apart(time.sleep, (30,), 1)
    gpu.setattr(kernel_choice, "check_kernels", lambda *a: kernel_choice.run_apart(os._exit, (9,), 60))
    kernel_choice.forget()
    assert fit(small_census).kernel == "xla"  # the run goes on, on XLA's ops
    (choice,) = kernel_choice.choices().values()
    assert choice["reason"] == "fused kernels failed" and "exit code 9" in choice["detail"]
