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

import contextlib

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


#: what ``stage: spending`` returns for each fit, in this order (see :func:`_spending`; censusrecon's
#: synth.audit.spending.LEDGER reads them, and a test holds the two equal)
SPENDING = ("rho_measurements", "rho_selections", "measurements", "columns", "selections", "noise_ss", "noise_cells",
            "argmax_hits", "argmax_expected", "argmax_variance", "rho_declared", "epsilon_synthesizer")
#: then each selection's chance of a best-scored pick under its declared law, in order (0 past the last)
SELECTIONS_KEPT = 256


class _Spent(Exception):
    """Raised inside an MST fit once its last measurement is made (the rest is post-processing)."""


def _counts(data, clique) -> np.ndarray:
    """The true marginal of ``clique`` in mbi's layout (C order over the clique's attributes), computed here from
    the coded rows, not by the library whose measurements it checks."""
    shape = tuple(int(data.domain.config[a]) for a in clique)
    codes = tuple(data.df[a].to_numpy(dtype=np.int64) for a in clique)
    return np.bincount(np.ravel_multi_index(codes, shape), minlength=int(np.prod(shape))).astype(np.float64)


def _spending(synth, data: pd.DataFrame, tt, relation: str) -> list[float]:
    """One fit of ``synth`` with every privacy expenditure recorded as the library makes it: each Gaussian
    measurement (its noisy marginal, the standard deviation it declares, and the true marginal of the data it
    measured, counted here) and each selection by the exponential mechanism (its scores, ε, sensitivity and
    choice). Returns SPENDING: the ρ they spend by their declared parameters under ``relation`` (a marginal's
    L2 sensitivity 1 under add/remove, √2 under replace-one; a selection's ε, doubled under
    replace-one: ε²/8 each; the sensitivity the library passes its exponential mechanism is taken as the scores'
    under add/remove, not checked), the noise's Σ((y − x)/σ)²
    and its number of cells (χ² with that many degrees of freedom if the noise is as declared), how often the
    choice was a best-scored candidate beside the expected count and its variance under the declared law, the
    ρ the synthesizer declares for its (ε, δ) and that ε; ``columns`` is the data's (one first measurement each).
    Then, for the exact test of the selections, each selection's chance (SELECTIONS_KEPT of them, 0 after).
    The fit stops after MST's last measurement (its
    estimation and sampling read the measurements only); AIM's rounds alternate selection and measurement
    with estimation, so an AIM fit runs to its end."""
    import functools
    import importlib

    module = importlib.import_module(type(synth).__module__)
    if not hasattr(module.cdp_rho, "cache_info"):
        module.cdp_rho = functools.lru_cache(module.cdp_rho)
    ledger = _Recorder(module, 2.0 if relation == "replace_one" else 1.0)
    with ledger.patched(type(synth)):
        try:
            synth.fit(data, transformer=tt, preprocessor_eps=0.0)
        except _Spent:
            pass
    return ledger.row(float(module.cdp_rho(synth.epsilon, synth.delta)), float(synth.epsilon), len(data.columns))


class _Recorder:
    """Every privacy expenditure of one fit as the library makes it (:func:`_spending`): the library's measurement
    class and exponential mechanism wrapped while :meth:`patched` holds, each call recorded, then restored."""

    def __init__(self, module, factor: float):
        self.module, self.factor = module, factor
        self.state = {"data": None, "quiet": False, "measures": 0}
        self.seen: list = []  # (ρ, Σ((y − x)/σ)², cells)
        self.picks: list = []  # (ρ, hit, π)
        self.made = module.LinearMeasurement

    def measurement(self, y, clique, stddev=1.0, *args, **kwargs):
        """The library's measurement, its noise recorded against the data's true marginal (counted here)."""
        if not self.state["quiet"]:
            clique = tuple(clique)
            x = _counts(self.state["data"], clique)
            z = (np.asarray(y, dtype=np.float64) - x) / float(stddev)
            self.seen.append((self.factor / (2.0 * float(stddev) ** 2), float(z @ z), int(z.size)))
        return self.made(y, clique, stddev, *args, **kwargs)

    def chosen(self, q, eps, sensitivity, choice, coef=0.5):
        """A selection: its ρ, whether it picked a best-scored candidate, and that chance under the declared law."""
        keys = list(q) if isinstance(q, dict) else list(range(len(q)))
        scores = np.array([q[k] for k in keys] if isinstance(q, dict) else q, dtype=np.float64)
        logits = coef * float(eps) / float(sensitivity) * (scores - scores.max())
        p = np.exp(logits - np.logaddexp.reduce(logits))
        best = scores >= scores.max() - 1e-12
        hit = bool(best[keys.index(choice)]) if choice in keys else bool(best[int(choice)])
        used = 2.0 * coef * float(eps)  # the mechanism's ε for its scale (coef 0.5: the usual ε; 1: monotone)
        self.picks.append(((self.factor * used) ** 2 / 8.0, hit, float(p[best].sum())))

    @contextlib.contextmanager
    def patched(self, cls):
        """The library's measurement, selections, measure step (stopped after MST's last measurement), domain
        compression (quiet: it re-expresses measurements already recorded) and AIM's entry wrapped, then restored."""
        module, state, chosen = self.module, self.state, self.chosen
        saved = {}
        try:
            module.LinearMeasurement = self.measurement
            if hasattr(module, "exponential_mechanism"):  # AIM: the library's function, imported by name
                select = saved["fn"] = module.exponential_mechanism

                def fn(qualities, epsilon, sensitivity=1.0, *args, **kwargs):
                    out = select(qualities, epsilon, sensitivity, *args, **kwargs)
                    chosen(qualities, epsilon, sensitivity, out)
                    return out
                module.exponential_mechanism = fn
            for name in ("exponential_mechanism", "measure", "compress_domain", "AIM"):
                if name in vars(cls):
                    saved[name] = vars(cls)[name]
            if "exponential_mechanism" in saved:  # MST: a method
                def method(self, q, eps, sensitivity, prng=np.random, monotonic=False):
                    out = saved["exponential_mechanism"](self, q, eps, sensitivity, prng=prng, monotonic=monotonic)
                    chosen(np.asarray(q), eps, sensitivity, int(out), 1.0 if monotonic else 0.5)
                    return out
                cls.exponential_mechanism = method
            if "measure" in saved:
                def measure(self, data, cliques, sigma, weights=None):
                    state["data"] = data
                    out = saved["measure"](self, data, cliques, sigma, weights)
                    state["measures"] += 1
                    if state["measures"] == 2:
                        raise _Spent
                    return out
                cls.measure = measure
            if "compress_domain" in saved:  # re-expresses measurements already recorded: post-processing
                def compress(self, data, measurements):
                    state["quiet"] = True
                    try:
                        return saved["compress_domain"](self, data, measurements)
                    finally:
                        state["quiet"] = False
                cls.compress_domain = compress
            if "AIM" in saved:
                def aim(self, data, workload):
                    state["data"] = data
                    return saved["AIM"](self, data, workload)
                cls.AIM = aim
            yield self
        finally:
            module.LinearMeasurement = self.made
            if "fn" in saved:
                module.exponential_mechanism = saved["fn"]
            for name in ("exponential_mechanism", "measure", "compress_domain", "AIM"):
                if name in saved:
                    setattr(cls, name, saved[name])

    def row(self, rho_declared: float, epsilon: float, columns: int) -> list[float]:
        """The fit's SPENDING row, then each selection's chance (SELECTIONS_KEPT of them, 0 after)."""
        seen, picks = self.seen, self.picks
        return [sum(r for r, *_ in seen), sum(r for r, *_ in picks), len(seen), columns, len(picks),
                sum(ss for _, ss, _ in seen), sum(n for _, _, n in seen), sum(h for _, h, _ in picks),
                sum(p for *_, p in picks), sum(p * (1 - p) for *_, p in picks), rho_declared, epsilon] + (
            [p for *_, p in picks] + [0.0] * SELECTIONS_KEPT)[:SELECTIONS_KEPT]


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
    if stage == "spending":
        out = np.zeros((runs, len(SPENDING) + SELECTIONS_KEPT))
        for r in range(runs):
            synth = Synthesizer.create(synthesizer, epsilon=eps_synth, delta=delta, verbose=False)
            out[r] = _spending(synth, data, tt, relation)
        return out
    if stage != "release":
        raise ValueError(f"stage is release, measurements or spending, got {stage!r}")
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
