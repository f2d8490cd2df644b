"""The audit of a synthesizer where its privacy is spent: its ledger, recorded as a real fit runs.

A marginal-based synthesizer (SmartNoise Synth's MST and AIM, over private-pgm) spends its budget in two kinds
of steps: Gaussian measurements of marginals and selections of the next marginal by the exponential mechanism.
Everything after them (the graphical model's estimation, the sampling) reads the measurements only. Its adapter,
given ``stage: spending``, records every such step of ``runs`` real fits of the unit's data (see
``synth/adapters/smartnoise_synth.py``) and returns, per fit, the columns of :data:`LEDGER`. This module checks
them, never trusting a figure the synthesizer computes for itself:

- **spending**: what the recorded steps spend by their own parameters (each marginal ρ = Δ²/2σ², Δ² = 1 under
  add/remove, 2 under replace-one; each selection ρ = ε²/8, its ε doubled under replace-one; the sensitivity the
  library gives its exponential mechanism is taken as the scores' under add/remove, not checked) must not exceed the ρ the synthesizer declares for its (ε, δ), and that ρ must not
  exceed what OpenDP's conversion allows for the same (ε, δ), and that ε the release's; every marginal measured
  after the first one per column must have been chosen by a recorded selection (one chosen from the data without
  a selection spends privacy nobody counted);
- **measurement noise**: each measured cell's noise (the noisy marginal minus the true one, counted by the adapter
  from the data, over the σ the measurement declares) pooled over cells and fits is χ² with that many degrees of
  freedom if the noise is as declared; too little of it (the lower tail) fails;
- **selection law**: under the exponential mechanism the chance that a selection picks a best-scored candidate
  is known from its scores and ε; picking it more often than that law allows (one-sided, the number of such
  picks against its exact Poisson-binomial law over every selection of every fit) fails: the selection read
  the data without its noise.

Each check is one-sided at the audit's confidence: a correct synthesizer fails it at most that often."""

from __future__ import annotations

import math

import numpy as np

#: the ledger columns a synthesizer's ``stage: spending`` returns for each fit
LEDGER = ("rho_measurements", "rho_selections", "measurements", "columns", "selections", "noise_ss", "noise_cells",
          "argmax_hits", "argmax_expected", "argmax_variance", "rho_declared", "epsilon_synthesizer")

#: each fit's row then holds every selection's chance of a best-scored pick under its declared law (0 past its last)
SELECTIONS_KEPT = 256
WIDTH = len(LEDGER) + SELECTIONS_KEPT

#: the relative slack of the spending checks: floating-point sums of the same ρ in another order, and two binary
#: searches (the synthesizer's conversion of (ε, δ) to ρ, OpenDP's) stopping a few digits apart
SLACK = 1e-6


def check_spending(rows: np.ndarray, epsilon: float, delta: float, confidence: float,
                   allowed_rho=None) -> tuple[dict[str, str], dict]:
    """``rows``: one ledger row per fit (:data:`LEDGER`); ``epsilon``: the release's declared ε; ``delta`` its
    δ. ``allowed_rho(ε, δ)``: the ρ a conversion allows (default OpenDP's, :func:`synth.audit.statistics.opendp_rho`).
    Returns the checks (``spending``, ``measurement_noise``, ``selection_law``: "pass" or "fail: why") and
    the figures they read.

    >>> ok = [[0.002, 0.001, 9, 5, 4, 2900.0, 2924, 2, 2.2, 0.7, 0.003, 0.475]] * 3
    >>> check_spending(np.array(ok), 0.5, 1e-9, 0.999, lambda e, d: 0.004)[0]["spending"]
    'pass'
    >>> over = [[0.002, 0.0012, 9, 5, 4, 2900.0, 2924, 2, 2.2, 0.7, 0.003, 0.475]]
    >>> check_spending(np.array(over), 0.5, 1e-9, 0.999, lambda e, d: 0.004)[0]["spending"][:37]
    'fail: its recorded steps spend ρ = 0.'
    """
    from scipy.stats import chi2, norm

    if allowed_rho is None:
        from censusrecon.synth.audit.statistics import opendp_rho as allowed_rho
    rows = np.asarray(rows, dtype=np.float64)
    if rows.ndim != 2 or rows.shape[1] not in (len(LEDGER), WIDTH) or not len(rows):
        raise ValueError(f"a spending ledger has one row of {len(LEDGER)} columns per fit ({', '.join(LEDGER)}), "
                         f"then the selections' chances ({WIDTH} in all); got shape {rows.shape}")
    chances = rows[:, len(LEDGER):].ravel() if rows.shape[1] == WIDTH else None
    c = {k: rows[:, i] for i, k in enumerate(LEDGER)}
    spent = c["rho_measurements"] + c["rho_selections"]
    declared = float(c["rho_declared"].max())
    eps_synth = float(c["epsilon_synthesizer"].max())
    allowed = float(allowed_rho(eps_synth, delta))
    worst = int(np.argmax(spent - c["rho_declared"]))
    unchosen = c["measurements"] - c["columns"] - c["selections"]
    info = {"fits": int(len(rows)), "rho_spent": round(float(spent.max()), 8), "rho_declared": round(declared, 8),
            "rho_allowed_opendp": round(allowed, 8), "epsilon_synthesizer": eps_synth,
            "rho_measurements": round(float(c["rho_measurements"][worst]), 8),
            "rho_selections": round(float(c["rho_selections"][worst]), 8),
            "measurements_per_fit": float(c["measurements"].mean()), "selections_per_fit": float(c["selections"].mean())}
    checks: dict[str, str] = {}
    if spent[worst] > c["rho_declared"][worst] * (1 + SLACK):
        checks["spending"] = (f"fail: its recorded steps spend ρ = {spent[worst]:.6g} in a fit (measurements "
                              f"{c['rho_measurements'][worst]:.6g}, selections {c['rho_selections'][worst]:.6g}), over "
                              f"the ρ = {c['rho_declared'][worst]:.6g} it declares for ε = {eps_synth:g}, δ = {delta:g}")
    elif declared > allowed * (1 + SLACK):
        checks["spending"] = (f"fail: it declares ρ = {declared:.6g} for ε = {eps_synth:g}, δ = {delta:g}, more than "
                              f"OpenDP's conversion allows ({allowed:.6g})")
    elif eps_synth > epsilon * (1 + SLACK):
        checks["spending"] = f"fail: the synthesizer is given ε = {eps_synth:g}, more than the release's {epsilon:g}"
    elif unchosen.max() > 0:
        checks["spending"] = (f"fail: {int(unchosen.max())} marginal(s) of a fit were measured without a recorded "
                              "selection choosing them: chosen from the data without paying for it")
    else:
        checks["spending"] = "pass"
    cells = float(c["noise_cells"].sum())
    ss = float(c["noise_ss"].sum())
    p_noise = float(chi2.cdf(ss, cells)) if cells else 1.0
    info.update(noise_cells=int(cells), noise_ss_over_cells=round(ss / cells, 6) if cells else None,
                noise_p_value=p_noise)
    if cells:
        info.update(_measured_rho(float(c["rho_measurements"].min()), ss, cells, confidence))
    checks["measurement_noise"] = ("pass" if p_noise >= 1 - confidence else
                                   f"fail: its measurements' noise is smaller than the σ they declare (Σ(noise/σ)² = "
                                   f"{ss:.4g} over {int(cells):,} cells, p = {p_noise:.2g}): they spend more than "
                                   "the ledger says")
    hits, expected, var = (float(c[k].sum()) for k in ("argmax_hits", "argmax_expected", "argmax_variance"))
    if chances is not None and c["selections"].max() <= SELECTIONS_KEPT:  # exact: the hits' Poisson-binomial law
        p_law = poisson_binomial_sf(chances[chances > 0], int(round(hits)))
        how = "exact"
    else:  # the normal approximation (conservative where chances are large: the hits cannot pass their number)
        z = (hits - expected) / math.sqrt(var) if var > 0 else 0.0
        p_law = float(norm.sf(z)) if var > 0 else (0.0 if hits > expected + 0.5 else 1.0)
        how = "normal approximation"
    info.update(selections=int(c["selections"].sum()), best_picked=int(hits), best_expected=round(expected, 3),
                selection_p_value=p_law, selection_test=how)
    checks["selection_law"] = (
        "pass" if p_law >= 1 - confidence else
        f"fail: its selections picked a best-scored marginal {int(hits)} times of {int(c['selections'].sum())}, where "
        f"the exponential mechanism at the ε it declares picks one {expected:.1f} times on average (p = {p_law:.2g}): "
        "the selection reads the data without its noise")
    if not c["selections"].sum():
        checks["selection_law"] = "not applicable: no selection was recorded"
    return checks, info


def _measured_rho(rho: float, ss: float, cells: float, confidence: float) -> dict:
    """The ρ the measurements' noise is shown to spend: a fit's recorded ``rho`` over an upper bound on the noise's
    variance as a share of the declared σ² (``ss`` = Σ(noise/σ)² over ``cells`` cells: over that share, χ² with one
    degree of freedom a cell).

    >>> _measured_rho(0.01, 4.0, 4, 0.5)["variance_share_upper"]  # ss at χ²'s median: the share's bound is ss / median
    1.191649
    """
    from scipy.stats import chi2

    v_up = ss / float(chi2.ppf(1 - confidence, cells))
    return {"rho_measured_lower": round(rho / v_up, 10) if v_up > 0 else math.inf,
            "variance_share_upper": round(v_up, 6)}


def poisson_binomial_sf(chances: np.ndarray, k: int) -> float:
    """P(S ≥ k) for S a sum of independent Bernoulli(chances): each selection's best-scored pick.

    >>> round(poisson_binomial_sf(np.full(4, 0.5), 4), 4), poisson_binomial_sf(np.array([0.2, 0.9]), 0)
    (0.0625, 1.0)
    """
    pmf = np.zeros(len(chances) + 1)
    pmf[0] = 1.0
    for q in np.clip(np.asarray(chances, dtype=np.float64), 0.0, 1.0):
        pmf[1:] = pmf[1:] * (1 - q) + pmf[:-1] * q
        pmf[0] *= 1 - q
    return float(min(1.0, pmf[max(k, 0):].sum()))


def selection_power(rows: np.ndarray) -> float:
    """How far a selection that always picks the best-scored candidate would stand from the law, in standard
    deviations, over the recorded selections: the selection law check's power on this ledger (about 3.5 is
    needed at the audit's confidence).

    >>> round(selection_power(np.array([[0, 0, 9, 5, 4, 0, 1, 2, 2.25, 0.71, 0, 0.5]] * 4)), 2)
    4.15
    """
    rows = np.asarray(rows, dtype=np.float64)
    sel, expected, var = (float(rows[:, LEDGER.index(k)].sum()) for k in ("selections", "argmax_expected",
                                                                          "argmax_variance"))
    return (sel - expected) / math.sqrt(var) if var > 0 else 0.0
