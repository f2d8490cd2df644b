"""The relaxed dataset: n' rows, each a per-attribute softmax over logits; and its rounding."""

from __future__ import annotations

from typing import Sequence

import jax
import jax.numpy as jnp


def probabilities(logits: Sequence[jax.Array]) -> list[jax.Array]:
    """Per-attribute row probabilities (n' × |attribute|) of a relaxed dataset."""
    return [jax.nn.softmax(l, axis=-1) for l in logits]


def random_logits(key: jax.Array, rows: int, sizes: Sequence[int]) -> tuple[jax.Array, ...]:
    """A random relaxed dataset: standard normal logits (no prior information)."""
    keys = jax.random.split(key, len(sizes))
    return tuple(jax.random.normal(keys[i], (rows, s), jnp.float32) for i, s in enumerate(sizes))


def logits_from_codes(codes: jax.Array, sizes: Sequence[int], confidence: float) -> tuple[jax.Array, ...]:
    """A relaxed dataset centred on the given rows: each row puts ``confidence`` (plus its share
    of the rest) on its own value. ``confidence=1`` is the one-hot embedding of the rows."""
    out = []
    for i, s in enumerate(sizes):
        p = confidence * jax.nn.one_hot(codes[:, i], s, dtype=jnp.float32) + (1.0 - confidence) / s
        out.append(jnp.log(p))
    return tuple(out)


def round_relaxed(key: jax.Array, logits: Sequence[jax.Array]) -> jax.Array:
    """Randomised rounding: each relaxed row becomes one row, each attribute drawn from its
    softmax independently. Returns (n', d) int32 codes."""
    keys = jax.random.split(key, len(logits))
    cols = [jax.random.categorical(keys[i], l, axis=-1) for i, l in enumerate(logits)]
    return jnp.stack(cols, axis=1).astype(jnp.int32)
