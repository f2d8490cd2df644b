"""The program family: a release program made outside censusrecon, audited as a black box."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from censusrecon.microdata.seeds import stable_seed
from censusrecon.synth.audit.checks import INDEPENDENCE_COLUMNS, combine_units, noise_epsilon, unit_instance
from censusrecon.synth.audit.families import AuditFamily, FamilyCall, register_family
from censusrecon.synth.audit.measured import gaussian_white_box, laplace_white_box
from censusrecon.synth.audit.neighbours import canary_neighbour
from censusrecon.synth.audit.source import AuditSource
from censusrecon.synth.audit.spending import WIDTH, check_spending
from censusrecon.synth.audit.statistics import (
    AuditResult,
    audit_outputs,
    clopper_pearson,
    gaussian_rho_spent,
    gaussian_shape_pvalue,
    independence_pvalue,
    laplace_shape_pvalue,
    opendp_rho,
    tail_pvalue,
)
from censusrecon.synth.mechanism import parse_relation
from censusrecon.synth.registry import PROGRAM_PREFIX
from censusrecon.synth.release import workload_counts


def audit_program(call: FamilyCall, spec, unit: str, *, index: int = 0):
    """The black-box audit of a program at ``eps`` on ``unit``'s own D: ``runs`` whole releases of D and
    of each real neighbour of it (:func:`synth.audit.neighbours.real_pairs`: a person moved between
    blocks of different areas, changed to the rarest and the commonest type, the type in most cells;
    added and removed under add/remove), every batch with a fresh seed from the audit's; the
    statistical bound over the cells each pair moves (the mean of a cell's published copies; events on
    single outputs and on a discriminant fitted on half the releases). With the program's declared
    noise family, the checks from output minus truth over every published copy: the ε its noise
    spends per pair (each cell's scale bounded above from its own draws), the shape and far tail per
    table, and independence across cells and releases. ``index``: the unit's place in the audit's list. A
    synthesizer audited by its spending ledger (``spec.spending``) has its ledger checked on every unit, and
    whole releases (D and its canary neighbour, the worst case for a synthesizer: each is a fit) drawn only on the first
    ``spending.whole_units``; a program called in batches has its releases one per call (the call shape) drawn
    on the first ``single_units`` (default every unit), and one whose neighbours are drawn on the first ``pair_units``
    only has D's releases alone on the others (the white box and its noise checks there)."""
    src, wb, eps, seed, cache = call.src, call.with_block, call.epsilon, call.seed, call.cache
    a = src.spec.audit
    at = _Where(unit, wb, eps, seed)
    if spec.spending is not None and index >= spec.spending.whole_units:
        return _audit_ledger_only(src, spec, at, cache)
    d = _draw_program(src, spec, at, cache, index)
    checks: dict = {}
    info: dict = {"program_calls": (f"{d.runs} releases per call (a batch), and {spec.single_runs} of D one per call"
                                    if d.single is not None else f"one release per call, {d.runs} calls per input")}
    if not d.pairs_here:
        info["black_box"] = (f"not drawn on this unit: its neighbours' releases are drawn on the first {spec.pair_units} "
                             "unit(s) of the audit (release.programs[].pair_units); D's noise is checked here")
    _call_checks(src, spec, d, checks, info)
    if spec.noise is None:  # no law to check the noise against: the bound alone decides, and where its releases are
        # too few to certify the declared ε the audit is inconclusive (bound_power below)
        for k in ("noise_scale", "noise_shape", "noise_tail", "noise_independence"):
            checks[k] = "not applicable: the program declares no noise family (release.programs[].noise)"
        if spec.spending is None:
            info["white_box_why_not"] = ("the program declares no noise family (release.programs[].noise) and keeps no "
                                         "spending ledger: only the black box measures it")
    else:
        _noise_law_checks(spec, d, a.confidence, checks, info)
    _stage_checks(src, spec, d, checks, info)
    _bound_power(spec, d, checks, info)
    best = max(d.bounds, default=(0.0, "none", 0))
    details = dict(info, unit=unit, neighbours=[w for w, _ in d.pairs], differing_cells=[b[2] for b in d.bounds],
                   audited_on="the unit's own D, the program's whole releases (a black box)", program_runs=d.runs)
    return AuditResult(d.mech, eps, best[0], d.runs, a.confidence, best[1], checks, details)


@dataclass(frozen=True)
class _Where:
    """Where one program audit draws: the unit, its BLOCK variant, the ε and the audit's seed (every draw's key)."""

    unit: str
    wb: bool
    eps: float
    seed: int


@dataclass
class _ProgramDraws:
    """A program's draws on one unit: its releases of D (in batches and, where drawn, one per call) and their noise,
    and of each neighbour drawn whole, with the bound each pair gives and the ε (or ρ) its noise spends."""

    at: _Where
    runs: int
    mech: str
    layout: object
    inputs: tuple
    pair_inputs: list
    pairs: list
    exact: np.ndarray
    row_query: np.ndarray
    y1_rows: np.ndarray
    noise: np.ndarray
    single_rows: np.ndarray | None
    single: np.ndarray | None
    one_per_call: object
    shape_here: bool
    pair_conf: float
    whole: list
    bounds: list = field(default_factory=list)
    spent: list = field(default_factory=list)
    every_noise: list = field(default_factory=list)
    pairs_here: bool = True  # the neighbours' releases are drawn on this unit (release.programs[].pair_units)
    law_noise: np.ndarray | None = None  # the noise the law is checked on: the measurements' where post-processing
    # is declared (release.programs[].post_processing), else the published releases' (``noise``)


def _draw_program(src: AuditSource, spec, at: _Where, cache: dict, index: int) -> _ProgramDraws:
    """Every release the audit of ``spec`` draws on ``at.unit``: ``runs`` of D, those one per call (the shape
    publication uses, beside the batches the audit's power comes from: one release only where the call shape is drawn
    on other units, the seed check's first call), and ``runs`` of each neighbour drawn whole (of a synthesizer
    audited by its ledger, each release a fit, of its worst-case neighbour alone: a canary record in a region of the
    domain D leaves empty); with the bound over the cells each pair moves and the noise each spends."""
    a = src.spec.audit
    unit, wb, eps, seed = at.unit, at.wb, at.eps, at.seed
    runs = spec.audit_runs or a.runs
    shape_here = spec.single_units is None or index < spec.single_units
    _, _, _, exact, pairs, pair_counts, _ = unit_instance(src, unit, wb, cache)
    layout, inputs, pair_inputs = _program_instance(src, unit, wb, cache)
    y1_rows = program_draws(src, spec, inputs, eps, runs, (seed, unit, wb, eps, "D"))
    row_query = layout.rows["query"].to_numpy()
    noise = y1_rows - exact[row_query][None, :]
    single = single_rows = None
    one_per_call = spec if spec.calls == "single" else spec.model_copy(update={"calls": "single"})
    if spec.calls == "batch" and shape_here:  # past single_units: the call shape and the seed's use were checked there
        single_rows = program_draws(src, one_per_call, inputs, eps, spec.single_runs, (seed, unit, wb, eps, "single"))
        single = single_rows - exact[row_query][None, :]
    whole = ([_canary_instance(src, unit, wb, cache)] if spec.spending is not None else
             [(what, pair_counts[i], pair_inputs[i], i) for i, (what, _) in enumerate(pairs)])
    d = _ProgramDraws(at, runs, PROGRAM_PREFIX + spec.name, layout, inputs, pair_inputs, pairs, exact, row_query,
                      y1_rows, noise, single_rows, single, one_per_call, shape_here,
                      1 - (1 - a.confidence) / max(2 * len(pairs), 1), whole)  # a pair's two bounds: cells, whole
    d.every_noise = [noise] + ([single] if single is not None else [])
    d.pairs_here = spec.pair_units is None or index < spec.pair_units
    if spec.post_processing is not None:  # the law holds for the measurements; the published output is theirs, processed
        measured = program_draws(src, _stage(spec, spec.post_processing.measure), inputs, eps, runs,
                                 (seed, unit, wb, eps, "measure"))
        d.law_noise = measured - exact[row_query][None, :]
    else:
        d.law_noise = noise
    y1 = layout.to_queries(y1_rows)
    for what, c2, inputs2, key in whole:
        idx = np.flatnonzero(c2 - exact)
        if not idx.size:
            continue
        if d.pairs_here:  # the black box: the neighbour's releases too
            y2_rows = program_draws(src, spec, inputs2, eps, runs, (seed, unit, wb, eps, key))
            d.every_noise.append(y2_rows - c2[row_query][None, :])
            y2 = layout.to_queries(y2_rows)
            res = audit_outputs(y1[:, idx], y2[:, idx], exact[idx], (c2 - exact)[idx], eps, d.mech, d.pair_conf)
            d.bounds.append((res.epsilon_lower_bound, f"{what}: {res.event}", int(idx.size)))
            whole_res = whole_output_bound(d, y2_rows, c2)
            if whole_res is not None:
                d.bounds.append((whole_res.epsilon_lower_bound, f"{what}, over the whole output: {whole_res.event}",
                                 int(idx.size)))
        if spec.noise is not None:  # every published copy of every moved cell, its own scale bounded above
            moved = np.flatnonzero(np.isin(row_query, idx))
            distance = np.abs(c2 - exact)[row_query[moved]]
            shapes = ((" (its measurements, before post-processing)", d.law_noise),) if spec.post_processing else (
                ("", noise), (" (the releases drawn one per call)", single))
            for shape, x in shapes:
                if x is not None:
                    e = (gaussian_rho_spent(x[:, moved], distance, d.pair_conf) if spec.noise == "gaussian" else
                         noise_epsilon(x[:, moved], distance, d.pair_conf)[0])
                    d.spent.append((e, what + shape, int(x[:, moved].size)))
    return d


def output_statistics(layout, rows: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """Statistics of whole releases (``rows``: releases × the published rows) that events on single cells cannot see:
    each table's sum at each place, the sum of everything, the fractional parts of all values summed, and the sum of
    all values modulo 2. A program that keeps a total exact, or hides a count in the low bits of its numbers, leaks
    through one of them. Returns (releases × statistics, their names).

    >>> import pandas as pd
    >>> lay = type("L", (), {"rows": pd.DataFrame({"table": ["t", "t", "u"], "geography": ["a", "a", "a"]})})()
    >>> s, names = output_statistics(lay, np.array([[1.0, 2.5, 4.0]]))
    >>> dict(zip(names, s[0].tolist()))
    {'sum of table t at a': 3.5, 'sum of table u at a': 4.0, 'sum of every value': 7.5, 'fractional parts summed': 0.5, 'sum of every value mod 2': 1.5}
    """
    rows = np.asarray(rows, dtype=np.float64)
    groups = layout.rows["table"].astype(str) + " at " + layout.rows["geography"].astype(str)
    codes, names = pd.factorize(groups, sort=True)
    sums = np.zeros((rows.shape[0], len(names)))
    np.add.at(sums.T, codes, rows.T)
    total = rows.sum(axis=1)
    frac = (rows - np.floor(rows)).sum(axis=1)
    stats = np.column_stack([sums, total, frac, np.mod(total, 2.0)])
    return stats, [f"sum of table {n}" for n in names] + ["sum of every value", "fractional parts summed",
                                                          "sum of every value mod 2"]


def whole_output_bound(d: _ProgramDraws, y2_rows: np.ndarray, c2: np.ndarray) -> AuditResult | None:
    """The bound over whole releases of D (``d.y1_rows``) and a neighbour (``y2_rows``, its true counts ``c2``), at
    the pairs' confidence, on :func:`output_statistics`
    rather than on the cells the pair moves: events on each statistic and on a discriminant of them, chosen on the
    first half of the releases and certified on the second (:func:`audit_outputs`). A statistic's direction is its
    true change where the pair changes it (a table's sum at a place), else the sign of its mean change on the
    selection half; statistics that neither change nor vary are left out. None where none is left."""
    layout, exact = d.layout, d.exact
    s1, names = output_statistics(layout, d.y1_rows)
    s2, _ = output_statistics(layout, y2_rows)
    q = layout.rows["query"].to_numpy()
    t1, _ = output_statistics(layout, exact[q][None, :])
    t2, _ = output_statistics(layout, c2[q][None, :])
    half = len(s1) // 2  # what is chosen from the releases is chosen on the selection half (audit_outputs' first)
    change = t2[0] - t1[0]
    seen = s2[:half].mean(0) - s1[:half].mean(0)
    direction = np.where(change != 0, np.sign(change), np.sign(seen))
    spread = np.sqrt((s1[:half].var(0) + s2[:half].var(0)) / 2)
    keep = np.flatnonzero((direction != 0) & ((change != 0) | (spread > 0)))
    if not keep.size:
        return None
    # each statistic in units of its spread on the selection half (a count hidden in the low bits moves its
    # statistic by many spreads though by a millionth); one that does not vary, in units of its change
    unit = np.where(spread > 0, spread, np.where(change != 0, np.abs(change), np.abs(seen)))[keep]
    ref = np.where(change[keep] != 0, t1[0][keep], s1[:half, keep].mean(0))
    res = audit_outputs(s1[:, keep] / unit, s2[:, keep] / unit, ref / unit, direction[keep], d.at.eps, d.mech,
                        d.pair_conf)
    if res.event.startswith("at least"):  # name the statistic when one alone decides
        res = dataclasses.replace(res, event=res.event + f" (statistics: {', '.join(names[i] for i in keep[:4])}"
                                  + (", …" if keep.size > 4 else "") + ")")
    return res


def _call_checks(src: AuditSource, spec, d: _ProgramDraws, checks: dict, info: dict) -> None:
    """How the program draws: no noise repeated across calls, whether its noise is a function of its seed (fine only
    while the seed it is given stays secret; one drawing from secure randomness never repeats), and whether its
    releases one per call (as publication calls it) follow the same law as its batches."""
    a, at = src.spec.audit, d.at
    checks["noise_repeats"], info["noise_repeats"] = _repeats_check(d.every_noise, a.confidence)
    if spec.calls == "batch" and not d.shape_here:  # how it uses its seed does not depend on the unit (single_units)
        checks["seed_use"] = checks["call_shape"] = (
            f"not applicable: its releases one per call were drawn on the first {spec.single_units} unit(s) of the "
            "audit (release.programs[].single_units), where its call shape and its seed's use were checked")
        return
    first = d.y1_rows[0] if d.single_rows is None else d.single_rows[0]  # the first call: drawn again with its seed
    again = program_draws(src, d.one_per_call, d.inputs, at.eps, 1,
                          (at.seed, at.unit, at.wb, at.eps, "D" if d.single_rows is None else "single"))[0]
    checks["seed_use"] = ("declared: its noise is a function of the seed it is given (two calls with the same seed "
                          "gave the same release): evaluate-release gives it a secret one when it publishes (the "
                          "operating system's randomness, written nowhere), and so must whoever publishes with it"
                          if np.array_equal(again, first) else
                          "not applicable: two calls with the same seed gave different releases (fresh randomness)")
    if d.single is not None:
        checks["call_shape"], info["call_shape_p_value"] = _call_shape_check(d.noise, d.single, a.confidence,
                                                                               spec.single_runs)
    else:
        checks["call_shape"] = ("not applicable: every release the audit drew came from a call of its own with a seed "
                                "of its own, as publication calls the program")


def _noise_law_checks(spec, d: _ProgramDraws, confidence: float, checks: dict, info: dict) -> None:
    """The program's declared noise family against output minus truth: the ε (ρ) its noise spends per pair, the
    shape and far tail per table, independence across cells and releases."""
    eps, noise = d.at.eps, d.law_noise
    gaussian = spec.noise == "gaussian"
    family = "Gaussian" if gaussian else "Laplace"
    if not np.allclose(noise, np.rint(noise)):
        checks["noise_shape"] = (f"fail: the program declares discrete {family} noise on counts, but its outputs "
                                 "are not integers")
    worst = max(d.spent, default=(0.0, "none", 0))
    measured = (f"the noise of {d.runs} releases of the program on {worst[1]}: every published copy of each moved "
                "cell, its scale bounded above from its own draws")
    if gaussian:  # ρ from the declared (ε, δ) by OpenDP's conversion, never the program's own figure
        budget, what = opendp_rho(eps, spec.delta_of()), "ρ"
        info.update(rho_from_noise_scale=round(worst[0], 8), rho_declared=round(budget, 8), delta=spec.delta_of())
        how = "each moved cell's change² over twice an upper bound on its noise variance, summed"
        declared = f"ρ = {budget:.4g} that ε = {eps:g}, δ = {spec.delta_of():g} allows (OpenDP's conversion)"
        info["white_box"] = gaussian_white_box(worst[0], budget, spec.delta_of(), measured + ", its change² over "
                                               "twice the variance, summed", worst[2]).as_dict()
    else:
        budget, what = eps, "ε"
        info["epsilon_from_noise_scale"] = round(worst[0], 6)
        how = "each moved cell's change over an upper bound on its noise scale, summed"
        declared = f"declared {eps:g}"
        info["white_box"] = laplace_white_box(worst[0], eps, measured + ", its change over the scale, summed",
                                              worst[2]).as_dict()
    checks["noise_scale"] = ("pass" if worst[0] <= budget else
                             f"fail: the noise added spends {what} ≥ {worst[0]:.4g} on {worst[1]} ({how}), over "
                             f"the {declared}")
    tables = d.layout.rows["table"].to_numpy()
    level = 1 - (1 - confidence) / max(len(set(tables)), 1)
    if "noise_shape" not in checks:
        shape = gaussian_shape_pvalue if gaussian else laplace_shape_pvalue
        p_shape = min(shape(np.rint(noise[:, tables == t])) for t in set(tables))
        checks["noise_shape"] = ("pass" if p_shape >= 1 - level else
                                 f"fail: the noise added is not discrete {family} (p = {p_shape:.2g})")
        info["noise_shape_p_value"] = p_shape
    p_tail = min(tail_pvalue(noise[:, tables == t], gaussian) for t in set(tables))
    checks["noise_tail"] = ("pass" if p_tail >= 1 - level else
                            f"fail: the noise added has too few draws in its far tail for discrete {family} noise "
                            f"(p = {p_tail:.2g}): cut off")
    info["noise_tail_p_value"] = p_tail
    rng = np.random.default_rng(program_seed(d.at.seed, "columns", d.at.unit))
    cols = rng.permutation(noise.shape[1])[:INDEPENDENCE_COLUMNS]
    p_ind, where = independence_pvalue(noise[:, np.sort(cols)])
    checks["noise_independence"] = ("pass" if p_ind >= 1 - confidence else
                                    f"fail: the noise is not independent across cells or releases ({where}: "
                                    f"p = {p_ind:.2g})")
    info["independence_p_value"] = p_ind


def _stage_checks(src: AuditSource, spec, d: _ProgramDraws, checks: dict, info: dict) -> None:
    """A synthesizer's spending ledger, a program's first measurements, and what post-processing means for it."""
    at = d.at
    if spec.spending is not None:
        spending_checks, spending_info = _ledger_checks(src, spec, d.inputs, at.eps, (at.seed, at.unit, at.wb, at.eps))
        checks.update(spending_checks)
        info.update(spending_info, whole_releases=f"of D and of its worst-case neighbour ({d.whole[0][0]})")
    if spec.measurements is not None:
        stage_bounds, checks["measurements_scale"], stage_info = _audit_first_measurements(
            src, spec, (d.inputs, d.pair_inputs, d.pairs), at.eps, (at.seed, at.unit, at.wb), d.pair_conf)
        d.bounds += stage_bounds
        info.update(stage_info)
        checks["post_processing"] = ("not applicable: the steps after its first measurements (selecting marginals, "
                                     "fitting the model, sampling) show only in its whole releases' bound")
    elif spec.post_processing is not None:
        checks["post_processing"], info["post_processing"] = _declared_post_processing(src, spec, d)
    else:
        checks["post_processing"] = ("not applicable: a black box shows its outputs only, not the measurements it "
                                     "post-processes; its outputs are what the bound and the noise checks test")
    if spec.spending is not None:
        checks["post_processing"] = LEDGER_POST_PROCESSING


def _bound_power(spec, d: _ProgramDraws, checks: dict, info: dict) -> None:
    """Whether ``runs`` releases per neighbour can certify the declared ε at all, and what stands in where not."""
    eps, runs = d.at.eps, d.runs
    reach = bound_reach(runs, d.pair_conf)
    info["bound_reach"] = round(reach, 4)
    if reach < eps:
        reach_words = f"at most ε ≈ {reach:.2f}" if reach > 0 else "no ε at all"
        needed = runs_to_certify(eps, d.pair_conf)
        info["runs_to_certify"] = needed
        said = (f"with {runs} releases per neighbour the bound certifies {reach_words}, below the declared {eps:g}")
        if spec.spending is not None:
            checks["bound_power"] = (f"not applicable: {said}; its spending ledger, which was checked, bounds what "
                                     "every step that reads the data spends")
        elif spec.noise is not None:
            checks["bound_power"] = (f"not applicable: {said}; the noise checks, which ran, bound what the noise "
                                     "spends")
        else:
            checks["bound_power"] = (f"not run: {said}, and no check of its noise stands in "
                                     + ("(its first measurements' are only its first step)" if spec.measurements else
                                        "(declare its noise family: release.programs[].noise)")
                                     + f"; {needed:,} releases per neighbour would certify it")


def _stage(spec, params: dict):
    """The program asked for one of its stages: ``params`` besides its own."""
    return spec.model_copy(update={"params": {**spec.params, **params}})


def _declared_post_processing(src: AuditSource, spec, d: _ProgramDraws) -> tuple[str, dict]:
    """A program that declares its post-processing: for each of ``post_processing.replays`` seeds, its release as
    published (one call) must be exactly its post-processing (the ``post`` stage, given no persons) of the
    measurements it draws with the same seed (the ``measure`` stage). Its noise must then be a function of its seed;
    one that draws fresh randomness cannot be replayed, and the check does not run."""
    at, pp = d.at, spec.post_processing
    persons, cells, domain = d.inputs
    nobody = (persons.iloc[:0], cells, domain)
    one = d.one_per_call
    worst = 0.0
    for r in range(pp.replays):
        seed = program_seed(at.seed, at.unit, at.wb, at.eps, "post", r)
        published = src.run_program(one, d.inputs, at.eps, 1, seed)[0]
        measured = src.run_program(_stage(one, pp.measure), d.inputs, at.eps, 1, seed)[0]
        again = src.run_program(_stage(one, pp.measure), d.inputs, at.eps, 1, seed)[0]
        if not np.array_equal(measured, again):
            return ("not run: its measurements are not a function of the seed it is given (two calls with one seed "
                    "differ), so its release cannot be replayed from them"), {"replays": r}
        post = src.run_program(_stage(one, {**pp.post, "measurements": measured.tolist()}), nobody, at.eps, 1, seed)[0]
        worst = max(worst, float(np.max(np.abs(post - published))) if post.size else 0.0)
    info = {"replays": pp.replays, "largest_difference": worst}
    if worst > 0:
        return (f"fail: a release as published is not the post-processing of the measurements drawn with its seed "
                f"(largest difference {worst:.4g} over {pp.replays} seeds): the output reads the data beside its "
                "measurements"), info
    return "pass", info


#: the post-processing check's line for a synthesizer audited by its spending ledger
LEDGER_POST_PROCESSING = ("not applicable: what follows its recorded measurements and selections (the model's "
                          "estimation, the sampling) is the library's post-processing of them")


def _ledger_checks(src: AuditSource, spec, inputs: tuple, eps: float,
                   where: tuple) -> tuple[dict, dict]:
    """The synthesizer's spending ledger from ``spending.runs`` fits of the unit's D, checked
    (:func:`synth.audit.spending.check_spending`); its figures prefixed ``spending_``."""
    stage = spec.model_copy(update={"params": {**spec.params, **spec.spending.params}})
    ledger = src.run_program(stage, inputs, eps, spec.spending.runs, program_seed(*where, "spending"),
                         width=WIDTH)
    checks, info = check_spending(ledger, eps, spec.spending.delta, src.spec.audit.confidence)
    out = {"spending_" + k: v for k, v in info.items()}
    if "rho_measured_lower" in info:
        out["white_box"] = gaussian_white_box(
            info["rho_measured_lower"], opendp_rho(eps, spec.spending.delta), spec.spending.delta,
            f"the Gaussian measurements of {len(ledger)} fits of the unit's D, as the synthesizer recorded them: the "
            "ρ they record over an upper bound on their noise's variance (as a share of the σ² each declares); its "
            "selections are not counted", info["noise_cells"]).as_dict()
    else:
        out["white_box_why_not"] = "its ledger recorded no measured cell"
    return checks, out


def _audit_ledger_only(src: AuditSource, spec, at: _Where, cache: dict) -> AuditResult:
    """A unit past ``spending.whole_units``: the synthesizer's ledger on the unit's own D, no whole release."""
    unit, wb, eps, seed = at.unit, at.wb, at.eps, at.seed
    _, inputs, _ = _program_instance(src, unit, wb, cache)
    checks, info = _ledger_checks(src, spec, inputs, eps, (seed, unit, wb, eps))
    checks["post_processing"] = LEDGER_POST_PROCESSING
    details = dict(info, unit=unit, program_runs=0, audited_on="the unit's own D, the synthesizer's recorded steps",
                   whole_releases="none on this unit (release.programs[].spending.whole_units): its ledger stands in")
    return AuditResult(PROGRAM_PREFIX + spec.name, eps, 0.0, 0, src.spec.audit.confidence,
                       "none: no whole release of this unit", checks, details)


def _canary_instance(src: AuditSource, unit: str, wb: bool, cache: dict) -> tuple:
    """The unit's canary neighbour (:func:`canary_neighbour`): what it is, its published cells' true counts, the
    contract's inputs for it and the key of its draws; the same at every ε."""
    key = ("canary", unit, wb)
    if key not in cache:
        D, areas, workload, *_ = unit_instance(src, unit, wb, cache)
        layout = _program_instance(src, unit, wb, cache)[0]  # the unit's published cells, laid out once
        what, D2 = canary_neighbour(D, parse_relation(src.spec.relation), src.spec.audit.canary)
        blocks = src.blocks(unit)[0] if wb else None
        cache[key] = (what, workload_counts(D2, workload), src.program_inputs(D2, unit, layout, blocks, areas), "canary")
    return cache[key]


def program_draws(src: AuditSource, spec, inputs: tuple, eps: float, runs: int,
                  where: tuple) -> np.ndarray:
    """``runs`` releases of the program on ``inputs`` in the shape its ``calls`` declares: one call per release
    (single, as publication calls it), each with its own seed from ``where`` and its number; or one call
    for all of them (batch), with one seed."""
    if spec.calls == "single":
        return np.vstack([src.run_program(spec, inputs, eps, 1, program_seed(*where, "call", k)) for k in range(runs)])
    return src.run_program(spec, inputs, eps, runs, program_seed(*where))


def repeats_pvalue(rows: np.ndarray) -> tuple[int, float, float]:
    """Pairs of identical rows among ``rows`` (one release's noise a row) and the chance of at least that
    many if the rows were independent: Poisson with mean C(n, 2) × Π_cells q, q a cell's chance that two
    releases agree on it, from the distinct rows (repeats would make it look certain). (pairs, expected,
    p-value).

    >>> rng = np.random.default_rng(0); fresh = rng.integers(-3, 4, (200, 40))
    >>> repeats_pvalue(fresh)[0], repeats_pvalue(np.vstack([fresh, fresh[:5]]))[2] < 1e-6
    (0, True)
    """
    from scipy.stats import poisson

    rows = np.asarray(rows)
    n = len(rows)
    distinct, counts = np.unique(rows, axis=0, return_counts=True)
    pairs = int((counts * (counts - 1) // 2).sum())
    if pairs == 0:
        return 0, 0.0, 1.0
    if len(distinct) < 2:
        return pairs, 0.0, 0.0  # every release the same
    log_q = 0.0
    for j in range(distinct.shape[1]):
        _, c = np.unique(distinct[:, j], return_counts=True)
        log_q += math.log(float(((c / len(distinct)) ** 2).sum()))
    expected = n * (n - 1) / 2 * math.exp(log_q)
    return pairs, expected, float(poisson.sf(pairs - 1, expected))


def _repeats_check(noises: list, confidence: float) -> tuple[str, dict]:
    """Releases drawn by separate calls with different seeds, of D and of its neighbours (each release's
    output minus its own input's truth), must not repeat: noise that comes back is noise an attacker
    can subtract (a seed written in the program, the contract's seed ignored: ε = ∞)."""
    rows = np.vstack([np.asarray(x, dtype=np.float64) for x in noises])
    pairs, expected, p = repeats_pvalue(rows)
    info = {"releases": int(len(rows)), "identical_pairs": pairs, "expected_by_chance": expected, "p_value": p}
    if p >= 1 - confidence:
        return "pass", info
    return (f"fail: {pairs:,} pairs of the {len(rows):,} releases drawn with different seeds (of D and its neighbours) "
            f"have the same noise in every cell, {expected:.2g} expected by chance (p = {p:.2g}): the noise does not "
            "come fresh from each call's seed, so it can be subtracted (ε = ∞)"), info


def _call_shape_check(batch: np.ndarray, single: np.ndarray, confidence: float, runs: int) -> tuple[str, float]:
    """The releases drawn one per call (as published) against those drawn in batches: each release's mean
    |noise| and mean noise over its cells, compared by a two-sample Kolmogorov–Smirnov test (releases are
    independent; cells within one need not be), Bonferroni over the two."""
    from scipy.stats import ks_2samp

    p = min(1.0, 2 * min(ks_2samp(np.abs(batch).mean(axis=1), np.abs(single).mean(axis=1)).pvalue,
                         ks_2samp(batch.mean(axis=1), single.mean(axis=1)).pvalue))
    if p >= 1 - confidence:
        return "pass", p
    return (f"fail: its {runs} releases drawn one per call, as published, do not have the noise of its batches "
            f"(mean |noise| {np.abs(single).mean():.3g} one per call, {np.abs(batch).mean():.3g} in batches; "
            f"p = {p:.2g}): the program behaves differently when asked for one release"), p


def runs_to_certify(eps: float, confidence: float) -> int:
    """The fewest releases per neighbour whose statistical bound can certify ``eps``
    (:func:`bound_reach` ≥ ``eps``).

    >>> r = runs_to_certify(2.0, 0.99); bound_reach(r, 0.99) >= 2.0 > bound_reach(r - 2, 0.99)
    True
    """
    alpha = (1 - confidence) / 2  # bound_reach: m certifying releases reach ln(x / (1 − x)), x = alpha^(1/m)
    m = max(1, math.ceil(math.log(alpha) / -math.log1p(math.exp(-eps))))
    for _ in range(8):  # the closed form, checked against bound_reach itself (rounding at the edge)
        if bound_reach(2 * m, confidence) < eps:
            m += 1
        elif m > 1 and bound_reach(2 * (m - 1), confidence) >= eps:
            m -= 1
        else:
            break
    return 2 * m


def _program_instance(src: AuditSource, unit: str, wb: bool, cache: dict) -> tuple:
    """The contract's inputs for the unit's D and for each of its real neighbours (the pairs of
    :func:`unit_instance`), with the layout of the published cells: the same at every ε and for every
    program."""
    key = ("program", unit, wb)
    if key not in cache:
        D, areas, _, _, pairs, _, _ = unit_instance(src, unit, wb, cache)
        layout = src.unit_layout(unit, wb)
        blocks = src.blocks(unit)[0] if wb else None
        cache[key] = layout, [src.program_inputs(d, unit, layout, blocks, areas) for d in [D] + [d2 for _, d2 in pairs]]
    layout, (inputs, *pair_inputs) = cache[key]
    return layout, inputs, pair_inputs


def _audit_first_measurements(src: AuditSource, spec, instance: tuple, eps: float, where: tuple, confidence: float
                              ) -> tuple[list, str, dict]:
    """A program's first measurements (``spec.measurements``: a synthesizer's Gaussian one-way marginals),
    ``runs`` per neighbour: the statistical bound over the one-way cells each pair moves, and the zCDP ρ
    their noise spends per pair (each moved cell's σ bounded above from its own draws, so ρ below)
    against the share of the declared ρ the program's design gives them. ``instance``: the unit's program
    inputs, its neighbours' and the neighbours (:func:`_program_instance`, :func:`checks.unit_instance`)."""
    inputs, pair_inputs, pairs = instance
    mech = PROGRAM_PREFIX + spec.name
    m = spec.measurements
    stage = spec.model_copy(update={"params": {**spec.params, **m.params}})
    base, truth = src.one_way_inputs(inputs)
    y1 = src.run_program(stage, base, eps, m.runs, program_seed(*where, eps, "measurements", "D"))
    declared = m.share * opendp_rho(eps, m.delta)
    bounds, spent = [], []
    for i, (what, _) in enumerate(pairs):
        other, truth2 = src.one_way_inputs(pair_inputs[i])
        idx = np.flatnonzero(truth2 - truth)
        if not idx.size:
            continue
        y2 = src.run_program(stage, other, eps, m.runs, program_seed(*where, eps, "measurements", i))
        res = audit_outputs(y1[:, idx], y2[:, idx], truth[idx], (truth2 - truth)[idx], eps, mech, confidence)
        bounds.append((res.epsilon_lower_bound, f"first measurements, {what}: {res.event}", int(idx.size)))
        noise = np.vstack([y1[:, idx] - truth[idx], y2[:, idx] - truth2[idx]])
        spent.append((gaussian_rho_spent(noise, np.abs(truth2 - truth)[idx], confidence), what))
    worst = max(spent, default=(0.0, "none"))
    check = ("pass" if worst[0] <= declared else
             f"fail: its first measurements' noise spends ρ ≥ {worst[0]:.4g} on {worst[1]} (each moved one-way cell's "
             f"change² over twice an upper bound on its noise variance, summed), over the {m.share:.4g} of ρ = "
             f"{declared / m.share:.4g} (ε {eps:g}, δ {m.delta:g}) its design gives them")
    info = {"measurements_runs": m.runs, "measurements_rho_declared": round(declared, 8),
            "measurements_rho_from_noise_scale": round(worst[0], 8),
            "measurements_bound_reach": round(bound_reach(m.runs, confidence), 4)}
    return bounds, check, info


def bound_reach(runs: int, confidence: float) -> float:
    """The largest ε the statistical bound can certify from ``runs`` releases per neighbour (half of them
    certify): an event seen in every certifying release of one neighbour and in none of the other's.

    >>> round(bound_reach(300, 0.99), 2), round(bound_reach(50_000, 0.99), 2), bound_reach(10, 0.95)
    (3.33, 8.46, 0.0)
    """
    m = runs - runs // 2
    alpha = (1 - confidence) / 2
    lo, _ = clopper_pearson(np.array([m]), m, alpha)
    _, hi = clopper_pearson(np.array([0]), m, alpha)
    return max(0.0, float(np.log(lo[0] / hi[0])))  # 0: too few releases to certify anything


def program_seed(*parts) -> int:
    """A seed for one batch of the audit's releases of a program: fresh for every batch, from its parts (the audit's
    own seed among them). Never a published release's: see :func:`synth.program_host.publication_seed`."""
    return int(stable_seed("program", *parts) & 0x7FFFFFFF)


def audit_programs(call: FamilyCall) -> AuditResult:
    """The ``program`` family: the release program ``call.mechanism`` names (``program:<name>``), audited as a
    black box on each unit (its place in the list says which draw whole releases and one-per-call shapes)."""
    name = call.mechanism.removeprefix(PROGRAM_PREFIX)
    spec = next(p for p in call.src.spec.programs if p.name == name)
    return combine_units(call.mechanism, call.epsilon, [
        audit_program(call, spec, u, index=k)
        for k, u in enumerate(call.units)])


register_family(AuditFamily("program", (0, 7), audit_programs,
                            "a release program made outside censusrecon: its bound, noise scale, shape, tail, "
                            "independence, repeats and call shape (its first measurements and spending ledger "
                            "where declared)"))
