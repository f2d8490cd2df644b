"""Discrete Laplace noise on int64 counts: a fast seeded sampler for simulation, OpenDP's for publication."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from censusrecon.synth.mechanism import PrivacyError, check_counts, check_scale, checked_add, laplace_scale


class NoiseBackend(Protocol):
    name: str
    for_publication: bool

    def sample(self, scale: float, size: int) -> np.ndarray: ...

    def add(self, counts: np.ndarray, scale: float) -> np.ndarray: ...


def discrete_laplace_pmf(x: np.ndarray, scale: float) -> np.ndarray:
    """P(X = x) = tanh(1/(2t)) · exp(-|x|/t) for the discrete Laplace with scale t."""
    x = np.asarray(x, dtype=np.float64)
    return math.tanh(1.0 / (2.0 * scale)) * np.exp(-np.abs(x) / scale)


@dataclass
class SimulationNoise:
    """Fast, seeded, vectorised discrete Laplace: the difference of two i.i.d. geometric counts.

    Not for publication: numpy's generator is not a cryptographic source and its
    geometric sampler goes through floating point. The ledger and the report say so.
    """

    seed: int | np.random.Generator
    name: str = "simulation (numpy, seeded; not for publication)"
    for_publication: bool = False

    def __post_init__(self) -> None:
        self._rng = self.seed if isinstance(self.seed, np.random.Generator) else np.random.default_rng(self.seed)

    def sample(self, scale: float, size: int) -> np.ndarray:
        p = -math.expm1(-1.0 / check_scale(scale))  # success probability 1 - e^{-1/t}
        g1 = self._rng.geometric(p, size=size).astype(np.int64)
        g2 = self._rng.geometric(p, size=size).astype(np.int64)
        return g1 - g2

    def add(self, counts: np.ndarray, scale: float) -> np.ndarray:
        counts = check_counts(counts)
        return checked_add(counts, self.sample(scale, counts.size).reshape(counts.shape))

    def sample_gaussian(self, sigma: float, size: int) -> np.ndarray:
        """Discrete Gaussian draws N_Z(0, σ²) by rejection from the discrete Laplace with scale
        t = ⌊σ⌋ + 1 (Canonne, Kamath and Steinke 2020, Algorithm 3), vectorised."""
        sigma = check_scale(sigma)
        t = math.floor(sigma) + 1
        out, have = np.empty(int(size), dtype=np.int64), 0
        while have < size:
            n = int(1.3 * (size - have)) + 64
            y = self.sample(t, n)
            keep = self._rng.random(n) < np.exp(-((np.abs(y) - sigma**2 / t) ** 2) / (2 * sigma**2))
            y = y[keep][: size - have]
            out[have:have + len(y)] = y
            have += len(y)
        return out

    def add_gaussian(self, counts: np.ndarray, sigma: float) -> np.ndarray:
        counts = check_counts(counts)
        return checked_add(counts, self.sample_gaussian(sigma, counts.size).reshape(counts.shape))


@dataclass
class OpenDPNoise:
    """OpenDP's vetted discrete Laplace on integer vectors (exact, no floating-point attack surface).

    Needs the optional extra (``pip install 'censusrecon[dp]'``) and OpenDP's ``contrib``
    features, which this backend enables and records. It takes no seed: a reproducible
    publication is not a private one.
    """

    name: str = "opendp"
    for_publication: bool = True

    def __init__(self, seed=None) -> None:
        if seed is not None:
            raise PrivacyError("the OpenDP backend refuses a seed: seeded noise is not fit for publication")
        try:
            import opendp.prelude as dp
        except ImportError:
            raise PrivacyError("OpenDP is not installed: pip install 'censusrecon[dp]'") from None
        dp.enable_features("contrib")
        self._dp = dp
        self.name = "opendp"
        self.for_publication = True
        from importlib.metadata import version

        self.version = version("opendp")
        self.contrib = True

    def _measurement(self, scale: float):
        dp = self._dp
        return dp.m.make_laplace(dp.vector_domain(dp.atom_domain(T="i64")), dp.l1_distance(T="i64"), scale=float(scale))

    def privacy_map(self, scale: float, sensitivity: int) -> float:
        """OpenDP's own ε for L1 sensitivity ``sensitivity`` at this scale (its privacy map)."""
        return float(self._measurement(check_scale(scale)).map(int(sensitivity)))

    def sample(self, scale: float, size: int) -> np.ndarray:
        return np.asarray(self._measurement(check_scale(scale))([0] * int(size)), dtype=np.int64)

    def _gaussian(self, sigma: float):
        dp = self._dp
        return dp.m.make_gaussian(dp.vector_domain(dp.atom_domain(T="i64")), dp.l2_distance(T="i64"),
                                  scale=float(sigma))

    def gaussian_rho_map(self, sigma: float, l2_sensitivity: int) -> float:
        """OpenDP's own ρ (zero-concentrated DP) for an integer L2 sensitivity at this σ."""
        return float(self._gaussian(check_scale(sigma)).map(int(l2_sensitivity)))

    def add_gaussian(self, counts: np.ndarray, sigma: float) -> np.ndarray:
        """OpenDP's discrete Gaussian N_Z(0, σ²) on integer vectors."""
        counts = check_counts(counts)
        out = np.asarray(self._gaussian(check_scale(sigma))(counts.reshape(-1).tolist()), dtype=np.int64)
        return out.reshape(counts.shape)

    def add(self, counts: np.ndarray, scale: float) -> np.ndarray:
        counts = check_counts(counts)
        out = np.asarray(self._measurement(check_scale(scale))(counts.reshape(-1).tolist()), dtype=np.int64)
        return out.reshape(counts.shape)


def noise_scale(sensitivity: int, epsilon: float, backend) -> tuple[float, float | None]:
    """The scale to release with: Δ/ε rounded up in floating point (:func:`laplace_scale`) and,
    when the backend has a privacy map (OpenDP's), rounded up further until that map gives at
    most ε too. Returns (scale, the backend's own ε figure or None)."""
    scale = laplace_scale(sensitivity, epsilon)
    if not hasattr(backend, "privacy_map"):
        return scale, None
    delta = max(int(sensitivity), 1)
    for _ in range(1000):
        figure = backend.privacy_map(scale, delta)
        if figure <= epsilon:
            return scale, figure
        scale = float(np.nextafter(scale, np.inf))
    raise PrivacyError(f"no scale near {scale} makes {backend.name}'s privacy map <= {epsilon}")


def make_backend(kind: str, seed: int | None = None):
    if kind == "simulation":
        if seed is None:
            raise PrivacyError("the simulation backend needs a seed (it is for reproducible studies)")
        return SimulationNoise(seed)
    if kind == "opendp":
        return OpenDPNoise(seed)
    raise PrivacyError(f"unknown noise backend {kind!r}; use 'simulation' or 'opendp'")
