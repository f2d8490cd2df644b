"""The declared tables released through OpenDP: each cell's count with discrete Laplace noise from
OpenDP's own measurement, its scale found by OpenDP's privacy map (``binary_search_chain``), for
the sensitivity bounded from the public domain: the most cells one person is counted in, twice that
under replace-one (a replaced person is one removed and one added). With ``noise: gaussian`` (and
``delta``) OpenDP's discrete Gaussian instead, its σ the smallest whose zCDP, converted by OpenDP to
(ε, δ)-DP, stays within them, at the L2 sensitivity √(cells) (√(2·cells) under replace-one).

Runs inside censusrecon's environment (``function: censusrecon.synth.adapters.opendp_tables:release``) or as a
command in one of its own with numpy, pandas and opendp (``command: [python,
synth/adapters/opendp_tables.py]``). OpenDP draws its noise from the operating system's secure
randomness, so ``seed`` is not used: no two runs repeat."""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import pandas as pd

try:
    from censusrecon.synth.adapters.contract import most_cells_per_person, true_counts
except ImportError:  # run as a command in an environment of its own
    from contract import most_cells_per_person, true_counts


@lru_cache(maxsize=64)
def measurement(sensitivity: int, epsilon: float):
    """OpenDP's discrete Laplace on an integer vector at the smallest scale whose privacy map gives at
    most ``epsilon`` for ``sensitivity`` (L1); kept per (sensitivity, ε), as its binary search takes a
    fifth of a second and a program is called once per release."""
    import opendp.prelude as dp

    dp.enable_features("contrib")
    space = dp.vector_domain(dp.atom_domain(T=int)), dp.l1_distance(T=int)
    return dp.binary_search_chain(lambda s: space >> dp.m.then_laplace(s), d_in=int(sensitivity), d_out=float(epsilon))


@lru_cache(maxsize=64)
def gaussian_measurement(l2_squared: int, epsilon: float, delta: float):
    """OpenDP's discrete Gaussian on an integer vector at the smallest σ whose zCDP ρ for an L2 sensitivity of
    √``l2_squared``, converted by OpenDP to (ε, δ)-DP with δ fixed, gives at most ``epsilon``."""
    import opendp.prelude as dp

    dp.enable_features("contrib")
    space = dp.vector_domain(dp.atom_domain(T=int)), dp.l2_distance(T=float)

    def chain(s):
        return dp.c.make_fix_delta(dp.c.make_zCDP_to_approxDP(space >> dp.m.then_gaussian(s)), float(delta))

    return dp.binary_search_chain(chain, d_in=float(np.sqrt(l2_squared)), d_out=(float(epsilon), float(delta)))


def release(persons: pd.DataFrame, cells: pd.DataFrame, domain: dict, epsilon: float, runs: int, seed: int,
            relation: str, noise: str = "laplace", delta: float | None = None, **params) -> np.ndarray:
    attrs = list(domain["attributes"])
    counts = true_counts(persons, cells, attrs)
    per_person = most_cells_per_person(cells, domain)
    moved = per_person * (2 if relation == "replace_one" else 1)  # cells one neighbour changes, each by one
    if noise == "gaussian":
        if delta is None:
            raise ValueError("noise: gaussian needs delta, the δ of the (ε, δ) each ε means")
        meas = gaussian_measurement(moved, epsilon, delta)
    elif noise == "laplace":
        meas = measurement(moved, epsilon)
    else:
        raise ValueError(f"noise is laplace or gaussian, got {noise!r}")
    # runs independent releases: the one measurement (one scale) on the counts repeated runs times, drawn in
    # one call (each element's noise is independent, so each row is a release of its own)
    return np.asarray(meas(np.tile(counts, runs).tolist()), dtype=np.float64).reshape(runs, len(cells))


if __name__ == "__main__":
    from contract import serve

    serve(release)
