"""The inference attacks on hand-made cases with known answers: the informed likelihood-ratio test on one
discrete-Laplace count against its closed form, a generator that copies its rows against one that ignores
them, attribute inference where the secret is a function of the other attributes; and the one-line errors."""

import math

import numpy as np
import pandas as pd
import pytest

from censusrecon.experiments.config import parse_config
from censusrecon.experiments.release.inference_games import (INFORMED, REALISTIC, UnitGames, summarise_attribute,
                                                       summarise_membership)
from censusrecon.synth.audit.roc import GameError, auc, clopper_pearson, dp_tpr_bound, tpr_at_fpr
from censusrecon.microdata.dataset import Dataset
from censusrecon.microdata.domain import Domain
from censusrecon.microdata.marginals import Workload
from censusrecon.reconstruct.inference import InferenceError, NoiseLaw, linear_reconstruction
from censusrecon.synth.keyed import KeyedNoise
from censusrecon.synth.release_draws import Drawer
from censusrecon.synth.publishing import Draw
from censusrecon.synth.release import workload_counts
from censusrecon.synth.release_path import ReleaseSpec, publish
from censusrecon.synth.release_settings import InferenceConfig


def _games(D, workload, *, H=None, reference=None, replace=False, secret=None, **settings):
    s = InferenceConfig(**settings)
    H = H if H is not None else Dataset(D.domain, np.zeros((0, len(D.domain)), np.int64))
    return UnitGames(D, H, workload, workload_counts(D, workload), reference, s, replace, ("test",),
                     secret or D.domain.names[-1])


def test_the_informed_test_on_one_discrete_laplace_count_meets_its_closed_form():
    """One count, add-remove (sensitivity 1), discrete Laplace of scale b = 1/ε: the likelihood ratio is e^(±1/b),
    so the randomised test at FPR f finds TPR = e^(1/b)·f (DP's bound, met exactly) while f ≤ P(noise ≥ 1). The
    game, drawn through the mechanism's own publishing function, finds it within its Monte Carlo interval."""
    dom = Domain.from_sizes({"A": 2})
    D = Dataset(dom, np.array([[0]] * 30 + [[1]] * 20))
    w = Workload(dom, (("A",),))
    spec = ReleaseSpec.of(parse_config({"name": "x", "release": {"relation": "add_remove",
                                                                 "mechanisms": ["laplace_tables"]}}))
    eps, f = 1.0, 0.1
    keyed = KeyedNoise(11)
    one = publish(spec, "laplace_tables", eps, D, w, Draw(keyed, np.random.default_rng(0)))
    b = float(one.record.scale)
    assert one.record.sensitivity == 1 and b == pytest.approx(1 / eps)
    drawer = Drawer(lambda data, releases, cells: publish(
        spec, "laplace_tables", eps, data, w, Draw(keyed, np.random.default_rng(0), runs=releases, cells=cells)
    ).output.counts, law=NoiseLaw("discrete_laplace", b), releases=20_000)
    games = _games(D, w, informed_targets=2)
    scores = games.informed(drawer, ("u", False, "laplace_tables", eps))
    ins, outs = (scores.loc[scores["member"] == m, "score"].to_numpy() for m in (True, False))
    assert set(np.round(ins, 9)) <= {round(1 / b, 9), round(-1 / b, 9)}  # one count: the ratio takes two values
    op = tpr_at_fpr(ins, outs, f, rng=np.random.default_rng(3))
    alpha = math.exp(-1 / b)
    assert f <= alpha / (1 + alpha)  # within the range where the closed form holds
    closed = math.exp(1 / b) * op.fpr  # the closed form at the FPR the test met
    sd = math.sqrt(op.tpr * (1 - op.tpr) / op.members + math.exp(2 / b) * op.fpr * (1 - op.fpr) / op.non_members)
    assert abs(op.tpr - closed) <= 3 * sd, (op.tpr, closed, sd)
    lo, hi = clopper_pearson(op.false_pos, op.non_members, 0.999)
    assert lo <= f <= hi  # the test meets the FPR asked
    assert op.tpr <= dp_tpr_bound(eps, op.fpr_high)  # and stays within DP's bound


def test_a_generator_that_copies_its_rows_is_found_and_one_that_ignores_them_is_not():
    """Every record unique: a release of D's own rows gives its members away (TPR near 1 at 1% FPR); rows drawn
    whatever the data give TPR about the FPR."""
    rng = np.random.default_rng(0)
    dom = Domain.from_sizes({"ID": 5000, "A": 3})
    ids = rng.permutation(5000)
    D, H, ref = (Dataset(dom, np.stack([ids[a:b], rng.integers(0, 3, b - a)], axis=1))
                 for a, b in ((0, 600), (600, 1200), (1200, 4200)))
    w = Workload(dom, (("A",),))
    games = _games(D, w, H=H, reference=ref)
    tag = ("u", False, "copy", 1.0)
    copied = games.realistic(workload_counts(D, w).astype(float), tag, rows=D)
    ignored_rows = Dataset(dom, np.stack([rng.integers(0, 5000, 600), rng.integers(0, 3, 600)], axis=1))
    ignored = games.realistic(workload_counts(ignored_rows, w).astype(float), ("u", False, "ignore", 1.0),
                              rows=ignored_rows)
    m = summarise_membership(pd.concat([copied, ignored]), 0.01).set_index(["mechanism", "group"])
    assert m.loc[("copy", "random"), "tpr"] > 0.95 and m.loc[("copy", "random"), "auc"] > 0.99
    ig = m.loc[("ignore", "random")]
    assert ig["tpr_low"] <= 0.03 and abs(ig["auc"] - 0.5) < 0.06  # about a guess's


def test_attribute_inference_recovers_a_secret_that_the_other_attributes_determine():
    """S = AGE mod 3: the exact AGE × S table has a zero wherever S is not AGE's, so the linear program is
    forced to the truth: accuracy 1, while the best guess from outside data that ignores AGE cannot be."""
    rng = np.random.default_rng(1)
    dom = Domain.from_sizes({"AGE": 12, "SEX": 2, "S": 3})

    def people(n):
        age = rng.integers(0, 12, n)
        return np.stack([age, rng.integers(0, 2, n), age % 3], axis=1)
    D = Dataset(dom, people(300))
    w = Workload.all_kway(dom, 2)
    outside = people(500)
    outside[:, 2] = rng.integers(0, 3, 500)  # outside data where S says nothing of AGE
    ref = Dataset(dom, outside)
    games = _games(D, w, reference=ref, secret="S")
    rows = games.attribute(workload_counts(D, w).astype(float), ("u", False, "exact", math.inf))
    a = summarise_attribute(rows).set_index("group").loc["random"]
    assert a["accuracy"] == 1.0 and a["guess_accuracy"] < 0.5 and a["excess_lower"] > 0.5
    # and the function alone, from the docstring's case up
    assert (linear_reconstruction(w, workload_counts(D, w), D.codes, 2) == D.codes[:, 2]).all()


def test_the_roc_figures_on_hand_counts():
    assert auc(np.array([2, 3]), np.array([1, 2])) == 0.875
    assert dp_tpr_bound(1.0, 0.01) == pytest.approx(math.e * 0.01)
    assert dp_tpr_bound(0.0, 0.2) == pytest.approx(0.2)
    # two separated groups: every member called; the held-out non-members called about as often as asked
    op = tpr_at_fpr(np.full(100, 50.0), np.arange(4000.0) / 100, 0.01)
    assert op.tpr == 1.0 and op.non_members == 2000 and op.fpr_low <= 0.01 <= op.fpr_high


@pytest.mark.parametrize("fpr", [0.0, 1.0, -0.1, 1.5])
def test_an_fpr_outside_0_1_is_refused_in_one_line(fpr):
    with pytest.raises(GameError, match=r"a share in \(0, 1\)") as e:
        tpr_at_fpr(np.ones(3), np.zeros(3), fpr)
    assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match=r"release.inference.fpr is a false-positive rate in \(0, 1\)"):
        parse_config({"name": "x", "release": {"inference": {"fpr": fpr}}})


@pytest.mark.parametrize("key", ["membership_advantage", "attribute", "informed_membership"])
def test_a_negative_tolerance_is_refused_in_one_line(key):
    with pytest.raises(ValueError, match=rf"release.tolerance.{key} is a share in \[0, 1\), got -0.1: give e.g."):
        parse_config({"name": "x", "release": {"tolerance": {key: -0.1}}})


def test_a_game_with_no_targets_says_so():
    dom = Domain.from_sizes({"A": 2})
    empty = Dataset(dom, np.zeros((0, 1), np.int64))
    games = _games(empty, Workload(dom, (("A",),)))
    with pytest.raises(GameError, match="no targets"):
        games.informed(Drawer(lambda *a: None), ("u", False, "m", 1.0))
    with pytest.raises(GameError, match="members and at least two non-members"):
        tpr_at_fpr(np.array([1.0]), np.array([]), 0.01)


def test_a_noise_law_is_a_known_family_with_a_positive_scale():
    with pytest.raises(InferenceError, match="discrete_laplace or gaussian"):
        NoiseLaw("cauchy", 1.0)
    with pytest.raises(InferenceError, match="positive number"):
        NoiseLaw("gaussian", 0.0)


def test_an_informed_tolerance_on_a_program_without_a_noise_law_is_refused_in_one_line():
    raw = {"name": "x", "release": {"tolerance": {"informed_membership": 0.05},
                                    "programs": [{"name": "p", "function": "m:f"}]}}
    with pytest.raises(ValueError, match="declares no noise law") as e:
        parse_config(raw)
    assert "release.programs[].noise" in str(e.value)


def inference_figures(settings: dict, advantage_upper: float = 0.0, excess_upper: float = -0.1,
                      variant=False) -> dict:
    """Hand-made figures of the inference attacks for a decision (``Evidence(membership=..., attribute=...)``):
    every mechanism at every setting of ``settings`` ({mechanism: [setting, ...]}), its realistic advantage's and
    attribute excess's upper limits as given (within the default tolerances unless told otherwise)."""
    m, a = [], []
    for mech, values in settings.items():
        for s in values:
            for group in ("random", "atypical"):
                m.append({"variant": variant, "mechanism": mech, "setting": float(s), "attack": REALISTIC,
                          "adversary": "realistic", "group": group, "members": 1000, "non_members": 500,
                          "tpr_low_fpr": 0.001, "tpr": 0.01, "tpr_low": 0.005, "tpr_high": 0.015, "fpr": 0.01,
                          "advantage": 0.0, "advantage_upper": advantage_upper, "advantage_lower": -0.01,
                          "auc": 0.5, "epsilon_lower_bound": 0.0, "dp_bound": 1.0, "units": 3})
                a.append({"variant": variant, "mechanism": mech, "setting": float(s), "attack": "attribute_linear",
                          "adversary": "realistic", "group": group, "persons": 1000, "accuracy": 0.5,
                          "guess_accuracy": 0.6, "excess": excess_upper - 0.05, "excess_upper": excess_upper,
                          "excess_lower": excess_upper - 0.1, "units": 3})
    return {"membership": pd.DataFrame(m), "attribute": pd.DataFrame(a)}


def test_too_few_non_members_read_no_tpr_at_the_fpr_and_the_gate_says_why():
    """A game of 64 releases a world cannot set a test at 1% FPR (its calibration half holds 32): no TPR is read
    there, its AUC still is, and the rule's gate says what is missing instead of passing."""
    from censusrecon.experiments.release.inference_verdict import gates
    from censusrecon.synth.release_settings import ToleranceConfig

    rng = np.random.default_rng(0)
    scores = pd.DataFrame({"attack": REALISTIC, "group": "random", "target": 0, "unit": "u", "variant": False,
                           "mechanism": "laplace_tables", "setting": 1.0,
                           "member": np.r_[np.ones(64, bool), np.zeros(64, bool)],
                           "score": np.r_[rng.normal(1, 1, 64), rng.normal(0, 1, 64)]})
    m = summarise_membership(scores, 0.01)
    row = m[m["group"] == "random"].iloc[0]
    assert math.isnan(row["tpr"]) and row["needs"] == 200 and 0.6 < row["auc"] < 0.9
    (g, _) = gates("laplace_tables", [1.0], m, pd.DataFrame(), pd.DataFrame(), ToleranceConfig())
    assert g.attack == REALISTIC and g.status == "not_run" and "too few non-members" in g.note and "200" in g.note


def test_a_linear_reconstruction_too_large_to_solve_is_refused_in_one_line():
    dom = Domain.from_sizes({"A": 50, "S": 10})
    codes = np.stack([np.arange(50), np.zeros(50, np.int64)], axis=1)
    w = Workload(dom, (("A", "S"),))
    with pytest.raises(InferenceError, match=r"500 unknowns .* over 100: choose a secret with fewer values") as e:
        linear_reconstruction(w, workload_counts(Dataset(dom, codes), w), codes, 1, max_unknowns=100)
    assert "\n" not in str(e.value)
