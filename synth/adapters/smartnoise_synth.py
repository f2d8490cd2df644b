"""Synthetic microdata from SmartNoise Synth (MST or AIM, over private-pgm's graphical models),
tabulated into the declared tables: the release the attacks read is the synthetic file's tables.

The synthesizer's domain is the public one (every value of every attribute and every block of the
``domain`` argument, fitted into SmartNoise's label transformers before the persons are seen), so
no category is learnt from the data. Under add/remove the number of rows to sample is a noisy count
(OpenDP's discrete Laplace, 5% of ε; the synthesizer gets the rest); under replace-one n is public.
``synthesizer``: "mst" (default) or "aim"; ``delta`` for their (ε, δ) accounting (default 1e-9).
Each of ``runs`` releases is a fit and a sample of its own (tens of seconds each on a laptop core),
so a black-box audit of it can afford only a few releases: its result says how far it reaches.

``stage: measurements`` returns instead what the synthesizer measures first, the noisy one-way
marginal of every column, recorded from SmartNoise's own measurement objects as a real fit makes
them (the fit is stopped there): the step that spends privacy, cheap enough to audit thousands of
times. ``cells`` are then one-way cells (one attribute's one value at the unit, or one block); the
measured value of each is returned. What follows (the selection of marginals, the graphical model,
the sampling) is not returned.

Needs an environment of its own (``make smartnoise-env``: SmartNoise Synth pins what JAX does not
accept): ``command: [.venv-smartnoise/bin/python, synth/adapters/smartnoise_synth.py]``."""

from __future__ import annotations

import numpy as np
import pandas as pd

try:
    from censusrecon.synth.adapters.contract import true_counts
except ImportError:  # run as a command in an environment of its own
    from contract import true_counts

#: the share of ε spent on the number of rows under add/remove
COUNT_SHARE = 0.05


def _public_transformer(columns: dict):
    """SmartNoise's table transformer fitted on the public domain (each column's every label), never on
    the persons."""
    from snsynth.transform import LabelTransformer, TableTransformer

    names = list(columns)
    longest = max(len(v) for v in columns.values())
    frame = pd.DataFrame({c: [columns[c][i % len(columns[c])] for i in range(longest)] for c in names})
    tt = TableTransformer([LabelTransformer(nullable=False) for _ in names])
    tt.fit(frame, epsilon=0.0)
    return tt, names


def _noisy_count(n: int, epsilon: float) -> int:
    import opendp.prelude as dp

    dp.enable_features("contrib")
    space = dp.atom_domain(T=int), dp.absolute_distance(T=int)
    meas = dp.binary_search_chain(lambda s: space >> dp.m.then_laplace(s), d_in=1, d_out=float(epsilon))
    return max(1, int(meas(int(n))))


class _FirstMeasurements(Exception):
    """Raised inside a fit once the synthesizer has measured every column's one-way marginal."""


def _first_measurements(synth, data: pd.DataFrame, tt, columns: int) -> dict:
    """The synthesizer's first noisy measurements, {column number: noisy marginal}, taken from the
    measurement objects its own code builds during a fit of ``data`` (stopped after the last one)."""
    import functools
    import importlib

    module = importlib.import_module(type(synth).__module__)
    if not hasattr(module.cdp_rho, "cache_info"):  # its ρ from (ε, δ): a binary search, the same every run
        module.cdp_rho = functools.lru_cache(module.cdp_rho)
    made = module.LinearMeasurement
    seen: dict = {}

    def record(y, clique, *args, **kwargs):
        if len(clique) == 1:
            seen[int(str(clique[0]).removeprefix("col"))] = np.asarray(y, dtype=np.float64)
            if len(seen) == columns:
                raise _FirstMeasurements
        return made(y, clique, *args, **kwargs)

    module.LinearMeasurement = record
    try:
        synth.fit(data, transformer=tt, preprocessor_eps=0.0)
    except _FirstMeasurements:
        return seen
    finally:
        module.LinearMeasurement = made
    raise RuntimeError(f"{type(synth).__name__} made {len(seen)} one-way measurements, not one per column ({columns})")


def _one_way_positions(cells: pd.DataFrame, tt, names: list[str]) -> list[tuple[int, int]]:
    """(column number, label code) of each one-way cell: one attribute's one value at the unit, or a block."""
    out = []
    for i in range(len(cells)):
        given = [a for a in names if a != "block" and cells[a].iloc[i] is not None]
        if cells["level"].iloc[i] == "block" and not given and "block" in names:
            column, label = names.index("block"), str(cells["geography"].iloc[i])
        elif cells["level"].iloc[i] == "unit" and len(given) == 1 and len(cells[given[0]].iloc[i]) == 1:
            column, label = names.index(given[0]), str(cells[given[0]].iloc[i][0])
        else:
            raise ValueError(f"stage measurements: cell {i} is not a one-way cell (one value of one attribute at "
                             "the unit, or one block)")
        out.append((column, tt.transformers[column].labels[label]))
    return out


def release(persons: pd.DataFrame, cells: pd.DataFrame, domain: dict, epsilon: float, runs: int, seed: int,
            relation: str, synthesizer: str = "mst", delta: float = 1e-9, stage: str = "release",
            **params) -> np.ndarray:
    from snsynth import Synthesizer

    attrs = list(domain["attributes"])
    columns = {a: list(domain["attributes"][a]) for a in attrs}
    places = domain["places"]
    with_block = "block" in places[0]
    if with_block:
        columns["block"] = [p["block"] for p in places]
    tt, names = _public_transformer(columns)
    data = persons[names].astype(str).reset_index(drop=True)
    eps_synth = epsilon if relation == "replace_one" else epsilon * (1 - COUNT_SHARE)
    out = np.zeros((runs, len(cells)))
    if stage == "measurements":
        where = _one_way_positions(cells, tt, names)
        for r in range(runs):
            synth = Synthesizer.create(synthesizer, epsilon=eps_synth, delta=delta, verbose=False)
            seen = _first_measurements(synth, data, tt, len(names))
            out[r] = [seen[c][k] for c, k in where]
        return out
    if stage != "release":
        raise ValueError(f"stage is release or measurements, got {stage!r}")
    for r in range(runs):
        n = len(persons) if relation == "replace_one" else _noisy_count(len(persons), epsilon * COUNT_SHARE)
        synth = Synthesizer.create(synthesizer, epsilon=eps_synth, delta=delta, verbose=False)
        synth.fit(data, transformer=tt, preprocessor_eps=0.0)
        rows = synth.sample(n).astype(str)
        unit = places[0]["unit"]
        rows["unit"] = unit
        if with_block:  # the levels between the unit and its blocks, from the public place list
            where = {p["block"]: p for p in places}
            for level in [k for k in places[0] if k not in ("block", "unit")]:
                rows[level] = rows["block"].map(lambda b, lv=level: where[b][lv])
        out[r] = true_counts(rows, cells, attrs)
    return out


if __name__ == "__main__":
    from contract import serve

    serve(release)
