"""The relaxed dataset: n' rows, each a per-attribute softmax over logits; and its rounding.

Layout: feature-major. The logits of a relaxed dataset are ONE array of shape (W, n'), W the
one-hot width, with the attributes stacked in the plan's ``order`` (a permutation of the
domain's attributes: marginal plans sort them by size so the largest never enters a row-wise
product). Feature-major keeps every contraction of the hot loop a plain matmul whose
contracted axis is n', the layout fast matmul paths accept without a transpose.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np


@dataclass(frozen=True)
class Layout:
    """Which rows of the (W, n') logits belong to which attribute."""

    sizes: tuple[int, ...]  # domain order
    order: tuple[int, ...]  # order[p] = domain position of the p-th stacked attribute

    @classmethod
    def of(cls, sizes: Sequence[int], order: Sequence[int] | None = None) -> "Layout":
        sizes = tuple(int(s) for s in sizes)
        order = tuple(range(len(sizes))) if order is None else tuple(int(i) for i in order)
        if sorted(order) != list(range(len(sizes))):
            raise ValueError(f"order {order} is not a permutation of {len(sizes)} attributes")
        return cls(sizes, order)

    @property
    def width(self) -> int:
        return int(sum(self.sizes))

    @property
    def stacked_sizes(self) -> tuple[int, ...]:
        return tuple(self.sizes[i] for i in self.order)

    @property
    def offsets(self) -> tuple[int, ...]:
        """Start row of each stacked attribute (length d + 1)."""
        return tuple(int(x) for x in np.concatenate([[0], np.cumsum(self.stacked_sizes)]))

    def rows_of(self, attr: int) -> slice:
        """The rows of domain attribute ``attr``."""
        p = self.order.index(attr)
        off = self.offsets
        return slice(off[p], off[p + 1])


    @property
    def equal_size_runs(self) -> tuple[tuple[int, int, int], ...]:
        """(first row, count, size) of each run of adjacent stacked attributes of equal size:
        a run is reshaped to (count, size, n') so one op normalises all its attributes (per-op
        overhead, not arithmetic, bounds these small reductions on a CPU)."""
        out: list[list[int]] = []
        row = 0
        for s in self.stacked_sizes:
            if out and out[-1][2] == s:
                out[-1][1] += 1
            else:
                out.append([row, 1, s])
            row += s
        return tuple(tuple(r) for r in out)


def _segments(layout: Layout):
    """Constants of the segment softmax: each row's attribute, and the (d × W) 0/1 matrix whose
    product with a (W × n') array sums each attribute's rows (one small matmul, where d
    separate reductions would cost d kernel launches and their passes over memory)."""
    seg = np.repeat(np.arange(len(layout.sizes)), layout.stacked_sizes)
    member = (np.arange(len(layout.sizes))[:, None] == seg[None, :]).astype(np.float32)
    return seg, member


def _segment_max(logits: jax.Array, layout: Layout) -> jax.Array:
    """(d × n') per-attribute maxima, one reduction per run of equal-size attributes."""
    n = logits.shape[-1]
    parts = [jnp.max(logits[lo:lo + count * size].reshape(count, size, n), axis=1)
             for lo, count, size in layout.equal_size_runs]
    return parts[0] if len(parts) == 1 else jnp.concatenate(parts, axis=0)


def probabilities(logits: jax.Array, layout: Layout, centred: bool = False) -> jax.Array:
    """Per-attribute softmax down each column: (W, n') probabilities, each column a relaxed row.

    Written with its gradient by hand: stabilised by each attribute's maximum, normalised by
    per-attribute sums taken as one small matmul; backward P ⊙ (dP − segment sums of P ⊙ dP).
    ``centred=True`` skips the maxima: only for logits kept within a few tens of zero by
    :func:`recentre` (the RAP loop does), where exp cannot overflow and each attribute's
    largest term is at least e^-tens."""
    return _softmax(layout, centred)(logits)


def recentre(logits, layout: Layout):
    """Shift each attribute's logits so its maximum is 0 (the softmax, hence every answer and
    gradient, is unchanged: a softmax does not see a per-attribute shift). ``logits`` is the stacked
    (W, n') array or a per-attribute state (:func:`split`), returned in the same form."""
    if isinstance(logits, tuple):
        return tuple(x - jnp.max(x, axis=0, keepdims=True) for x in logits)
    seg = jnp.asarray(_segments(layout)[0])
    return logits - _segment_max(logits, layout)[seg]


def split(logits: jax.Array, layout: Layout) -> tuple[jax.Array, ...]:
    """The stacked (W, n') array as a per-attribute state: one (size × n') array per stacked attribute. A step
    that reads each attribute apart (the census plan's) then never reads a slice of the whole array: XLA counts,
    and on some backends moves, the whole operand of every op that slices it."""
    off = layout.offsets
    return tuple(logits[off[p]:off[p + 1]] for p in range(len(layout.sizes)))


def stacked(state) -> jax.Array:
    """The stacked (W, n') array of a state in either form (see :func:`split`)."""
    return jnp.concatenate(state, axis=0) if isinstance(state, tuple) else state


def softmax_parts(logits: tuple[jax.Array, ...]) -> tuple[jax.Array, ...]:
    """The softmax of each attribute's recentred (size × n') logits (see :func:`recentre`: no maxima needed)."""
    out = []
    for x in logits:
        e = jnp.exp(x)
        out.append(e * (1.0 / jnp.sum(e, axis=0, keepdims=True)))
    return tuple(out)


def softmax_parts_backward(p: Sequence[jax.Array], g: Sequence[jax.Array]) -> tuple[jax.Array, ...]:
    """The per-attribute softmax's vector-Jacobian product, P ⊙ (dP − column sums of P ⊙ dP), float32."""
    out = []
    for pa, ga in zip(p, g):
        pa = pa.astype(jnp.float32)
        pg = pa * ga
        out.append(pg - pa * jnp.sum(pg, axis=0, keepdims=True))
    return tuple(out)


def softmax_forward(logits: jax.Array, layout: Layout, centred: bool = False) -> jax.Array:
    """The per-attribute softmax as a plain float32 expression (see :func:`probabilities`)."""
    seg_np, member_np = _segments(layout)
    member, seg = jnp.asarray(member_np), jnp.asarray(seg_np)
    shifted = logits if centred else logits - jax.lax.stop_gradient(_segment_max(logits, layout))[seg]
    e = jnp.exp(shifted)
    return e * (1.0 / (member @ e))[seg]


def softmax_backward(p: jax.Array, g: jax.Array, layout: Layout) -> jax.Array:
    """The softmax's vector-Jacobian product: P ⊙ (dP − segment sums of P ⊙ dP), in float32.
    ``p`` may be stored in a narrower dtype (a bfloat16 hot loop keeps only that copy)."""
    seg_np, member_np = _segments(layout)
    p = p.astype(jnp.float32)
    # P ⊙ dP once, read by the segment sums and the result: dP (the answers' cotangent, assembled
    # from per-attribute pieces) then has one reader and is fused into it, not written out
    pg = p * g
    return pg - p * (jnp.asarray(member_np) @ pg)[jnp.asarray(seg_np)]


@functools.lru_cache(maxsize=64)  # per (layout, centred); bounded
def _softmax(layout: Layout, centred: bool):
    @jax.custom_vjp
    def softmax(logits):
        return softmax_forward(logits, layout, centred)

    def fwd(logits):
        p = softmax_forward(logits, layout, centred)
        return p, p

    def bwd(p, g):
        return (softmax_backward(p, g, layout),)

    softmax.defvjp(fwd, bwd)
    return softmax


def random_logits(key: jax.Array, rows: int, layout: Layout) -> jax.Array:
    """A random relaxed dataset: standard normal logits (no prior information)."""
    return jax.random.normal(key, (layout.width, rows), jnp.float32)


def logits_from_codes(codes: jax.Array, layout: Layout, confidence: float) -> jax.Array:
    """A relaxed dataset centred on the given rows (n', d codes in domain order): each row puts
    ``confidence`` (plus its share of the rest) on its own value. ``confidence=1`` is the one-hot
    embedding of the rows."""
    out = []
    for i in layout.order:
        s = layout.sizes[i]
        p = confidence * jax.nn.one_hot(codes[:, i], s, dtype=jnp.float32, axis=0) + (1.0 - confidence) / s
        out.append(jnp.log(p))
    return jnp.concatenate(out, axis=0)


def draw_rows(key: jax.Array, rows: int, draws: int) -> jax.Array:
    """Which relaxed row each of ``draws`` draws rounds: every row floor(draws/rows) times, then
    draws mod rows distinct rows chosen at random (the paper code's sampling)."""
    full, extra = divmod(draws, rows)
    parts = [jnp.tile(jnp.arange(rows), full)] if full else []
    if extra:
        parts.append(jax.random.permutation(key, rows)[:extra])
    return jnp.concatenate(parts)


def round_relaxed(key: jax.Array, logits: jax.Array, layout: Layout, draws: int | None = None) -> jax.Array:
    """Randomised rounding: each relaxed row becomes one row (``draws=None``), or ``draws`` rows
    are drawn from the relaxed rows (see :func:`draw_rows`); each attribute of a drawn row comes
    from its softmax independently. Returns (n' or draws, d) int32 codes in domain order."""
    if draws is not None:
        key, pick = jax.random.split(key)
        logits = logits[:, draw_rows(pick, logits.shape[1], draws)]
    keys = jax.random.split(key, len(layout.sizes))
    cols = [None] * len(layout.sizes)
    for i in range(len(layout.sizes)):
        cols[i] = jax.random.categorical(keys[i], logits[layout.rows_of(i)], axis=0)
    return jnp.stack(cols, axis=1).astype(jnp.int32)
