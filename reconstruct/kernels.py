"""The matmul kernels both query plans run on: bfloat16 operands only where the backend runs them right, float32 sums."""

from __future__ import annotations

import functools
import logging

import jax
import jax.numpy as jnp
import numpy as np

log = logging.getLogger(__name__)

DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}


_BF16_OK: dict = {}


def usable_dtype(requested: str) -> str:
    """``requested`` if this backend runs it correctly, else float32 (with a warning).

    bfloat16 operands with float32 accumulation are checked once per backend by running a
    small matmul of integers and comparing it exactly: some CPU builds compile such a matmul
    and then fail at run time."""
    if requested == "float32":
        return "float32"
    backend = jax.default_backend()
    if backend not in _BF16_OK:
        try:
            a = np.arange(64 * 48, dtype=np.float32).reshape(64, 48) % 7
            b = np.arange(48 * 32, dtype=np.float32).reshape(48, 32) % 5
            got = jax.jit(lambda x, y: plan_dot(x, y, jnp.bfloat16))(a, b)
            _BF16_OK[backend] = bool(np.array_equal(np.asarray(got), a @ b))
        except Exception as exc:  # noqa: BLE001 - any failure means: do not use it
            log.warning("bfloat16 matmul failed on %s (%s)", backend, exc)
            _BF16_OK[backend] = False
        if not _BF16_OK[backend]:
            log.warning("bfloat16 matmuls are not usable on %s; using float32", backend)
    return requested if _BF16_OK[backend] else "float32"


def plan_dot(a, b, dtype):
    """a @ b with operands in ``dtype`` and float32 accumulation/result."""
    return jnp.matmul(a.astype(dtype), b.astype(dtype), preferred_element_type=jnp.float32)


def dot_t(a, b, dtype):
    """a @ b.T (contracting the n' axis of both), float32 result."""
    return jax.lax.dot_general(a.astype(dtype), b.astype(dtype), (((1,), (1,)), ((), ())),
                               preferred_element_type=jnp.float32)


def block_answers(L, R, dtype):
    """A census part's (left rows × right rows) block L · Rᵀ: the taller side is the matmul's first
    operand, so that it is read in the layout the backward's matmul reads it in (not transposed
    twice)."""
    return dot_t(R, L, dtype).T if R.shape[0] > L.shape[0] else dot_t(L, R, dtype)


class DenseAnswers:
    """What both query plans give the host about their dense output: ``dense_size`` values of which those at
    ``dense_index`` are the workload's queries, in order (the rest are by-products)."""

    @functools.cached_property
    def dense_mask(self) -> np.ndarray:
        m = np.zeros(self.dense_size, np.float32)
        m[self.dense_index] = 1.0
        return m

    def state_of(self, logits):
        """The form a RAP fit keeps its (W × n') logits in for this plan: as they are (a plan may split them, see
        :meth:`reconstruct.product_plan.ProductPlan.state_of`)."""
        return logits

    def dense_targets(self, targets) -> np.ndarray:
        t = np.zeros(self.dense_size, np.float32)
        t[self.dense_index] = np.asarray(targets, dtype=np.float32)
        return t
