"""One decision, the same everywhere: computed once per mechanism from the verdict, the audit, the backend
and the risks; rendered by the terminal, report.md, report.html and the exit status alike; never an
interval beside a verdict that it contradicts; a finished evaluation is not run again."""

import json
import math
import re
from pathlib import Path

import pandas as pd
import pytest

from censusrecon.experiments.cli import EXIT_AUDIT_FAILED, EXIT_DO_NOT_PUBLISH, EXIT_UNDECIDED, main
from censusrecon.experiments.config import ToleranceConfig, load_config
from censusrecon.experiments.release.decision import (CANNOT_DECIDE, DO_NOT_PUBLISH, Evidence, EXIT_AUDIT_FAILED as D_FAILED,
                                          EXIT_CANNOT_DECIDE, EXIT_DO_NOT_PUBLISH as D_NO, PUBLISH, decide,
                                          load_decision, terminal_lines)
from censusrecon.experiments.release.evaluate import verdicts_of
from censusrecon.experiments.release.release_report import release_persons, summarise_release_persons
from censusrecon.synth.audit.statistics import AuditResult
from tests.experiments.test_inference import inference_figures
from tests.experiments.test_release import _hand_made

ROOT = Path(__file__).resolve().parents[2]


def test_the_cli_and_the_decision_agree_on_exit_statuses():
    assert (EXIT_AUDIT_FAILED, EXIT_DO_NOT_PUBLISH, EXIT_UNDECIDED) == (D_FAILED, D_NO, EXIT_CANNOT_DECIDE)


def _cfg(**release):
    over = [f"release.{k}={v}" for k, v in release.items()]
    return load_config(ROOT / "configs" / "release_tiny.yaml",
                       ["release.mechanisms=[laplace_tables]", "release.epsilons=[1.0, 8.0]", *over])


#: the attack that decides the hand-made verdicts, as a PUBLISH line names it
DECIDED = " (decided by reconstruction: one_way_margins, rap_rank)"
#: the hand-made units (tests/experiments/test_release.py's _hand_made)
UNITS = ["a", "b", "c"]


def _audit(outcome="passed", eps=1.0, units=UNITS, with_block=False, through="laplace_tables"):
    """One audit result of laplace_tables at ``eps``, as audit_release files it: its variant, the units it audited
    and the mechanism whose publishing function drew its releases."""
    checks = {"noise_scale": "pass"}
    if outcome == "failed":
        checks = {"noise_scale": "fail: ε ≥ 8.0"}
    elif outcome == "inconclusive":
        checks = {"noise_scale": "pass", "bound_power": "not run: 10 releases certify no ε"}
    details = {"with_block": with_block, "audited_units": list(units), "published_through": through}
    if outcome == "inconclusive":
        details["runs_to_certify"] = 60
    return AuditResult("laplace_tables", eps, min(0.2, eps / 2), 1000, 0.95, "e", checks, details)


def _decide(persons, cfg, *, fit=True, audits=None, rows=(), risks=None, note=None, units_in_file=8,
            released=UNITS, inference=None):
    entry = {"mechanism": "laplace_tables", "for_publication": fit,
             "publication_note": "OpenDP discrete Laplace" if fit else "seeded simulation noise: for studies, not for "
             "publication"}
    verdicts = verdicts_of(persons, pd.DataFrame(), {}, cfg.release.tolerance, units_in_file)
    if inference is None:  # the inference attacks within their tolerances at every setting
        inference = inference_figures({"laplace_tables": cfg.release.epsilons})
    return decide(cfg, Evidence(verdicts, [_audit()] if audits is None else audits, [entry], frozenset(rows),
                                risks if risks is not None else pd.DataFrame(), note, units_in_file,
                                released=tuple(released), **inference))


@pytest.fixture
def safe_at_one():
    """ε = 1 shown safe at 3 persons per unit (upper limit 2.686), ε = 8 not (hand-made, test_release.py)."""
    tol = ToleranceConfig(per_unit=3)
    return summarise_release_persons(release_persons(_hand_made([40, 45, 42], [30, 33, 32])), tol), tol


def test_every_gate_decides_the_headline_and_the_exit_status(safe_at_one):
    persons, _ = safe_at_one
    cfg = _cfg(**{"tolerance": "{per_unit: 3}"})
    d = _decide(persons, cfg)
    (m,) = d.mechanisms
    assert m.action == PUBLISH and m.setting == 1.0 and d.exit_status() == 0
    assert d.lines() == ["PUBLISH laplace_tables at ε ≤ 1" + DECIDED]
    # the partial outcome's next step: the ε between, and the units that would decide ε = 8
    assert "between ε = 1 and ε = 8 were not evaluated" in m.next_step and "ε = 2.8" in m.next_step
    assert "units would show ε = 8" in m.next_step or "this file cannot show ε = 8" in m.next_step
    # the simulation backend: never publishable, whatever the verdict, and the next step names the backend
    d = _decide(persons, cfg, fit=False)
    assert d.mechanisms[0].action == DO_NOT_PUBLISH and d.exit_status() == D_NO
    assert d.lines()[0].startswith("DO NOT PUBLISH laplace_tables: noise from the simulation backend")
    assert d.lines()[0].endswith("(as a study: shown safe up to ε = 1)")  # the answer a study came for, on its line
    assert "release.backend: opendp" in d.mechanisms[0].next_step
    # a failed audit: do not publish, exit 4; an inconclusive or missing one: cannot decide, exit 3
    d = _decide(persons, cfg, audits=[_audit("failed")])
    assert d.mechanisms[0].action == DO_NOT_PUBLISH and d.exit_status() == D_FAILED
    assert "audit of the code that publishes it failed" in d.lines()[0]
    d = _decide(persons, cfg, audits=[_audit("inconclusive")])
    assert d.mechanisms[0].action == CANNOT_DECIDE and d.exit_status() == EXIT_CANNOT_DECIDE
    assert "its audit at ε = 1 is inconclusive" in d.lines()[0]
    assert "about 60 releases per neighbour" in d.mechanisms[0].next_step
    d = _decide(persons, cfg, audits=[])
    assert d.mechanisms[0].action == CANNOT_DECIDE and "its audit did not check ε = 1" in d.lines()[0]
    # rows published whose risks were not measured: cannot decide; measured: publishable
    d = _decide(persons, cfg, rows={"laplace_tables"}, note="not run: anonymeter is not installed")
    assert d.mechanisms[0].action == CANNOT_DECIDE and "risks of the rows it publishes" in d.lines()[0]
    assert "make risk-env" in d.mechanisms[0].next_step
    d = _decide(persons, cfg, rows={"laplace_tables"}, risks=pd.DataFrame({"mechanism": ["laplace_tables"]}))
    assert d.mechanisms[0].action == PUBLISH
    # every closed gate is listed, the decided "no" first
    d = _decide(persons, cfg, fit=False, audits=[_audit("inconclusive")])
    assert d.mechanisms[0].action == DO_NOT_PUBLISH and len(d.mechanisms[0].reasons) == 2


def test_publish_names_only_the_epsilon_the_units_and_the_mechanism_the_audit_checked(safe_at_one):
    """ε = 1 is shown safe (ε = 8 not). An audit that passed at ε = 8 alone, on other units, of the other variant,
    or drawn through another mechanism's publishing function never makes it PUBLISH: CANNOT DECIDE, with the
    step that would cover it; a sample of units the user asked for is covered and named."""
    persons, _ = safe_at_one
    cfg = _cfg(**{"tolerance": "{per_unit: 3}"})
    for audits, said, step in (
            ([_audit(eps=8.0)], "its audit did not check ε = 1", "add it to release.audit.epsilons"),
            ([], "its audit did not check ε = 1", "add it to release.audit.epsilons"),
            ([_audit(units=["x", "y", "z"])], "3 of its 3 released units were not audited", "release.audit.units: all"),
            ([_audit(units=["a", "b"])], "1 of its 3 released units was not audited at ε = 1 (c)",
             "release.audit.units: all"),
            ([_audit(with_block=True)], "its audit did not check ε = 1", "release.audit.epsilons"),
            ([_audit(through="synthetic")], "through another publishing function (synthetic)", "its own"),
            ([_audit("inconclusive")], "its audit at ε = 1 is inconclusive", "about 60 releases per neighbour")):
        d = _decide(persons, cfg, audits=audits)
        (m,) = d.mechanisms
        assert m.action == CANNOT_DECIDE and m.setting is None and d.exit_status() == EXIT_CANNOT_DECIDE, audits
        assert said in m.reasons[0] and step in m.next_step, (m.reasons, m.next_step)
    # an audit at ε = 1 that passed, and one at ε = 8 that is inconclusive: ε = 1 is what PUBLISH names
    d = _decide(persons, cfg, audits=[_audit(), _audit("inconclusive", eps=8.0)])
    assert d.lines() == ["PUBLISH laplace_tables at ε ≤ 1" + DECIDED]
    # a sample of units, asked for: PUBLISH covers those and says so
    sample = _cfg(**{"tolerance": "{per_unit: 3}", "audit": "{units: 4}"})
    d = _decide(persons, sample, audits=[_audit(units=["a", "b"])], released=["a", "b", "c", "d", "e", "f"])
    (m,) = d.mechanisms
    assert m.action == PUBLISH and m.units_covered == ["a", "b"]
    assert d.lines() == ["PUBLISH laplace_tables at ε ≤ 1, for the 2 audited units of 6 (a, b): the others were "
                         "not audited" + DECIDED]
    assert any("covers those units only" in c for c in m.caveats)
    # the grid 0.1, 1, 8 shown safe to 1, audited at its extremes: PUBLISH names ε = 0.1, and says why not 1
    grid = _cfg(**{"tolerance": "{per_unit: 3}", "epsilons": "[0.1, 1.0, 8.0]"})
    per = release_persons(_hand_made([40, 45, 42], [30, 33, 32]))
    low = per[per.setting == 1.0].assign(setting=0.1)
    s = summarise_release_persons(pd.concat([low, per], ignore_index=True), ToleranceConfig(per_unit=3))
    d = _decide(s, grid, audits=[_audit(eps=0.1), _audit(eps=8.0)])
    (m,) = d.mechanisms
    assert m.action == PUBLISH and m.setting == 0.1 and d.lines() == ["PUBLISH laplace_tables at ε ≤ 0.1" + DECIDED]
    assert any("shown safe up to ε = 1, but audit did not check ε = 1" in c for c in m.caveats), m.caveats
    d = _decide(s, grid, audits=[_audit(eps=0.1), _audit(eps=1.0)])
    assert d.lines() == ["PUBLISH laplace_tables at ε ≤ 1" + DECIDED]
    d = _decide(s, grid, audits=[_audit(eps=1.0)])  # 0.1 not audited: PUBLISH names ε = 1 alone, not "ε ≤ 1"
    assert d.lines() == ["PUBLISH laplace_tables at ε = 1" + DECIDED]


def test_shown_above_the_tolerance_is_do_not_publish_and_undecided_is_cannot_decide():
    per = release_persons(_hand_made([40, 45, 42], [30, 33, 32]))
    cfg = _cfg()
    d = _decide(summarise_release_persons(per[per.setting != 1.0]), cfg)  # ε = 8 alone, far above 1%
    assert d.mechanisms[0].action == DO_NOT_PUBLISH and "shown above the tolerance" in d.lines()[0]
    assert "smaller ε" in d.mechanisms[0].next_step
    d = _decide(summarise_release_persons(release_persons(_hand_made([10, 12, 11], [30, 33, 32]))), cfg)
    assert d.mechanisms[0].action == CANNOT_DECIDE and "not beyond the best guess" in d.lines()[0]


def test_advice_never_asks_for_more_units_than_the_file_has(safe_at_one):
    persons = summarise_release_persons(release_persons(_hand_made([40, 45, 42], [30, 33, 32])),
                                        ToleranceConfig(per_unit=2))
    cfg = _cfg(**{"tolerance": "{per_unit: 2}"})
    # ε = 1 needs about 8 units (test_release.py); a file of 5 cannot give them
    d = _decide(persons, cfg, units_in_file=5)
    assert "this file cannot show ε = 1 safe at this tolerance" in d.mechanisms[0].next_step
    assert "8 units" not in d.mechanisms[0].next_step.replace("about 8 units would be needed", "")
    d = _decide(persons, cfg, units_in_file=50)
    assert "about 8 units would show ε = 1 safe (3 evaluated of the 50 in the file" in d.mechanisms[0].next_step


_RULE = re.compile(r"(upper|lower) one-sided 95% limit of the excess ([+-]?[0-9.]+|[+−]∞)\S* .*?"
                   r"(not below|below|above) the ([0-9.]+)%? tolerated")


def _check_lines(lines: list[str]) -> int:
    """Every limit a line compares with the tolerance is on the side the line says; every two-sided
    interval is on a line that says it is the estimate's, or the exact tables' for cannot decide."""
    checked = 0
    for line in lines:
        for side, value, says, tol in _RULE.findall(line):
            v, t = float(value.replace("−", "-").replace("∞", "inf")), float(tol)
            assert {"below": v < t, "not below": v >= t, "above": v > t}[says], line
            checked += 1
        if "interval" in line:
            assert ("estimate (not the rule)" in line or "on the exact tables the two-sided" in line
                    or line.startswith("exact tables")), line
        if line.startswith("exact tables"):  # the yardstick's rule says which measure decides and its outcome
            m = re.search(r"interval of the excess, ([+-][0-9.]+)%? to .* is (not )?above 0, so the evaluation "
                          r"(can|cannot) decide", line)
            assert m and (float(m.group(1)) > 0) == (m.group(2) is None) == (m.group(3) == "can"), line
            checked += 1
    return checked


def test_no_terminal_line_prints_an_interval_that_contradicts_its_verdict():
    """The review's case: shown above the tolerance by the lower one-sided limit while the two-sided
    interval's lower end is below it. The rule's line prints the one-sided limit; the interval is the
    estimate's, labelled so, on a line of its own."""
    per = release_persons(_hand_made([40, 45, 42], [30, 33, 32]))
    # ε = 8: differences 20, 21, 21 per unit: one-sided lower limit 19.69 above 19.5 tolerated, the two-sided
    # interval's lower end 19.23 below it
    tol = ToleranceConfig(per_unit=19.5)
    s = summarise_release_persons(per[per.setting != 1.0], tol)
    x = s[(s.attack == "best attack") & (s.setting == 8.0)].iloc[0]
    assert x.excess_lower > 19.5 > x.ci_low
    cfg = _cfg(**{"tolerance": "{per_unit: 19.5}"})
    d = _decide(s, cfg)
    assert d.mechanisms[0].action == DO_NOT_PUBLISH
    lines = terminal_lines(d)
    rule = next(line for line in lines if line.startswith("    rule:"))
    assert "lower one-sided 95% limit of the excess +19.7" in rule and "above the 19.5 tolerated" in rule
    estimate = next(line for line in lines if "estimate" in line)
    assert "estimate (not the rule)" in estimate and "two-sided 95% interval +19.2" in estimate
    assert _check_lines(lines) >= 1
    for tolerance, per_ in ((3, per), (2, per), (None, per)):  # safe + not shown safe next; not shown safe; shares
        t = ToleranceConfig(per_unit=tolerance) if tolerance else ToleranceConfig()
        c = _cfg(**({"tolerance": f"{{per_unit: {tolerance}}}"} if tolerance else {}))
        lines = terminal_lines(_decide(summarise_release_persons(per_, t), c))
        assert _check_lines(lines) >= 1, lines


def test_a_saved_decision_renders_the_same(safe_at_one, tmp_path):
    persons, _ = safe_at_one
    d = _decide(persons, _cfg(**{"tolerance": "{per_unit: 3}"}))
    d.save(tmp_path)
    back = load_decision(tmp_path)
    assert back.lines() == d.lines() and back.exit_status() == d.exit_status()
    assert terminal_lines(back) == terminal_lines(d)
    assert json.loads((tmp_path / "decision.json").read_text())["lines"] == d.lines()


def _first_screen(md: str) -> list[str]:
    """The report's decision lines: the bold bullets right under '## Decision'."""
    after = md.split("## Decision", 1)[1].strip().splitlines()
    out = []
    for line in after:
        if not line.startswith("- **"):
            break
        out.append(line.removeprefix("- **").removesuffix("**"))
    return out


@pytest.fixture(scope="module")
def example_inputs(tmp_path_factory):
    from censusrecon.microdata.example import write_agency_example

    d = tmp_path_factory.mktemp("example")
    persons, blocks = write_agency_example(d / "inputs")
    small = ["attack.runs=2", "attack.steps=20", "attack.rows=60", "target.units=2", "grid_points=10",
             "release.epsilons=[8.0]", "release.audit.runs=5000", "release.mechanisms=[laplace_tables, synthetic]",
             "release.inference.informed_targets=2", "release.inference.informed_releases=40",
             "release.inference.informed_fits=2", f"data.path={persons}", f"data.units_file={blocks}"]
    return d, small


# the simulation backend's end (every mechanism DO NOT PUBLISH, the next step naming the backend) is decide()'s,
# tested on hand-made figures above; the whole command on it is the slow tier's
@pytest.mark.parametrize("backend", [pytest.param("simulation", marks=pytest.mark.slow(seconds=60)), "opendp"])
def test_terminal_report_and_exit_status_agree_on_the_example(example_inputs, backend, capsys):
    """configs/agency/example.yaml (whole units: the default for one's own file) on both backends: the
    terminal's first verdict line, the report's first screen (Markdown and HTML) and the exit status all
    say the saved decision."""
    d, small = example_inputs
    cfg = str(ROOT / "configs" / "agency" / "example.yaml")
    sets = [x for o in small + [f"release.backend={backend}"] for x in ("--set", o)]
    out = d / f"results-{backend}"
    status = main(["evaluate-release", cfg, "--out", str(out), "--no-progress", *sets])
    said = capsys.readouterr()
    rel = next((out / "agency_example").iterdir()) / "release"
    decision = load_decision(rel)
    lines = said.out.splitlines()
    assert lines[0].startswith("DECISION (") and lines[1:1 + len(decision.lines())] == [
        "  " + x for x in decision.lines()]
    assert status == decision.exit_status()
    md = (rel / "report.md").read_text()
    assert _first_screen(md) == decision.lines()
    page = (rel / "report.html").read_text()
    first = decision.lines()[0].split(":")[0]
    assert 0 <= page.find(first) < page.find("What ran")
    assert "whole" in md.split("## What ran", 1)[1][:2000]  # whole units, not a random half
    synthetic = next(m for m in decision.mechanisms if m.mechanism == "synthetic")
    assert synthetic.action != PUBLISH  # its rows' risks cannot be measured on whole units
    if backend == "simulation":
        assert status == EXIT_DO_NOT_PUBLISH and all(m.action == DO_NOT_PUBLISH for m in decision.mechanisms)
        assert "DO NOT PUBLISH" in said.err
    _check_lines(lines)
    # a rerun of the finished evaluation changes no file, and prints the same
    before = {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in out.rglob("*") if p.is_file()}
    assert main(["evaluate-release", cfg, "--out", str(out), "--no-progress", *sets]) == status
    again = capsys.readouterr()
    assert "already evaluated" in again.err and again.out.splitlines()[:3] == lines[:3]
    assert {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in out.rglob("*") if p.is_file()} == before
    # asked to: the audit runs again, the earlier report is kept
    assert main(["evaluate-release", cfg, "--out", str(out), "--no-progress", "--reaudit", *sets]) == status
    capsys.readouterr()
    kept = list((rel / "earlier").iterdir())
    assert len(kept) == 1 and {"report.md", "report.html", "audit.json", "decision.json"} <= {
        p.name for p in kept[0].iterdir()}


def test_a_missing_anonymeter_fails_before_any_work(tmp_path, monkeypatch, capsys):
    import censusrecon.experiments.release.evaluate as evaluate

    monkeypatch.setenv("CENSUSRECON_ANONYMETER_PYTHON", str(tmp_path / "nowhere" / "python"))
    monkeypatch.setattr(evaluate, "resolve", lambda cfg: pytest.fail("the data was read before the check"))
    cfg = str(ROOT / "configs" / "release_tiny.yaml")
    assert main(["evaluate-release", cfg, "--out", str(tmp_path / "out"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "make risk-env" in err and "synthetic" in err and "\n" not in err.strip()
    assert not list((tmp_path / "out").rglob("*"))  # nothing written
    # the user's choice not to measure them: then it runs, and those releases cannot be decided
    from censusrecon.experiments.release.program import check_environments

    check_environments(load_config(cfg, ["release.risks=false"]))


def test_the_strongest_attack_decides_and_publish_names_it(safe_at_one):
    """ε = 1 is shown safe by the reconstruction's persons (ε = 8 not). A realistic inference attack not within its
    tolerance at ε = 1 takes PUBLISH down to where it is; one above it even at the most protective ε is DO NOT
    PUBLISH; one not played, or not shown within its tolerance anywhere, is CANNOT DECIDE; each is named."""
    persons, _ = safe_at_one
    cfg = _cfg(**{"tolerance": "{per_unit: 3}", "epsilons": "[0.5, 1.0, 8.0]", "audit": "{epsilons: all}"})
    per = release_persons(_hand_made([40, 45, 42], [30, 33, 32]))
    low = per[per.setting == 1.0].assign(setting=0.5)
    s = summarise_release_persons(pd.concat([low, per], ignore_index=True), ToleranceConfig(per_unit=3))
    audits = [_audit(eps=e) for e in (0.5, 1.0, 8.0)]
    fine = inference_figures({"laplace_tables": [0.5, 1.0, 8.0]})
    d = _decide(s, cfg, audits=audits, inference=fine)
    assert d.lines() == ["PUBLISH laplace_tables at ε ≤ 1" + DECIDED]
    # membership not within 2 points at ε = 1: PUBLISH stops at 0.5 and names it
    worse = inference_figures({"laplace_tables": [0.5]})
    at_one = inference_figures({"laplace_tables": [1.0, 8.0]}, advantage_upper=0.05)
    mixed = {k: pd.concat([worse[k], at_one[k]], ignore_index=True) for k in worse}
    d = _decide(s, cfg, audits=audits, inference=mixed)
    (m,) = d.mechanisms
    assert d.lines() == ["PUBLISH laplace_tables at ε ≤ 0.5 (decided by realistic membership inference)"]
    assert m.decided_by == "realistic membership inference" and m.gates[0]["setting"] == 0.5
    # attribute inference stops at ε = 1 too, closer to its line there than the persons are: it is named
    close = inference_figures({"laplace_tables": [0.5, 1.0]}, excess_upper=0.0195)
    far = inference_figures({"laplace_tables": [8.0]}, excess_upper=0.05)
    close = {k: pd.concat([close[k], far[k]], ignore_index=True) for k in close}
    d = _decide(s, cfg, audits=audits, inference=close)
    assert d.lines() == ["PUBLISH laplace_tables at ε ≤ 1 (decided by attribute inference (linear reconstruction))"]
    # above the tolerance even at the most protective ε: DO NOT PUBLISH
    above = inference_figures({"laplace_tables": [0.5, 1.0, 8.0]}, excess_upper=0.3)
    above["attribute"]["excess_lower"] = 0.2
    (m,) = _decide(s, cfg, audits=audits, inference=above).mechanisms
    assert m.action == DO_NOT_PUBLISH and "attribute inference" in m.reasons[0] and "shown above" in m.reasons[0]
    # not shown within it, or not played: CANNOT DECIDE, with why and what to run
    (m,) = _decide(s, cfg, audits=audits, inference=inference_figures(
        {"laplace_tables": [0.5, 1.0, 8.0]}, advantage_upper=0.05)).mechanisms
    assert m.action == CANNOT_DECIDE and "realistic membership inference is not shown within" in m.reasons[0]
    assert "evaluate more units or smaller ε" in m.next_step
    (m,) = _decide(s, cfg, audits=audits, inference={"membership": pd.DataFrame(),
                                                     "attribute": fine["attribute"]}).mechanisms
    assert m.action == CANNOT_DECIDE and "realistic membership inference was not played" in m.reasons[0]
    # the informed adversary decides only where the agency declares a tolerance for it
    informed = fine["membership"].assign(attack="membership_informed", advantage_upper=0.5, advantage_lower=0.4)
    both = {"membership": pd.concat([fine["membership"], informed], ignore_index=True),
            "attribute": fine["attribute"]}
    assert _decide(s, cfg, audits=audits, inference=both).mechanisms[0].action == PUBLISH
    strict = _cfg(**{"tolerance": "{per_unit: 3, informed_membership: 0.1}", "epsilons": "[0.5, 1.0, 8.0]",
                     "audit": "{epsilons: all}"})
    (m,) = _decide(s, strict, audits=audits, inference=both).mechanisms
    assert m.action == DO_NOT_PUBLISH and "informed membership inference is shown above" in m.reasons[0]


def test_an_attack_that_had_not_saturated_never_publishes(safe_at_one):
    """RAP-Rank still adding persons when K doubled, at a setting PUBLISH would name: CANNOT DECIDE, naming the K."""
    persons, _ = safe_at_one
    cfg = _cfg(**{"tolerance": "{per_unit: 3}"})
    verdicts = verdicts_of(persons, pd.DataFrame(), {False: {"by_k": pd.DataFrame([
        {"mechanism": "laplace_tables", "setting": 1.0, "runs": 24, "half": 12, "gain": 9, "saturated": False,
         "persons": 90, "persons_half": 81, "units": 3, "by_runs": {}}]), "by_t": None}},
        cfg.release.tolerance, 8)
    entry = {"mechanism": "laplace_tables", "for_publication": True, "publication_note": "OpenDP"}
    d = decide(cfg, Evidence(verdicts, [_audit()], [entry], released=tuple(UNITS),
                             **inference_figures({"laplace_tables": cfg.release.epsilons})))
    (m,) = d.mechanisms
    assert m.action == CANNOT_DECIDE and "RAP-Rank had not saturated at ε = 1" in m.reasons[0]
    assert "attack.runs) to 48" in m.next_step
