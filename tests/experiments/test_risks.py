"""anonymeter's risks of published microdata: run by the real package in its own environment, on the
right files (D as the original, D_holdout as the control), and said plainly when it cannot run."""

import numpy as np
import pandas as pd
import pytest

from censusrecon.experiments.release.risks import PYTHON_ENV, RiskJob, anonymeter_python, measure

needs_anonymeter = pytest.mark.skipif(anonymeter_python() is None, reason="no anonymeter environment (make risk-env)")


def _people(rng, n):
    return pd.DataFrame({"UNIT": rng.choice(["a", "b"], n), "BLOCK": rng.choice([f"{i:04d}" for i in range(12)], n),
                         "AGE": rng.integers(0, 90, n), "SEX": rng.choice(["M", "F"], n),
                         "RACE": rng.choice(list("WBAO"), n, p=[0.6, 0.2, 0.15, 0.05])})


@needs_anonymeter
def test_publishing_d_itself_is_a_risk_and_publishing_other_persons_is_not():
    rng = np.random.default_rng(0)
    D, control, others = _people(rng, 300), _people(rng, 300), _people(rng, 300)
    out, note = measure([RiskJob("leak", 1.0, D, D.copy(), control), RiskJob("others", 1.0, D, others, control)])
    assert note is None
    risk = out.set_index(["mechanism", "risk"])
    # the published file is D (in its own row order, as a swapped file keeps it): singling out and inference
    # succeed on D far beyond the control set, and beyond anonymeter's random guess
    for kind in ("singling_out", "inference:AGE", "inference:SEX", "inference:RACE"):
        assert risk.loc[("leak", kind), "ci_low"] > 0.3 and risk.loc[("leak", kind), "trusted"], kind
    # a file of other persons from the same population: no risk beyond the control set
    for kind in ("singling_out", "linkability", "inference:AGE", "inference:SEX", "inference:RACE"):
        assert risk.loc[("others", kind), "ci_low"] == 0.0, kind
    # where someone lives (UNIT, BLOCK) is what the attacker knows, never the secret
    assert set(out.risk) == {"singling_out", "linkability", "inference:AGE", "inference:SEX", "inference:RACE"}
    assert (out.ci_low <= out.value).all() and (out.value <= out.ci_high).all()
    # a rerun prints the same figures, anonymeter's random-guess baselines included
    again, _ = measure([RiskJob("others", 1.0, D, others, control)])
    pd.testing.assert_frame_equal(again.reset_index(drop=True), out[out.mechanism == "others"].reset_index(drop=True))


def test_without_anonymeter_the_risks_say_why_they_were_not_run(monkeypatch, tmp_path):
    monkeypatch.setenv(PYTHON_ENV, str(tmp_path / "no-python"))
    rng = np.random.default_rng(0)
    D = _people(rng, 20)
    out, note = measure([RiskJob("synthetic", 1.0, D, D, D)])
    assert len(out) == 0 and note.startswith("not run") and "make risk-env" in note
