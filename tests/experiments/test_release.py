"""evaluate-release and audit end to end on the tiny release config."""

import json
import math

import numpy as np
import pandas as pd
import pytest

from censusrecon.experiments.cli import main
from censusrecon.experiments.config import ConfigError, ToleranceConfig, load_config, parse_config
from censusrecon.experiments.release.evaluate import evaluate_release, lift_table
from censusrecon.synth.publishing import Draw


_RESOLVED: dict = {}  # how often release_run's evaluation read the data and chose its units


@pytest.fixture(scope="module")
def release_run(tmp_path_factory, root=None):
    from pathlib import Path

    import censusrecon.experiments.problem as problem

    root = Path(__file__).resolve().parents[2]
    out = tmp_path_factory.mktemp("rel")
    calls: dict = {"load_population": 0, "select_units": 0}

    def counted(name):
        real = getattr(problem, name)

        def wrapper(*a, **k):
            calls[name] += 1
            return real(*a, **k)
        return wrapper

    with pytest.MonkeyPatch.context() as mp:  # how often the data is read and the target units chosen
        for name in calls:
            mp.setattr(problem, name, counted(name))
        # the config as it is, but the audit's runs (its power is the audit tests' subject) and a fixed audit seed:
        # the tests on this run read its rendering and decision, and a fresh seed made them fail whenever the audit
        # raised its false alarm (at most 0.1% per audit by design, bench/audit_false_alarm.py; seen once, p = 2.4e-5
        # on noise_shape)
        run = evaluate_release(load_config(root / "configs" / "release_tiny.yaml",
                                           ["release.audit.runs=5000", "release.audit.seed=1"]), out, progress=False)
    _RESOLVED.update(calls)
    return run


def test_the_config_is_resolved_once(release_run):
    """evaluate-release reads the data and chooses its units once (experiments.problem.resolve); every
    unit, release, attack and audit after that reads the Study, not the raw config again."""
    assert _RESOLVED == {"load_population": 1, "select_units": 1}


def test_release_evaluation_writes_its_files(release_run):
    assert release_run.name == "release"  # beside the attack run of the same config, never in it
    for name in ("release_eval.parquet", "utility.parquet", "lift.parquet", "ledger.json", "audit.json", "persons.parquet",
                 "report.md", "report.html", "release_match_rate.png", "persons_error.png", "manifest.json"):
        assert (release_run / name).stat().st_size > 0, name
    df = pd.read_parquet(release_run / "release_eval.parquet")
    assert {"epsilon", "mechanism", "unit", "method", "k_over_u", "match_rate", "utility_error"} <= set(df.columns)
    assert set(df.mechanism) == {"exact", "baseline", "laplace_tables", "synthetic", "perturbed_histogram",
                                 "smoothed_histogram"}
    util = pd.read_parquet(release_run / "utility.parquet")
    assert (util.mae_per_cell >= 0).all() and util.share_off_10pct.between(0, 1).all()
    assert set(util.level) == {"unit"} and util.cells.gt(0).all()
    ledger = json.loads((release_run / "ledger.json").read_text())
    assert {e["relation"] for e in ledger["entries"]} == {"replace_one"}
    # the attack's strength: K/8 .. K runs on every release, and T doubled on the exact tables
    st = pd.read_parquet(release_run / "strength.parquet")
    assert set(st.runs) == {1, 2, 4} and set(st.steps) == {100, 200}
    assert set(st[st.steps == 200].mechanism) == {"exact"} and set(st.mechanism) >= {"exact", "laplace_tables"}
    assert "### Attack strength" in (release_run / "report.md").read_text()
    assert all(e["for_publication"] is False for e in ledger["entries"])  # simulation noise is labelled
    assert "not for publication" in (release_run / "report.md").read_text()


def test_the_report_gives_anonymeter_risks_of_every_published_microdata_file(release_run):
    from censusrecon.experiments.release.risks import anonymeter_python

    if anonymeter_python() is None:
        pytest.skip("no anonymeter environment (make risk-env)")
    risks = pd.read_parquet(release_run / "risks.parquet")
    assert set(risks.mechanism) == {"synthetic", "smoothed_histogram"}  # the mechanisms that publish rows
    assert {"singling_out", "linkability", "inference:RACE"} <= set(risks.risk)
    assert len(risks) == 2 * 2 * 6  # two mechanisms, two ε, six risks (singling out, linkability, four secrets)
    assert ((risks.ci_low <= risks.value) & (risks.value <= risks.ci_high)).all()
    text = (release_run / "report.md").read_text()
    assert "Risks of the published microdata (anonymeter)" in text and "| synthetic | ε = 10 |" in text


def test_more_noise_means_less_lift_fewer_persons_and_more_error(release_run):
    lift = pd.read_parquet(release_run / "lift.parquet")
    persons = pd.read_parquet(release_run / "persons.parquet")
    for mech in ("laplace_tables", "perturbed_histogram"):
        s = lift[lift.mechanism == mech].groupby("setting")[["lift", "utility_error"]].mean()
        assert s.loc[0.1, "lift"] < s.loc[10.0, "lift"]
        assert s.loc[0.1, "utility_error"] > s.loc[10.0, "utility_error"]
        p = persons[persons.mechanism == mech].groupby("setting").persons_reconstructed.sum()
        assert p.loc[0.1] < p.loc[10.0]
    exact = lift[lift.setting == math.inf].lift.mean()
    assert exact > lift[lift.setting == 0.1].lift.max()
    assert persons[persons.setting == math.inf].persons_reconstructed.sum() > persons[
        persons.setting == 0.1].groupby("mechanism").persons_reconstructed.sum().max()


def _hand_made(exact_rap, eps8_rap, sizes=(20, 20, 20)):
    """Three units: baselines (holdout the best), the exact tables and ε = 1, 8 attacked by RAP-Rank
    and the trivial attack; persons unique in D ``sizes`` (20 per unit of 50 unless given)."""
    rows = []
    base = {"a": 10, "b": 12, "c": 11}
    by = {math.inf: {"rap_rank": exact_rap, "one_way_margins": [0, 0, 0]},
          1.0: {"rap_rank": [9, 12, 12], "one_way_margins": [11, 11, 13]},
          8.0: {"rap_rank": eps8_rap, "one_way_margins": [0, 0, 0]}}
    for i, unit in enumerate(base):
        for method, n in (("holdout", base[unit]), ("county", base[unit] - 3)):
            rows.append(dict(variant=False, unit=unit, setting=float("nan"), mechanism="baseline", method=method,
                             k=5, u=5, num_matched_unique=n, n_rows=50, n_unique=sizes[i]))
        for eps, attacks in by.items():
            for method, ns in attacks.items():
                rows.append(dict(variant=False, unit=unit, setting=eps, mechanism="exact" if eps == math.inf else
                                 "laplace_tables", method=method, k=5, u=5, num_matched_unique=ns[i], n_rows=50,
                                 n_unique=sizes[i]))
    return pd.DataFrame(rows)


def test_release_persons_and_verdict_on_hand_made_numbers():
    from censusrecon.experiments.release.release_report import BEST_ATTACK, release_persons, summarise_release_persons, verdict_rows

    per = release_persons(_hand_made([40, 45, 42], [30, 33, 32]))
    assert set(per.best_baseline) == {"holdout"}
    best = per[(per.attack == BEST_ATTACK) & (per.setting == 1.0)].set_index("unit")
    assert best.persons_reconstructed.to_dict() == {"a": 11, "b": 12, "c": 13}  # the best attack per unit
    assert best.best_attack.to_dict() == {"a": "one_way_margins", "b": "rap_rank", "c": "one_way_margins"}
    s = summarise_release_persons(per)
    s = s[s.attack == BEST_ATTACK].set_index(["mechanism", "setting"])
    one = s.loc[("laplace_tables", 1.0)]
    # differences 1, 0, 2: mean 1, sd 1, t(0.975, 2) = 4.3027 -> 1 ± 2.484
    assert one.difference_mean == 1.0 and one.ci_low == pytest.approx(1 - 4.302653 / 3 ** 0.5, abs=1e-5)
    assert not one.beyond_spread and one.units == 3 and one.persons == 36 and one.unique_in_d == 60
    assert one.persons_in_d == 150 and one.best_baselines == "holdout"
    assert s.loc[("laplace_tables", 8.0), "beyond_spread"] and s.loc[("exact", math.inf), "beyond_spread"]
    util = pd.DataFrame([dict(variant=False, mechanism="laplace_tables", setting=1.0, table="T", level="block",
                              cells=4, mae_per_cell=2.5, share_off_10pct=0.5)])
    # ε = 1: differences 1, 0, 2, one-sided upper 95% limit 1 + t(0.95, 2) / √3 = 2.686 < 3 tolerated
    tol = ToleranceConfig(per_unit=3)
    (v,) = verdict_rows(summarise_release_persons(per, tol), util, False, tolerance=tol)
    assert v["status"] == "safe" and v["setting"] == 1.0 and v["table_error"] == 2.5 and v["decided"]
    text = v["text"]
    assert "**ε = 1**" in text and "2.50 persons" in text and "50% of cells" in text and "At ε = 8 it is not shown" in text
    assert "upper 95% limit +2.7 per unit, against 3.0 tolerated (3 persons per unit)" in text
    assert "36 of 60 persons unique in D (150 persons in D)" in text and "holdout" in text


def test_not_significant_is_not_safe_when_the_upper_limit_exceeds_the_tolerance():
    """ε = 1's excess (+1 per unit, interval −1.5 to +3.5) is not significantly above the best guess, but
    its upper limit 2.686 exceeds 2 tolerated: not shown safe, with the units that would decide."""
    from censusrecon.experiments.release.release_report import release_persons, summarise_release_persons, verdict_rows

    per = release_persons(_hand_made([40, 45, 42], [30, 33, 32]))
    tol = ToleranceConfig(per_unit=2)
    s = summarise_release_persons(per, tol)
    one = s[(s.setting == 1.0) & (s.attack == "best attack")].iloc[0]
    assert not one.beyond_spread and one.excess_upper == pytest.approx(1 + 2.919986 / 3 ** 0.5, abs=1e-5)
    (v,) = verdict_rows(s, pd.DataFrame(), False, tolerance=tol)
    assert v["status"] == "not_shown_safe" and v["setting"] is None and not v["decided"]
    # margin −1 per unit, sd 1: 8 units give 80% power (experiments.metrics.units_to_decide)
    assert "about 8 units would show ε = 1 safe (3 evaluated)" in v["plan"]
    # the default tolerance, 1% of the 20 persons unique in D per unit (0.2): the excess itself is above it
    (v,) = verdict_rows(summarise_release_persons(per), pd.DataFrame(), False)
    assert v["status"] == "not_shown_safe" and "no number of units shows ε = 1 safe" in v["plan"]
    assert "smaller ε" in v["plan"]


def test_units_of_different_sizes_are_judged_on_the_share_of_their_unique_persons():
    """The exact tables find 10, 22, 27 persons more than the best guess on units of 100, 200, 300
    persons unique in D: shares 0.10, 0.11, 0.09, so the attack is beyond the best guess, where the
    same differences on equal units (spread 8.7 persons) are not. At ε = 1 the best attack finds 1, 0,
    2 more: shares 0.01, 0, 0.00667 against 1% tolerated; margins 0, −0.01, −0.00333 (mean −0.00444,
    sd 0.00509): upper limit 0.01 − 0.00444 + t(0.95, 2)·0.00509/√3 = 0.01414 > 0.01, not shown safe,
    and 0.01 + the margin's mean = 0.00556 is the excess its plan quotes."""
    from censusrecon.experiments.release.release_report import release_persons, summarise_release_persons, verdict_rows

    util = pd.DataFrame(columns=["variant", "mechanism", "setting", "table", "cells", "mae_per_cell",
                                 "share_off_10pct"])
    per = release_persons(_hand_made([20, 34, 38], [30, 33, 32], sizes=(100, 200, 300)))
    s = summarise_release_persons(per)
    s = s[s.attack == "best attack"].set_index("setting")
    assert s.loc[math.inf, "beyond_spread"] and s.loc[math.inf, "share_mean"] == pytest.approx(0.1)
    assert not s.loc[math.inf, "ci_low"] > 0  # the persons' own interval reaches below 0
    one = s.loc[1.0]
    assert one.scale == "share" and one.tolerance == 0.01 and one.excess_mean == pytest.approx(0.01 / 1.8)
    sd = float(np.std([0, -0.01, -0.01 / 3], ddof=1))
    assert one.margin_std == pytest.approx(sd) and one.excess_upper == pytest.approx(
        0.01 - 0.04 / 9 + 2.919986 * sd / 3 ** 0.5, abs=1e-7)
    (v,) = verdict_rows(summarise_release_persons(per), util, False)
    assert v["status"] == "not_shown_safe" and "+0.6% of each unit's persons unique in D" in v["plan"]
    assert "upper 95% limit +1.4% of each unit's persons unique in D, against 1% tolerated" in v["text"]
    same = release_persons(_hand_made([20, 34, 38], [30, 33, 32], sizes=(200, 200, 200)))
    (v,) = verdict_rows(summarise_release_persons(same), util, False)
    assert v["status"] == "cannot_decide"


def test_a_later_setting_is_never_called_safe_after_one_that_is_not():
    """The fixed sequence stops at ε = 1 (not shown safe): ε = 8, whose excess is exactly 0, is not named."""
    from censusrecon.experiments.release.release_report import release_persons, summarise_release_persons, verdict_rows

    per = release_persons(_hand_made([40, 45, 42], [10, 12, 11]))
    tol = ToleranceConfig(per_unit=2)
    s = summarise_release_persons(per, tol)
    assert s[(s.setting == 8.0) & (s.attack == "best attack")].excess_upper.iloc[0] < 2
    (v,) = verdict_rows(s, pd.DataFrame(), False, tolerance=tol)
    assert v["status"] == "not_shown_safe" and v["setting"] is None


def test_verdict_says_when_it_cannot_decide_and_when_no_setting_is_safe():
    from censusrecon.experiments.release.release_report import release_persons, summarise_release_persons, verdict_rows

    util = pd.DataFrame(columns=["variant", "mechanism", "setting", "table", "cells", "mae_per_cell",
                                 "share_off_10pct"])
    # the exact tables no better than the holdout: nothing can be told apart, no safe ε, and more units will not help
    (v,) = verdict_rows(summarise_release_persons(release_persons(_hand_made([10, 12, 11], [30, 33, 32]))), util, False)
    assert v["status"] == "cannot_decide" and v["setting"] is None and "cannot tell" in v["text"]
    assert not v["decided"] and "no number of units" in v["plan"]
    # the exact tables beyond the best guess by a little and noisily: the units that would show it
    (v,) = verdict_rows(summarise_release_persons(release_persons(_hand_made([11, 12, 14], [30, 33, 32]))), util, False)
    assert v["status"] == "cannot_decide" and "units" in v["plan"] and "would show the attack on the exact" in v["plan"]
    # ε = 8 alone, far above the tolerance: not safe at any setting, decided
    per = release_persons(_hand_made([40, 45, 42], [30, 33, 32]))
    (v,) = verdict_rows(summarise_release_persons(per[per.setting != 1.0]), util, False)
    assert v["status"] == "none_safe" and v["decided"] and "lower 95% limit" in v["text"]
    # every ε shown safe: say that the grid stops too early
    tol = ToleranceConfig(per_unit=30)
    (v,) = verdict_rows(summarise_release_persons(per, tol), util, False, tolerance=tol)
    assert v["status"] == "safe" and v["setting"] == 8.0 and "larger ε" in v["text"]


def test_evaluate_release_prints_the_answer_and_fails_on_a_failed_audit(release_run, tmp_path, root, capsys,
                                                                      monkeypatch):
    """The terminal renders the saved decision: re-decided here on figures where the exact tables are no better
    than the best guess (cannot decide, exit 3, with what would decide it), then with a failed audit (exit 4)."""
    import shutil

    import censusrecon.experiments.release.evaluate as release
    from censusrecon.experiments.release.decision import Evidence, decide
    from censusrecon.experiments.release.release_report import load_audits, summarise_release_persons

    run = tmp_path / "release"
    shutil.copytree(release_run, run)
    cfg_path = str(root / "configs" / "release_tiny.yaml")
    cfg = load_config(cfg_path)
    per = pd.read_parquet(run / "persons.parquet")  # the exact tables no better than the best guess
    exact = per.setting == math.inf
    per.loc[exact, "persons_reconstructed"] = per.loc[exact, "baseline_persons"]
    per.loc[exact, "difference"] = 0
    persons = summarise_release_persons(per, cfg.release.tolerance)
    entries = json.loads((run / "ledger.json").read_text())["entries"]
    for e in entries:
        e["for_publication"] = True  # as on a publishing backend: the verdict is what decides here

    def redecide(audits):
        verdicts = release.verdicts_of(persons, pd.DataFrame(), {}, cfg.release.tolerance, 8)
        decide(cfg, Evidence(verdicts, audits, entries, risks=pd.DataFrame({"mechanism": cfg.release.mechanisms}),
                             units_in_file=8, released=tuple(sorted(set(per["unit"]))),
                             membership=pd.read_parquet(run / "membership.parquet"),
                             attribute=pd.read_parquet(run / "attribute.parquet"))).save(run)

    redecide(load_audits(run))
    monkeypatch.setattr(release, "evaluate_release", lambda cfg, out, progress, reaudit, **kw: run)
    assert main(["evaluate-release", cfg_path, "--no-progress"]) == 3  # undecided
    captured = capsys.readouterr()
    out = captured.out
    assert out.startswith("DECISION (") and "CANNOT DECIDE laplace_tables: the attack is not beyond" in out
    assert "AUDIT FAILED" not in out and "next: " in out and "exit status 3" in captured.err
    assert "persons unique in D" in out and str(run / "report.html") in out
    audits = json.loads((run / "audit.json").read_text())
    audits[0].update(passed=False, outcome="failed", checks={"noise_scale": "fail: ε ≥ 8.007"})
    (run / "audit.json").write_text(json.dumps(audits))
    redecide(load_audits(run))
    assert main(["evaluate-release", cfg_path, "--no-progress"]) == 4
    captured = capsys.readouterr()
    assert f"AUDIT FAILED: {audits[0]['mechanism']}" in captured.out and "noise_scale: fail" in captured.out
    assert f"DO NOT PUBLISH {audits[0]['mechanism']}: the audit of the code that publishes it failed" in captured.out
    assert "do not publish" in captured.err


def test_lift_is_the_area_between_rap_rank_and_the_best_baseline():
    rows = []
    for method, mech, eps, rates in (("rap_rank", "exact", math.inf, [1.0, 0.8]),
                                     ("holdout", "baseline", float("nan"), [0.5, 0.5]),
                                     ("county", "baseline", float("nan"), [0.6, 0.2])):
        for k, r in enumerate(rates, 1):
            rows.append(dict(variant=False, unit="u", epsilon=eps, setting=eps, mechanism=mech, method=method, k=k,
                             match_rate=r, utility_error=0.0 if mech == "exact" else float("nan")))
    lift = lift_table(pd.DataFrame(rows))
    assert lift.best_baseline.tolist() == ["holdout"] and lift.lift.tolist() == [pytest.approx(0.4)]


def test_audit_cli_prints_a_table_and_json(capsys, root):
    cfg = str(root / "configs" / "release_tiny.yaml")
    # few runs: the table and JSON forms are what is tested here; the bound's power, by the audit tests
    assert main(["audit", cfg, "--set", "release.audit.runs=4000"]) == 0
    table = capsys.readouterr().out
    assert "declared ε" in table and "perturbed_histogram" in table and "EXCEEDS" not in table
    assert main(["audit", cfg, "--json", "--set", "release.audit.runs=4000"]) == 0
    objs = [json.loads(line) for line in capsys.readouterr().out.strip().splitlines()]
    assert {o["mechanism"] for o in objs} == {"laplace_tables", "synthetic", "perturbed_histogram", "smoothed_histogram"}
    for o in objs:
        assert 0 <= o["epsilon_lower_bound"] <= o["declared_epsilon"]


def test_census_tables_release_end_to_end(tmp_path, root):
    cfg = load_config(root / "configs" / "release_tiny.yaml",
                      ["queries={kind: census, tables: [P1, P8, P12]}", "attributes=[AGE, SEX, HISP, CENRACE]",
                       "target.units=1", "release.epsilons=[1.0]", "attack.runs=2", "attack.steps=30",
                       "release.audit.runs=5000",
                       "release.mechanisms=[laplace_tables, synthetic, perturbed_histogram]"])
    run = evaluate_release(cfg, tmp_path, progress=False)
    util = pd.read_parquet(run / "utility.parquet")
    assert set(util.table) == {"P1", "P8", "P12", "unit total"}  # the unit total as an agency checks it
    ledger = json.loads((run / "ledger.json").read_text())
    census = [e for e in ledger["entries"] if e["mechanism"] == "laplace_tables"][0]
    # a person is in P1's cell; in up to 3 more of P8 (two or more races, the k-races subtotal,
    # the combination; P8's total is P1's cell, released once) and 2 more of P12 (sex, sex by
    # age group); replace-one doubles it
    assert census["cells_per_person"] == 1 + 3 + 2 and census["sensitivity"] == 2 * 6


def test_release_config_errors():
    with pytest.raises(ConfigError, match="smoothed histogram is DP only under replace_one"):
        parse_config({"name": "x", "release": {"relation": "add_remove"}})
    for total in ("root_total", "unit_total"):  # an exact total is ε = ∞ under add/remove
        with pytest.raises(ConfigError, match="declare release.relation: replace_one"):
            parse_config({"name": "x", "release": {"relation": "add_remove", "mechanisms": ["topdown"],
                                                   "invariants": [total]}})
    with pytest.raises(ConfigError, match="no 'release' section"):
        evaluate_release(parse_config({"name": "x"}), "/tmp/none", progress=False)


def test_ledger_entries_carry_only_their_own_invariants(compact_agency):
    from censusrecon.synth.release_path import ReleaseSpec, own_invariants

    spec = ReleaseSpec.of(load_config(compact_agency, ["release.invariants=[root_total, unit_total]"]))
    assert own_invariants(spec, "topdown", True) == ["root_total"]
    assert own_invariants(spec, "laplace_tables", True) == ["unit_total"]
    assert own_invariants(spec, "swapping", True) == [] and own_invariants(spec, "synthetic", True) == ["unit_total"]
    spec = ReleaseSpec.of(load_config(compact_agency, ["release.invariants=[occupied_blocks]"]))
    assert own_invariants(spec, "swapping", True) == ["occupied_blocks"] and own_invariants(spec, "swapping", False) == []


def test_units_chosen_by_their_size_are_recorded_as_outside_epsilon(release_run, compact_agency):
    from censusrecon.experiments.release.release_privacy import unit_selection

    ledger = json.loads((release_run / "ledger.json").read_text())
    assert ledger["unit_selection"]["data_dependent"]  # release_tiny picks 2 tracts among those of >= 20 persons
    assert "Outside ε:" in (release_run / "report.md").read_text()
    named = load_config(compact_agency)  # its units are named: a public choice
    assert unit_selection(named) == {"data_dependent": False,
                                     "how": "named in the config: " + ", ".join(named.target.unit_ids)}


def _chromium():
    import os
    import shutil

    return os.environ.get("CENSUSRECON_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(not _chromium(), reason="no Chromium (make test installs Debian's where it may: make browser)")
def test_the_decision_is_on_the_first_screen_of_the_report(release_run):
    """In a real headless browser at 1280x800: the decision (each mechanism's verdict against the tolerance,
    the audit's outcome) and its one picture (persons beyond the best guess against ε, with the tolerance and
    the limits: decision.png, drawn) are on the first screen, the verdicts' table right after, before the
    methods."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=_chromium(), args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            page.goto((release_run / "report.html").as_uri())

            def bottom(locator):
                box = locator.first.bounding_box()
                assert box is not None
                return box["y"] + box["height"]
            assert bottom(page.locator("#decision")) < 800
            for line in page.locator("#decision + ul li").all():  # every line of the decision
                assert bottom(line) <= 800, line.inner_text()
            assert bottom(page.get_by_text("Audit of the publishing code:")) <= 800
            picture = page.locator("img[alt^='persons reconstructed beyond the best guess']")
            assert bottom(picture) <= 800 and picture.first.evaluate("i => i.complete && i.naturalWidth > 300")
            table = page.locator("#decision ~ table").first
            assert "fit for publication" in table.inner_text()
            assert table.bounding_box()["y"] > bottom(picture)
            assert page.locator("#what-ran").first.bounding_box()["y"] > bottom(page.locator("#decision"))
        finally:
            browser.close()


def test_the_table_error_printed_is_the_cell_weighted_error_of_the_published_tables(root, capsys):
    """Recomputed from a published release cell by cell (every cell of the declared tables once, no derived
    totals): the figure the verdict and the terminal print."""
    from censusrecon.experiments.problem import build_workload, resolve, select_units
    from censusrecon.synth.release_path import ReleaseSpec, publish
    from censusrecon.experiments.release.release_report import utility_summary
    from censusrecon.synth.keyed import KeyedNoise
    from censusrecon.synth.release import table_utility, totals_utility, workload_counts

    cfg = load_config(root / "configs" / "release_tiny.yaml", ["target.with_block=[true]"])
    from censusrecon.experiments.problem import load_population

    pop = load_population(cfg)
    rows, cells, errs = [], 0, 0.0
    for unit in select_units(pop, cfg)[:2]:
        D = resolve(cfg, pop).prepare(unit, True, pad_blocks=False).private
        w = build_workload(cfg, cfg.queries[0], D.domain)
        pub = publish(ReleaseSpec.of(cfg), "laplace_tables", 1.0, D, w, Draw(KeyedNoise(3), np.random.default_rng(0)))
        exact = workload_counts(D, w)
        errs += float(np.abs(pub.counts - exact).sum())
        cells += exact.size
        rows += [dict(r, variant=True, mechanism="laplace_tables", setting=1.0, unit=unit)
                 for r in table_utility(pub.counts, exact, w) + totals_utility(pub.counts, exact, w)]
        rows.append(dict(table="unit total", level="unit", cells=1, mae_per_cell=17.0, share_off_10pct=1.0,
                         variant=True, mechanism="laplace_tables", setting=1.0, unit=unit))  # derived: left out
    got = utility_summary(pd.DataFrame(rows)).iloc[0]
    assert got.cells == cells and got.mae_per_cell == pytest.approx(errs / cells, rel=1e-12)


def test_evaluate_release_reuses_the_audit_that_censusrecon_audit_ran_on_the_same_code_and_config(
        root, tmp_path, monkeypatch, capsys):
    """`censusrecon audit` then `evaluate-release` of the same config: the audit stands and is not run
    again (the report says whose it is); another config (here another audit seed) runs its own."""
    import censusrecon.experiments.release.evaluate as release

    monkeypatch.chdir(tmp_path)  # the audit command records under ./results
    over = ["release.mechanisms=[laplace_tables]", "release.epsilons=[1.0]", "attack.runs=2", "attack.steps=20",
            "target.units=1", "release.audit.runs=2000", "release.risks=false", "release.audit.seed=5"]
    cfg_path = str(root / "configs" / "release_tiny.yaml")
    assert main(["audit", cfg_path, *[x for o in over for x in ("--set", o)]]) == 0
    real = release.audit_release
    monkeypatch.setattr(release, "audit_release", lambda *a, **k: pytest.fail("the recorded audit was run again"))
    run = release.evaluate_release(load_config(cfg_path, over), "results", progress=True)
    assert "its result stands, so it is not run again" in capsys.readouterr().err
    assert "run by `censusrecon audit` at" in (run / "report.md").read_text()
    assert json.loads((run / "audit.json").read_text())[0]["audit_seed"] == 5
    calls = []
    monkeypatch.setattr(release, "audit_release", lambda *a, **k: calls.append(1) or real(*a, **k))
    release.evaluate_release(load_config(cfg_path, over[:-1] + ["release.audit.seed=6"]), "results", progress=False)
    assert calls == [1]


def test_published_rows_agreement_picks_exact_and_binned_by_the_age_attribute():
    """rows_agreement on hand-made rows: with single-year AGE (SF1's 116 years) both the exact and the binned
    counts (ages 30 and 31 share the group 30-34: binned only); with AGE the 38 groups only the binned one; with
    another age coding, or without BLOCK, nothing (the Bureau's measure is not defined there)."""
    from censusrecon.experiments.release.evaluate import rows_agreement
    from censusrecon.microdata.census import AGE_BIN38_OF_AGE, AGE_BINS_38_LABELS
    from censusrecon.microdata.dataset import Dataset
    from censusrecon.microdata.domain import Domain

    single = Domain.from_dict({"BLOCK": ["0", "1"], "AGE": [str(a) for a in range(len(AGE_BIN38_OF_AGE))],
                               "SEX": ["1", "2"]})
    D = Dataset(single, np.array([[0, 30, 0], [0, 35, 1], [1, 5, 0]]))
    rows = Dataset(single, np.array([[0, 31, 0], [0, 35, 1], [1, 5, 1]]))
    total = rows_agreement(D, rows)[-1]
    assert (total["persons"], total["agree_exact"], total["agree_binned"]) == (3, 1, 2)
    binned = Domain.from_dict({"BLOCK": ["0", "1"], "AGE": list(AGE_BINS_38_LABELS), "SEX": ["1", "2"]})
    total = rows_agreement(Dataset(binned, D.codes), Dataset(binned, rows.codes))[-1]
    assert total["agree_exact"] is None and total["agree_binned"] == 1  # codes 30 and 31 are two groups here
    other = Domain.from_dict({"BLOCK": ["0", "1"], "AGE": [str(a) for a in range(41)], "SEX": ["1", "2"]})
    assert rows_agreement(Dataset(other, D.codes), Dataset(other, rows.codes)) == []
    no_block = Domain.from_dict({"AGE": [str(a) for a in range(len(AGE_BIN38_OF_AGE))], "SEX": ["1", "2"]})
    assert rows_agreement(Dataset(no_block, D.codes[:, 1:]), Dataset(no_block, rows.codes[:, 1:])) == []


@pytest.mark.parametrize("units", [3, 300])
def test_the_decision_picture_draws_one_point_per_mechanism_and_epsilon_whatever_the_units(units, tmp_path, root):
    """decision.png summarises units (mean and limits): 3 units and 300 draw the same marks; each point is the
    mean excess with the rule's one-sided limits, in percent of unique persons, the tolerance its own line."""
    import matplotlib.pyplot as plt

    from censusrecon.experiments.release import release_plots as report

    cfg = load_config(root / "configs" / "release_tiny.yaml")
    rows = [dict(attack=report.BEST_ATTACK, mechanism=m, setting=e, scale="share", units=units, tolerance=0.01,
                 excess_mean=0.2 / e, excess_lower=0.1 / e, excess_upper=0.3 / e)
            for m in ("laplace_tables", "perturbed_histogram") for e in (0.5, 2.0, 8.0)]
    rows.append(dict(attack=report.BEST_ATTACK, mechanism="exact", setting=np.inf, scale="share", units=units,
                     tolerance=0.01, excess_mean=0.5, excess_lower=0.4, excess_upper=0.6))
    drawn = {}
    real_save = report.save_figure

    def keep(fig, base):
        drawn["axes"] = fig.axes[0]
        return real_save(fig, base)

    report.save_figure = keep
    try:
        paths = report.plot_decision(pd.DataFrame(rows), tmp_path, cfg)
    finally:
        report.save_figure = real_save
    assert all(p.stat().st_size > 0 for p in paths)
    ax = drawn["axes"]
    points = [ln for ln in ax.get_lines() if ln.get_marker() == "o"]
    assert len(points) == 2 and all(len(ln.get_xdata()) == 3 for ln in points)  # 2 mechanisms x 3 ε
    assert np.allclose(sorted(np.asarray(points[0].get_ydata(), float)), sorted(100 * 0.2 / e for e in (0.5, 2, 8)))
    flat = {round(float(ln.get_ydata()[0]), 6) for ln in ax.get_lines()
            if ln.get_marker() != "o" and len({float(y) for y in ln.get_ydata()}) == 1}
    assert {0.0, 1.0, 50.0} <= flat  # the best guess, the tolerance (1% of unique persons), the exact tables
    assert f"{units} units" in ax.get_title()
    plt.close("all")
