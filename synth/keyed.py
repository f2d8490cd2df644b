"""Counter-based noise: every draw is a pure function of (key, release, stream, cell), so any cell of any release
can be drawn alone and equals the same cell of the whole release.

This is what lets the auditor check exactly the call that publishes: a whole release and the few cells a
pair of neighbours touches, drawn for 50,000 releases, come from one function with one key schedule
(a test shows the cells equal the whole release's). The random words are JAX's Threefry-2x32, a
counter-based generator (Salmon et al. 2011): release r of a key is ``fold_in(key, r)``, its stream s
(one measurement: a level and query of TopDown, the tables of a unit) ``fold_in(·, s)``, and cell c's
words ``bits(fold_in(·, c))``. Discrete Laplace noise with scale t is G₁ − G₂, each G = ⌊−t·log U⌋
(a geometric count of failures, P(G ≥ k) = e^{−k/t}) from a 53-bit uniform U; the discrete Gaussian
is Canonne, Kamath and Steinke's (2020) rejection from the discrete Laplace, each attempt keyed by
its index.

Like :class:`synth.noise.SimulationNoise` it is for studies and audits, not for publication: the
logarithm goes through floating point (the OpenDP backend publishes).
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from censusrecon.synth.mechanism import PrivacyError, check_counts, check_scale, checked_add

#: Cells drawn per compiled call (padded to a power of two, so few shapes are compiled).
CHUNK = 1 << 21


@lru_cache(maxsize=16)  # per draw width: a few
def _words_fn(words: int):
    import jax
    import jax.numpy as jnp

    def fn(seed, releases, stream, attempt, cells):
        base = jax.random.key(seed)

        def one_release(r):
            key = jax.random.fold_in(jax.random.fold_in(jax.random.fold_in(base, r), stream), attempt)

            return jax.vmap(lambda c: jax.random.bits(jax.random.fold_in(key, c), (words,), jnp.uint32))(cells)

        return jax.vmap(one_release)(releases)

    return jax.jit(fn)


@lru_cache(maxsize=16)
def _flat_fn(words: int):
    """The same words as :func:`_words_fn`, for (release, cell) pairs listed one by one."""
    import jax
    import jax.numpy as jnp

    def fn(seed, releases, stream, attempt, cells):
        base = jax.random.key(seed)

        def one(r, c):
            key = jax.random.fold_in(jax.random.fold_in(jax.random.fold_in(base, r), stream), attempt)
            return jax.random.bits(jax.random.fold_in(key, c), (words,), jnp.uint32)

        return jax.vmap(one)(releases, cells)

    return jax.jit(fn)


def _uniforms(w: np.ndarray) -> np.ndarray:
    """53-bit uniforms in (0, 1) from pairs of 32-bit words (the last axis, read as 64-bit words)."""
    x = np.ascontiguousarray(w).view(np.uint64) >> np.uint64(11)
    return (x.astype(np.float64) + 0.5) * 2.0**-53


class KeyedNoise:
    """Seeded, counter-based discrete Laplace and discrete Gaussian noise (module docstring).

    ``seed`` is the key; ``release`` the release a single call draws (a batch names its releases).
    """

    for_publication = False
    keyed = True

    def __init__(self, seed: int, release: int = 0) -> None:
        seed = int(seed) % (1 << 32)
        self.seed, self.release = seed, int(release)
        self.name = "keyed simulation (JAX Threefry, seeded; not for publication)"

    def words(self, releases, stream: int, cells: np.ndarray, words: int, attempt: int = 0) -> np.ndarray:
        """(len(releases) × len(cells) × words) uint32 random words of the releases' stream at ``cells``;
        chunked and padded to powers of two (few compiled shapes), the values not depending on either."""
        import jax.numpy as jnp

        rel = np.asarray(releases, dtype=np.int64).ravel()
        cells = np.asarray(cells, dtype=np.int64).ravel()
        out = np.empty((rel.size, cells.size, words), dtype=np.uint32)
        if cells.size and (cells.min() < 0 or cells.max() >= 1 << 32):
            raise PrivacyError("a measurement's cells are numbered 0 to 2^32 - 1 in the key schedule")
        if not rel.size or not cells.size:
            return out
        fn = _words_fn(words)
        c_chunk = min(CHUNK, 1 << max(int(cells.size - 1).bit_length(), 4))
        r_chunk = max(1, CHUNK // c_chunk)
        r_chunk = 1 << (r_chunk.bit_length() - 1)
        for ra in range(0, rel.size, r_chunk):
            r_part = rel[ra:ra + r_chunk]
            r_pad = np.zeros(min(r_chunk, 1 << max(int(r_part.size - 1).bit_length(), 0)), dtype=np.uint32)
            r_pad[:r_part.size] = r_part
            for ca in range(0, cells.size, c_chunk):
                part = cells[ca:ca + c_chunk]
                padded = np.zeros(min(c_chunk, 1 << max(int(part.size - 1).bit_length(), 4)), dtype=np.uint32)
                padded[:part.size] = part
                w = fn(np.uint32(self.seed), jnp.asarray(r_pad), np.uint32(stream), np.uint32(attempt),
                       jnp.asarray(padded))
                out[ra:ra + r_part.size, ca:ca + part.size] = np.asarray(w)[:r_part.size, :part.size]
        return out

    def pair_words(self, releases: np.ndarray, stream: int, cells: np.ndarray, words: int, attempt: int) -> np.ndarray:
        """(n × words) words of (release, cell) pairs listed one by one (equal to :meth:`words`' grid)."""
        import jax.numpy as jnp

        rel = np.asarray(releases, dtype=np.uint32).ravel()
        cells = np.asarray(cells, dtype=np.uint32).ravel()
        out = np.empty((rel.size, words), dtype=np.uint32)
        fn = _flat_fn(words)
        for a in range(0, rel.size, CHUNK):
            n = min(CHUNK, rel.size - a)
            size = 1 << max(int(n - 1).bit_length(), 4)
            r_pad, c_pad = np.zeros(size, np.uint32), np.zeros(size, np.uint32)
            r_pad[:n], c_pad[:n] = rel[a:a + n], cells[a:a + n]
            w = fn(np.uint32(self.seed), jnp.asarray(r_pad), np.uint32(stream), np.uint32(attempt), jnp.asarray(c_pad))
            out[a:a + n] = np.asarray(w)[:n]
        return out

    def laplace(self, releases, stream: int, cells: np.ndarray, scale: float) -> np.ndarray:
        """Discrete Laplace draws (len(releases) × len(cells)), int64."""
        t = check_scale(scale)
        return _dlap(_uniforms(self.words(releases, stream, cells, 4)), t)

    def gaussian(self, releases, stream: int, cells: np.ndarray, sigma: float) -> np.ndarray:
        """Discrete Gaussian draws N_Z(0, σ²) (len(releases) × len(cells)), int64: rejection from the
        discrete Laplace with scale ⌊σ⌋ + 1 (Canonne, Kamath and Steinke 2020, Algorithm 3), attempt a
        of a cell keyed by a, so a cell's draw does not depend on which other cells are drawn."""
        sigma = check_scale(sigma)
        t = math.floor(sigma) + 1
        rel = np.asarray(releases, dtype=np.int64).ravel()
        cells = np.asarray(cells, dtype=np.int64).ravel()
        out = np.zeros((rel.size, cells.size), dtype=np.int64)
        u = _uniforms(self.words(rel, stream, cells, 6, 0))  # every cell's first attempt at once
        y, keep = _gaussian_attempt(u, sigma, t)
        out[keep] = y[keep]
        ri, ci = np.nonzero(~keep)  # the rest, attempt by attempt, pair by pair
        attempt = 1
        while ri.size:
            u = _uniforms(self.pair_words(rel[ri], stream, cells[ci], 6, attempt))
            y, keep = _gaussian_attempt(u, sigma, t)
            out[ri[keep], ci[keep]] = y[keep]
            ri, ci = ri[~keep], ci[~keep]
            attempt += 1
            if attempt > 10_000:
                raise PrivacyError("the discrete Gaussian sampler did not accept in 10,000 attempts")
        return out

    # the plain backend interface (one release, every cell, stream 0), for code that is not keyed
    def add(self, counts: np.ndarray, scale: float) -> np.ndarray:
        counts = check_counts(counts)
        noise = self.laplace([self.release], 0, np.arange(counts.size), scale)[0]
        return checked_add(counts, noise.reshape(counts.shape))

    def add_gaussian(self, counts: np.ndarray, sigma: float) -> np.ndarray:
        counts = check_counts(counts)
        noise = self.gaussian([self.release], 0, np.arange(counts.size), sigma)[0]
        return checked_add(counts, noise.reshape(counts.shape))


def _gaussian_attempt(u: np.ndarray, sigma: float, t: int) -> tuple[np.ndarray, np.ndarray]:
    """One attempt of the rejection sampler from three uniforms per draw: the candidate and whether it
    is accepted."""
    y = _dlap(u[..., :2], t)
    return y, u[..., 2] < np.exp(-((np.abs(y) - sigma**2 / t) ** 2) / (2 * sigma**2))


def _dlap(u: np.ndarray, t: float) -> np.ndarray:
    """G₁ − G₂ from two uniforms per row (the last axis), each G = ⌊−t·log U⌋."""
    g = np.floor(-t * np.log(u)).astype(np.int64)
    return g[..., 0] - g[..., 1]


def releases_of(runs) -> list | None:
    """The releases a call draws: None for the backend's one release, ``runs`` releases 0…runs−1 for an
    int, else the listed release numbers (a keyed backend draws each by its key)."""
    if runs is None:
        return None
    return list(range(int(runs))) if isinstance(runs, (int, np.integer)) else [int(r) for r in runs]


def noisy(backend, counts: np.ndarray, scale: float, *, stream: int = 0, releases=None, cells=None,
          gaussian: bool = False) -> np.ndarray:
    """The one way a release noises int64 counts: ``counts`` (flat: the exact counts of ``cells``,
    default cells 0, 1, …) plus noise, for each of ``releases`` (default: the backend's one release),
    as a (releases × cells) int64 array. A keyed backend draws cell c of release r of ``stream`` by
    its key schedule, the same whichever other cells or releases are drawn with it; any other backend
    adds its own independent noise to each release's copy of the counts."""
    counts = check_counts(np.asarray(counts).ravel())
    idx = np.arange(counts.size) if cells is None else np.asarray(cells, dtype=np.int64).ravel()
    if idx.size != counts.size:
        raise PrivacyError(f"{counts.size} counts for {idx.size} cells")
    if getattr(backend, "keyed", False):
        rel = [backend.release] if releases is None else list(releases)
        draw = backend.gaussian if gaussian else backend.laplace
        return checked_add(np.broadcast_to(counts, (len(rel), idx.size)), draw(rel, stream, idx, scale))
    n = 1 if releases is None else len(releases)
    batch = np.broadcast_to(counts, (n, idx.size))
    if gaussian:
        if not hasattr(backend, "add_gaussian"):
            raise PrivacyError(f"the {backend.name} backend has no discrete Gaussian sampler")
        return np.asarray(backend.add_gaussian(batch, scale)).reshape(n, idx.size)
    return np.asarray(backend.add(batch, scale)).reshape(n, idx.size)
