"""The measured ε beside the declared one: hand-made cases with known answers for its figures, and the white box on a
real audit, honest and with its noise at 0.7 of its scale."""

import math

import numpy as np
import pytest
from scipy.optimize import brentq
from scipy.stats import chi2, norm

from censusrecon.synth.audit.measured import (
    WhiteBox,
    best_white_box,
    gaussian_white_box,
    gdp_epsilon,
    laplace_white_box,
    measured_summary,
)
from censusrecon.synth.audit.spending import LEDGER, check_spending
from censusrecon.synth.audit.statistics import AuditResult


def _exact_gdp_epsilon(mu: float, delta: float) -> float:
    """μ-GDP's ε at δ from its closed form (Dong, Roth and Su 2022, Corollary 2.13), solved by bisection."""
    return brentq(lambda e: norm.cdf(-e / mu + mu / 2) - math.exp(e) * norm.cdf(-e / mu - mu / 2) - delta, 0, 200)


@pytest.mark.parametrize("mu,delta", [(0.3, 1e-5), (1.0, 1e-9), (2.5, 1e-6)])
def test_the_epsilon_of_gaussian_dp_is_the_closed_forms_and_never_above_it(mu, delta):
    exact = _exact_gdp_epsilon(mu, delta)
    got = gdp_epsilon(mu, delta)
    assert got <= exact + 1e-9 and got == pytest.approx(exact, rel=2e-3)


def test_a_gaussian_white_box_is_mu_from_rho_against_the_declared_mu():
    """ρ = Δ²/2σ² is μ = √(2ρ): ρ = 0.5 is μ = 1; against a declared ρ of 0.72, μ 1.2; the share 1/1.2."""
    wb = gaussian_white_box(0.5, 0.72, 1e-9, "hand-made", 10)
    assert wb.value == pytest.approx(1.0) and wb.declared == pytest.approx(1.2)
    assert wb.ratio == pytest.approx(1 / 1.2) and wb.epsilon == pytest.approx(_exact_gdp_epsilon(1.0, 1e-9), rel=2e-3)
    assert WhiteBox.of(wb.as_dict()).value == pytest.approx(wb.value)


def test_a_delta_of_zero_for_gaussian_noise_is_a_one_line_error_naming_the_fix():
    for delta in (0.0, 1.0):
        with pytest.raises(ValueError, match=r"needs a δ in \(0, 1\).*set the program's or TopDown's delta") as e:
            gaussian_white_box(0.5, 1.0, delta, "x", 1)
        assert "\n" not in str(e.value)


def test_the_measured_epsilon_is_the_larger_bound_and_its_share_of_the_declared_one():
    loose = AuditResult("m", 2.0, 0.4, 1000, 0.95, "an event", {})
    s = measured_summary(loose)
    assert (s["epsilon"], s["share"], s["tight"], s["by"], s["white_box"]) == (0.4, 0.2, False, "black box", None)
    white = AuditResult("m", 2.0, 0.4, 1000, 0.95, "e", {}, {"white_box": laplace_white_box(1.8, 2.0, "t", 5).as_dict()})
    s = measured_summary(white)
    assert (s["epsilon"], s["share"], s["tight"], s["by"]) == (1.8, 0.9, True, "white box")
    # Gaussian: the share compares μ with the declared μ; the ε is the white box's at δ unless the black box is larger
    g = gaussian_white_box(0.32, 0.5, 1e-9, "g", 5)
    s = measured_summary(AuditResult("m", 4.0, 0.1, 10, 0.95, "e", {}, {"white_box": g.as_dict()}))
    assert s["share"] == pytest.approx(0.8) and s["epsilon"] == pytest.approx(g.epsilon, abs=1e-6)
    assert best_white_box([None, g.as_dict(), laplace_white_box(3.0, 4.0, "t", 1)]).law == "gaussian"  # 0.8 > 0.75


def _ledger(rho, ss, cells, fits=3):
    row = dict(rho_measurements=rho, rho_selections=0.0, measurements=5, columns=5, selections=0, noise_ss=ss,
               noise_cells=cells, argmax_hits=0, argmax_expected=0, argmax_variance=0, rho_declared=2 * rho,
               epsilon_synthesizer=1.0)
    return np.array([[row[k] for k in LEDGER]] * fits, dtype=np.float64)


def test_a_ledgers_measured_rho_is_its_recorded_rho_over_an_upper_bound_on_the_noises_variance():
    """Σ(noise/σ)² over n cells is χ²(n) when the noise is as declared: the variance's share of σ² is at most
    ss / χ²_{1−c}(n), and the ρ shown spent is the recorded ρ over it. Noise as declared: a little below the record;
    noise at half σ (a quarter of the variance): about four times it."""
    conf, cells = 0.99, 3000
    honest = check_spending(_ledger(0.01, cells / 3, cells / 3), 1.0, 1e-9, conf, lambda e, d: 1.0)[1]
    v_up = cells / chi2.ppf(1 - conf, cells)
    assert honest["rho_measured_lower"] == pytest.approx(0.01 / v_up, rel=1e-6) and 0.009 < honest[
        "rho_measured_lower"] < 0.01
    halved = check_spending(_ledger(0.01, cells / 12, cells / 3), 1.0, 1e-9, conf, lambda e, d: 1.0)[1]
    assert halved["rho_measured_lower"] == pytest.approx(0.04 / v_up, rel=1e-6)
