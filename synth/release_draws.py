"""Many releases of one mechanism drawn again, each through its own publishing function: how the informed membership
game draws every kind of release in batches, its noise keyed by the game's seed, and why a kind cannot be drawn."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from censusrecon.microdata.dataset import Dataset
from censusrecon.microdata.seeds import stable_seed
from censusrecon.reconstruct.inference import NoiseLaw
from censusrecon.synth import registry
from censusrecon.synth.histogram import DENSE_LIMIT
from censusrecon.synth.keyed import KeyedNoise
from censusrecon.synth.publishing import Draw
from censusrecon.synth.release_path import ReleaseSpec, publish


@dataclass(frozen=True)
class Drawer:
    """How the informed game draws releases of one mechanism at one setting: ``draw(data, releases, cells)`` gives
    the published counts of ``cells`` in each of the numbered ``releases`` of ``data`` (one row a release), in
    ``space``: ``workload`` (the published cells) or ``histogram`` (one cell per record of the domain). ``law``: the
    noise law the release declares (None: the adversary counts rows, having no law to weigh them by); ``fit_law``:
    the law's family, its scale fitted from draws (a program that declares its family only); ``releases``: how many
    of each world per target; ``slow``: each release is a fit or a program's call, so the game plays half its
    targets (at least one of each group it has)."""

    draw: Callable[[Dataset, list, np.ndarray], np.ndarray]
    space: str = "workload"
    law: NoiseLaw | None = None
    fit_law: str | None = None
    releases: int = 250
    slow: bool = False


@dataclass(frozen=True)
class Batches:
    """How the game draws: the seed its noise is keyed by, and how many releases of each world per target where
    noise is drawn in batches (``releases``) and where each release is a fit (``fits``)."""

    seed: int
    releases: int = 250
    fits: int = 8


def mechanism_drawer(spec: ReleaseSpec, mech: str, setting: float, workload, scale: float | None, fit_key,
                     batches: Batches) -> tuple[Drawer | None, str]:
    """The drawer of a registered mechanism (its ``draws``, :class:`synth.registry.MechanismKind`), or None and why.
    ``scale``: the noise scale the release's record declares; ``fit_key``: the key a fitted release uses."""
    kind = registry.mechanism(mech)
    if not kind.dp:
        return None, "not differentially private: no noise law to test; the attacks on its tables decide"
    if kind.scope == "root":
        return None, "each release is a whole tree of units: too slow to draw hundreds of times"
    seed = batches.seed
    keyed = KeyedNoise(seed)
    rng0 = np.random.default_rng(seed)

    def pub(data, draw):
        return publish(spec, mech, setting, data, workload, draw)

    if kind.draws == "counts":
        law = NoiseLaw("discrete_laplace", float(scale)) if kind.noise == "laplace" and scale else None
        return Drawer(lambda data, releases, cells: pub(data, Draw(keyed, rng0, runs=releases, cells=cells)
                                                        ).output.counts, law=law, releases=batches.releases), ""
    if kind.draws == "fitted":
        return Drawer(lambda data, releases, cells: pub(data, Draw(keyed, rng0, key=fit_key, runs=releases,
                                                                   fitted=True)).counts[:, cells],
                      releases=batches.fits, slow=True), ""
    if kind.draws == "histogram":
        if workload.domain.total_size > DENSE_LIMIT:
            return None, f"the histogram's domain is over {DENSE_LIMIT:,} cells: too large to draw in batches"
        return Drawer(lambda data, releases, cells: np.asarray(pub(data, Draw(keyed, rng0, runs=releases,
                                                                              cells=cells)).output),
                      space="histogram", releases=batches.releases), ""
    if kind.draws == "keys":
        def draw_keys(data, releases, cells):
            keys = np.asarray(pub(data, Draw(None, np.random.default_rng(stable_seed(seed, releases[0])),
                                             runs=len(releases))).output)
            return (keys[:, :, None] == np.asarray(cells)[None, None, :]).sum(axis=1)
        return Drawer(draw_keys, space="histogram", releases=batches.releases), ""
    return None, "it has no batch path to draw its releases again (MechanismKind.draws)"


def program_drawer(values: Callable[[Dataset, int, int], np.ndarray], to_queries: Callable[[np.ndarray], np.ndarray],
                   noise: str | None, releases: int) -> tuple[Drawer | None, str]:
    """The drawer of a release program: ``values(data, runs, first)`` runs it (``runs`` releases, seeded by the first
    release's number), ``to_queries`` maps its cells to the workload's; the law's family is the one it declares
    (``noise``), its scale fitted from the draws. None and why where it declares none."""
    if noise is None:
        return None, ("the program declares no noise law (release.programs[].noise): the informed likelihood-ratio "
                      "test needs one, and a release of rows needs hundreds of fits")

    def draw(data, rel, cells):
        return to_queries(values(data, len(rel), rel[0]))[:, cells]
    return Drawer(draw, fit_law="discrete_laplace" if noise == "laplace" else "gaussian", releases=releases,
                  slow=True), ""
