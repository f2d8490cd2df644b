"""The model-based noise checks of the auditor on hand-made draws with known answers."""

import math

import numpy as np

from synth.audit import clipped_upper_excess, geometric_scale_upper, geometric_shape_pvalue, laplace_shape_pvalue


def test_clipped_upper_excess_keeps_only_draws_the_clip_never_touched():
    # true count 2: outputs 0, 0, 1, 2, 3, 5 are noise -2 (clipped), -2, -1, 0, 1, 3; kept X >= 0
    assert clipped_upper_excess(np.array([0, 0, 1, 2, 3, 5]), 2).tolist() == [0, 1, 3]
    # true count 0: an output 0 may be any X <= 0, so only X >= 1 is exact, kept as X - 1
    assert clipped_upper_excess(np.array([0, 0, 2, 1, 4]), 0).tolist() == [1, 0, 3]


def _discrete_laplace(rng, t, n):
    r = math.exp(-1 / t)
    return rng.geometric(1 - r, n) - rng.geometric(1 - r, n)  # difference of two geometrics on {0, 1, ...}


def test_the_upper_side_recovers_the_scale_and_accepts_laplace_clipped_at_zero():
    rng = np.random.default_rng(0)
    t, count = 4.0, 3
    outputs = np.maximum(count + _discrete_laplace(rng, t, 400_000), 0)
    g = clipped_upper_excess(outputs, count)
    upper = geometric_scale_upper(g, 0.999)
    assert t <= upper <= 1.02 * t  # an upper bound, and a tight one at this many draws
    assert geometric_shape_pvalue(g) > 1e-3


def test_the_upper_side_rejects_uniform_and_truncated_noise():
    rng = np.random.default_rng(1)
    t, count, n = 4.0, 3, 400_000
    uniform = rng.integers(-12, 13, n)  # bounded noise
    lap = _discrete_laplace(rng, t, n)
    truncated = np.clip(lap, -8 * t, 8 * t)
    for noise in (uniform, truncated):
        g = clipped_upper_excess(np.maximum(count + noise, 0), count)
        assert geometric_shape_pvalue(g) < 1e-6
    assert laplace_shape_pvalue(lap) > 1e-3 and laplace_shape_pvalue(uniform) < 1e-6
