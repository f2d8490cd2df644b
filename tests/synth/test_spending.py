"""The spending ledger's checks (synth/audit/spending.py) on hand-made ledgers with known answers: each way of
overspending fails its check, an honest ledger passes, and the figures are the ledger's."""

import numpy as np
import pytest

from censusrecon.synth.audit.spending import LEDGER, check_spending

ALLOWED = lambda eps, delta: 0.004  # noqa: E731  (a conversion's ρ for the synthesizer's (ε, δ), made up)


def _ledger(fits=3, **change):
    row = dict(rho_measurements=0.002, rho_selections=0.001, measurements=9, columns=5, selections=4,
               noise_ss=2924.0, noise_cells=2924, argmax_hits=2, argmax_expected=2.2, argmax_variance=0.7,
               rho_declared=0.003, epsilon_synthesizer=0.475)
    row.update(change)
    return np.array([[row[k] for k in LEDGER]] * fits, dtype=float)


def test_an_honest_ledger_passes_and_its_figures_are_the_ledgers():
    checks, info = check_spending(_ledger(), 0.5, 1e-9, 0.999, ALLOWED)
    assert checks == {"spending": "pass", "measurement_noise": "pass", "selection_law": "pass"}
    assert info["rho_spent"] == 0.003 and info["rho_declared"] == 0.003 and info["noise_cells"] == 3 * 2924
    assert info["selections"] == 12 and info["best_picked"] == 6


@pytest.mark.parametrize("change, check, says", [
    (dict(rho_selections=0.0011), "spending", "over the ρ = 0.003 it declares"),       # a round not counted
    (dict(rho_declared=0.005, rho_selections=0.003), "spending", "more than OpenDP's conversion allows"),
    (dict(epsilon_synthesizer=0.6), "spending", "more than the release's 0.5"),
    (dict(selections=3), "spending", "measured without a recorded selection"),         # chosen from the data
    (dict(noise_ss=731.0), "measurement_noise", "smaller than the σ they declare"),    # half the noise: 1/4
    (dict(argmax_hits=4), "selection_law", "picked a best-scored marginal 12 times of 12"),
])
def test_each_way_of_spending_more_than_declared_fails_its_check(change, check, says):
    checks, _ = check_spending(_ledger(**change), 0.5, 1e-9, 0.999, ALLOWED)
    assert checks[check].startswith("fail: ") and says in checks[check], checks[check]
    assert [k for k, v in checks.items() if v.startswith("fail")] == [check], checks


def test_noise_within_chance_of_its_declared_sigma_passes_and_a_malformed_ledger_is_refused():
    rng = np.random.default_rng(0)
    cells = 2924
    ss = float((rng.standard_normal(3 * cells) ** 2).sum()) / 3  # what correct noise gives, per fit
    assert check_spending(_ledger(noise_ss=ss), 0.5, 1e-9, 0.999, ALLOWED)[0]["measurement_noise"] == "pass"
    with pytest.raises(ValueError, match="one row of 12 columns per fit"):
        check_spending(np.zeros((2, 5)), 0.5, 1e-9, 0.999, ALLOWED)


def test_the_selection_law_is_tested_exactly_on_each_selections_chance():
    """With each selection's chance of a best pick in the ledger, the test is the exact Poisson-binomial tail: a
    best pick every time among 12 selections of chance 0.5 has probability 0.5^12 = 2.4e-4."""
    from censusrecon.synth.audit.spending import SELECTIONS_KEPT, WIDTH

    base = _ledger(fits=3, argmax_hits=4, argmax_expected=2.0, argmax_variance=1.0)
    chances = np.zeros((3, SELECTIONS_KEPT))
    chances[:, :4] = 0.5
    rows = np.hstack([base, chances])
    assert rows.shape[1] == WIDTH
    checks, info = check_spending(rows, 0.5, 1e-9, 0.999, ALLOWED)
    assert info["selection_test"] == "exact" and info["selection_p_value"] == pytest.approx(0.5 ** 12)
    assert checks["selection_law"].startswith("fail: ")
    checks, info = check_spending(rows, 0.5, 1e-9, 0.9999, ALLOWED)  # 2.4e-4 is within chance at 1e-4
    assert checks["selection_law"] == "pass"
