"""The decision of a release evaluation, computed once: per mechanism PUBLISH (at which settings), DO NOT
PUBLISH or CANNOT DECIDE, with its reasons and a next step, saved as ``decision.json`` beside the results.
The terminal, ``report.md``, ``report.html`` and the exit status of ``evaluate-release`` render this one
value; none of them recomputes it.

A mechanism is publishable only when every gate opens:

1. the audit of the code that publishes it did not fail at any ε (failed: DO NOT PUBLISH);
2. its noise backend is fit for publication (the simulation backend, a study mechanism or one that is not
   differentially private: DO NOT PUBLISH);
3. the verdict against the tolerance is not "shown above it even at the most protective setting" (DO NOT
   PUBLISH);
4. the audit passed at the settings PUBLISH names, and only there: PUBLISH covers a setting shown safe only
   when the audit checked that very ε, through the mechanism's own publishing function, in every variant
   (with and without BLOCK) and on every released unit (:func:`audit_coverage`); a sample of units only when
   the user asked for one (``release.audit.units``), and the decision then names the units it covers. No
   setting covered: CANNOT DECIDE, saying which ε or units to audit. Files made elsewhere cannot be re-run,
   so their ε stays the agency's declaration, said as a caveat;
5. where the release publishes rows, their anonymeter risks were measured (not measured: CANNOT DECIDE);
6. the verdict shows a setting safe (not shown safe, or an attack that is not beyond the best guess even on
   the exact tables: CANNOT DECIDE);
7. every realistic inference attack (membership, attribute) is shown within its tolerance at the settings PUBLISH
   names, and the informed adversary's too where the agency declares a tolerance for it
   (:mod:`experiments.release.inference_verdict`); an attack shown above it at the most protective setting: DO
   NOT PUBLISH; not shown within it, or not played: CANNOT DECIDE (a file, which cannot be drawn again: a caveat);
8. RAP-Rank had saturated at every setting PUBLISH names (doubling K stopped adding persons): an attack that could
   still grow decides nothing (CANNOT DECIDE, naming the K to run).

PUBLISH names the attack that decided: the one whose figure stopped the settings first, or, where every setting
passed, the one closest to its tolerance.

Every gate that closes is listed in ``reasons``; the first one is the headline's. With several variants
(with and without BLOCK) a mechanism is publishable only at settings every variant shows safe.
"""

from __future__ import annotations

import json
import math
import re
import dataclasses  # noqa: F401  (its doctests use it)
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from censusrecon.experiments.metrics import CONFIDENCE, units_to_decide
from censusrecon.experiments.release.inference_verdict import (ATTACK_WORDS, Gate, gate_words, gates,
                                                               protective_order, risk_rows)
from censusrecon.experiments.release.risk_report import risk_lines
from censusrecon.experiments.release.words import (fit_words, less_protective, more_protective,
                                       persons_words, setting_label, units_advice)
from censusrecon.experiments.config import ConfigError
# the exit statuses of evaluate-release from the decision, defined once for the whole command
from censusrecon.experiments.exits import EXIT_AUDIT_FAILED, EXIT_CANNOT_DECIDE, EXIT_DO_NOT_PUBLISH, EXIT_PUBLISH
from censusrecon.experiments.results import write_json
from censusrecon.synth import registry
from censusrecon.synth.audit.statistics import overall_outcome

PUBLISH, DO_NOT_PUBLISH, CANNOT_DECIDE = "publish", "do_not_publish", "cannot_decide"
#: the words that open a decision's line, for a board
HEADS = {PUBLISH: "PUBLISH", DO_NOT_PUBLISH: "DO NOT PUBLISH", CANNOT_DECIDE: "CANNOT DECIDE"}

#: the file the decision is saved in, in the release folder
DECISION_FILE = "decision.json"

#: the figures of a verdict row kept in the decision (the rest of the row stays in persons.parquet)
_FIGURES = ("setting", "units", "persons", "baseline_persons", "persons_in_d", "unique_in_d", "best_attacks",
            "best_baselines", "difference_mean", "ci_low", "ci_high", "share_mean", "share_low", "share_high",
            "scale", "tolerance", "excess_mean", "excess_upper", "excess_lower", "margin_mean", "margin_std")


def _plain(v):
    """A value JSON keeps: numpy scalars as Python ones, infinities as strings JSON can hold."""
    if isinstance(v, (np.generic,)):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return "inf" if v > 0 else "-inf" if v < 0 else None
    return v


def _unplain(v):
    return float(v) if v in ("inf", "-inf") else v


def figures_of(x) -> dict | None:
    """A verdict row's figures (a pandas row or dict) as plain values."""
    if x is None:
        return None
    return {k: _plain(x[k]) for k in _FIGURES if k in x and x[k] is not None and not (
        isinstance(x[k], float) and math.isnan(x[k]))}


def _num(fig: dict, key: str) -> float:
    return float(_unplain(fig.get(key, math.nan)))


@dataclass
class Verdict:
    """One variant's verdict for one mechanism: ``status`` (safe, none_safe, not_shown_safe,
    cannot_decide), the setting shown safe, the figures the rule compared and the first setting not
    shown safe (``next``), what would decide it (``plan``), and the paragraph the report prints."""

    variant: object
    status: str
    setting: float | None
    figures: dict | None
    next: dict | None
    plan: str
    text: str
    table_error: float | None = None
    strength: str = ""  # what the verdict owes to the attack's strength (saturated or not)
    exact: dict | None = None  # the best attack on the exact tables (the yardstick of the attack's power)
    unsaturated: list = field(default_factory=list)  # settings at which RAP-Rank had not saturated: [setting, K, gain]


@dataclass
class MechanismDecision:
    mechanism: str
    action: str
    setting: float | None  # PUBLISH: the least protective setting every variant shows safe
    reasons: list[str]  # every gate that closed, the headline's first
    next_step: str
    caveats: list[str]
    audit: str  # passed, failed, inconclusive, not run, or "not applicable: why"
    fit_for_publication: bool | None  # None: made elsewhere (a file, a program), not ours to say
    risks: str  # measured, "not measured: why", or "not applicable: why"
    verdicts: list[Verdict] = field(default_factory=list)
    #: PUBLISH: the settings it covers, each shown safe and audited (every variant, the units below)
    covered: list[float] = field(default_factory=list)
    #: PUBLISH on an audited sample of the units (release.audit.units): the units it covers, and of how many
    units_covered: list[str] | None = None
    units_released: int | None = None
    grid: list[float] = field(default_factory=list)  # every setting evaluated
    study: bool = False  # evaluated with the simulation backend: the verdict is a study's, said beside the headline
    decided_by: str = ""  # the attack that decided (the one that stopped the settings, or came closest)
    gates: list[dict] = field(default_factory=list)  # the inference attacks' gates (inference_verdict.Gate)
    risk: list[dict] = field(default_factory=list)  # ε as risk: a row per setting (inference_verdict.risk_rows)
    #: the audit's measured ε per audited ε: declared, measured (the larger of its black and white box), share, by
    measured: list[dict] = field(default_factory=list)

    def where(self) -> str:
        """'ε ≤ 0.5', 'ε = 0.1 or 1' (the settings covered, where the audit skipped one between), 'swap rate ≥
        10%', 'as released'; on an audited sample of units, which units.

        >>> m = MechanismDecision("laplace_tables", PUBLISH, 1.0, [], "", [], "passed", True, "", covered=[0.1, 1.0])
        >>> m.where(), dataclasses.replace(m, covered=[0.1, 0.3, 1.0], grid=[0.1, 0.3, 1.0, 3.0]).where()
        ('ε = 0.1 or 1', 'ε ≤ 1')
        """
        if self.setting is None:
            return ""
        label = setting_label(self.mechanism, self.setting)
        if not registry.is_dp(self.mechanism):  # a larger swap rate or ptable variance protects more
            name = registry.mechanism(self.mechanism).setting
            return label.replace(f"{name} ", f"{name} ≥ ", 1)
        if registry.is_file(self.mechanism):
            return label
        below = [s for s in self.grid if s <= self.setting]
        if self.covered and sorted(self.covered) != below:  # a setting between was not audited: name those covered
            said = [f"{s:g}" for s in sorted(self.covered)]
            label = "ε = " + (said[0] if len(said) == 1 else ", ".join(said[:-1]) + " or " + said[-1])
        else:
            label = label.replace("ε = ", "ε ≤ ")
        if self.units_covered is not None:
            label += (f", for the {len(self.units_covered)} audited units of {self.units_released} "
                      f"({', '.join(self.units_covered)}): the others were not audited")
        return label

    def headline(self) -> str:
        """The line a board reads: 'PUBLISH laplace_tables at ε ≤ 0.5', 'DO NOT PUBLISH histogram: noise
        from the simulation backend …', 'CANNOT DECIDE synthetic: …'."""
        head = f"{HEADS[self.action]} {self.mechanism}"
        if self.action == PUBLISH:
            return f"{head} at {self.where()}" + (f" (decided by {self.decided_by})" if self.decided_by else "")
        line = f"{head}: {self.reasons[0]}" if self.reasons else head
        return line + (f" (as a study: {self.study_verdict()})" if self.study and self.verdicts else "")

    def study_verdict(self) -> str:
        """What the verdict says, for a study's line (the simulation backend never publishes, but the question
        "would this protect?" has its answer): 'shown safe up to ε = 2', 'shown above the tolerance even at ε = 0.5'."""
        status, setting = combine(self.mechanism, self.verdicts)
        if status == "safe":
            return f"shown safe up to {setting_label(self.mechanism, setting)}"
        first = next((v.figures for v in self.verdicts if v.figures), None) or {}
        where = f" {setting_label(self.mechanism, _num(first, 'setting'))}" if "setting" in first else ""
        return {"none_safe": f"shown above the tolerance even at{where}",
                "not_shown_safe": "no setting shown safe",
                "cannot_decide": "the attack is not beyond the best guess even on the exact tables"}.get(status, status)


@dataclass
class Decision:
    mechanisms: list[MechanismDecision]
    tolerance: str
    units: int  # units evaluated (per variant, the most)
    units_in_file: int | None
    code_fingerprint: str = ""
    config: str = ""
    inputs: dict = field(default_factory=dict)
    audit_when: str | None = None  # when a recorded `censusrecon audit` was taken, if one was
    fpr: float = 0.01  # the FPR the membership attacks are read at (release.inference.fpr)

    @property
    def action(self) -> str:
        """The release's: PUBLISH only when every mechanism may be published; DO NOT PUBLISH when one may
        not; else CANNOT DECIDE."""
        acts = {m.action for m in self.mechanisms}
        if not acts:
            return CANNOT_DECIDE
        return DO_NOT_PUBLISH if DO_NOT_PUBLISH in acts else CANNOT_DECIDE if CANNOT_DECIDE in acts else PUBLISH

    def exit_status(self) -> int:
        """4 an audit failed; 5 a mechanism must not be published; 3 one cannot be decided; 0 every
        mechanism may be published (at the settings its line names)."""
        if any(m.audit == "failed" for m in self.mechanisms):
            return EXIT_AUDIT_FAILED
        return {PUBLISH: EXIT_PUBLISH, DO_NOT_PUBLISH: EXIT_DO_NOT_PUBLISH, CANNOT_DECIDE: EXIT_CANNOT_DECIDE}[
            self.action]

    def lines(self) -> list[str]:
        """The decision's first lines, one per mechanism, as the terminal and the report print them."""
        return [m.headline() for m in self.mechanisms]

    def as_dict(self) -> dict:
        d = asdict(self)
        d["action"] = self.action
        d["exit_status"] = self.exit_status()
        d["lines"] = self.lines()
        return json.loads(json.dumps(d, default=_plain))

    def save(self, run_dir: Path) -> Path:
        path = Path(run_dir) / DECISION_FILE
        write_json(path, self.as_dict())
        return path


def load_decision(run_dir: Path) -> Decision:
    """The decision saved by ``evaluate-release`` (``decision.json``)."""
    path = Path(run_dir) / DECISION_FILE
    if not path.exists():
        raise ConfigError(f"{path} does not exist: this release folder was written before decisions were saved, or "
                          "its evaluation did not finish; rerun evaluate-release on its config")
    d = json.loads(path.read_text())
    mechs = []
    for m in d["mechanisms"]:
        verdicts = [Verdict(**v) for v in m.pop("verdicts")]
        mechs.append(MechanismDecision(**m, verdicts=verdicts))
    keep = {k: d[k] for k in ("tolerance", "units", "units_in_file", "code_fingerprint", "config", "inputs",
                              "audit_when", "fpr") if k in d}
    return Decision(mechs, **keep)


def _audit_state(mech: str, audits: list) -> str:
    if not registry.is_dp(mech):
        return "not applicable: not differentially private, no ε to audit"
    if registry.is_file(mech):
        return "not applicable: a file made elsewhere cannot be re-run on neighbouring data"
    mine = [a for a in audits if a.mechanism == mech]
    if not mine:
        return "not run"
    return overall_outcome(mine)


def _risk_state(mech: str, row_mechanisms: set, measured: set, risk_note: str | None) -> str:
    if mech not in row_mechanisms:
        return "not applicable: it publishes tables, not rows"
    if mech in measured:
        return "measured"
    return "not measured: " + (risk_note or "not run").removeprefix("not run: ")


def _risk_why(risk: str) -> str:
    """Why risks were not measured, in a few words for a decision's line."""
    if "whole_units" in risk:
        return "whole units leave anonymeter no control set"
    if "not installed" in risk:
        return "anonymeter is not installed: make risk-env"
    if "release.risks is false" in risk:
        return "release.risks: false"
    return risk.removeprefix("not measured: ")


def partial_step(mech: str, fig: dict, nxt: dict | None, available: int | None) -> str:
    """The next step of a verdict shown safe up to one setting: the settings between it and the first not
    shown safe, and the units that would decide that one (either way)."""
    if nxt is None:
        return (f"every setting evaluated is shown safe: the grid stops before protection ends; evaluate "
                f"{less_protective(mech)} to find where it does")
    a, b = _num(fig, "setting"), _num(nxt, "setting")
    between = (f"settings between {setting_label(mech, a)} and {setting_label(mech, b)} were not evaluated"
               + (f" (e.g. ε = {math.sqrt(a * b):.2g}: add it to release.epsilons)" if registry.is_dp(mech) and a > 0
                  else ""))
    m, sd, n = _num(nxt, "margin_mean"), _num(nxt, "margin_std"), int(_num(nxt, "units"))
    where = setting_label(mech, b)
    if m < 0:  # below the tolerance on average: more units could show it safe
        need, what = units_to_decide(-m, sd, CONFIDENCE), f"show {where} safe"
    else:  # at or above it: more units could show it unsafe
        need, what = units_to_decide(m, sd, CONFIDENCE), f"show {where} above it"
    units = units_advice(need, n, available, what)
    return between + ("; " + units if units else "")


@dataclass(frozen=True)
class Coverage:
    """What an audit covers of the settings a verdict shows safe: the settings it checked and passed (``covered``),
    the units those checks cover where the user asked for a sample (``units``; None: every released unit), and,
    for the least protective setting shown safe when it is not covered, why (``missing``) and what would cover
    it (``step``)."""

    covered: list[float]
    units: list[str] | None
    missing: str
    step: str


def audit_coverage(mech: str, settings: list[float], variants: list, audits: list, released: list[str],
                   sample: bool) -> Coverage:
    """The settings among ``settings`` (shown safe) that the audit checked: for each, every variant of the
    verdict (with and without BLOCK) has results for ``mech`` at that very ε, drawn through ``mech``'s own
    publishing function (``details["published_through"]``), every one of them passed, and together they
    audited every unit of ``released``; or, where the user asked for a ``sample`` of units
    (``release.audit.units``), the units audited at every covered setting, which the decision then names. An
    audit at another ε, on other units, of another variant or through another mechanism covers nothing.

    >>> from censusrecon.synth.audit.statistics import AuditResult
    >>> ok = AuditResult("m", 8.0, 0.1, 10, 0.95, "e", {"a": "pass"}, {"with_block": False, "published_through": "m",
    ...                  "audited_units": ["u1", "u2"]})
    >>> audit_coverage("m", [0.5, 1.0], [False], [ok], ["u1", "u2"], False).missing
    'its audit did not check ε = 1, the least protective setting shown safe (it checked ε = 8)'
    >>> audit_coverage("m", [8.0], [False], [ok], ["u1", "u2", "u3"], False).missing
    '1 of its 3 released units was not audited at ε = 8 (u3)'
    >>> audit_coverage("m", [8.0], [False], [ok], ["u1", "u2", "u3"], True).units
    ['u1', 'u2']
    """
    mine = [a for a in audits if a.mechanism == mech]
    covered, why, steps, units = [], {}, {}, set(released)
    for s in settings:
        for v in variants:
            tag = f" (the variant {'with' if v else 'without'} BLOCK)" if len(variants) > 1 else ""
            at = [a for a in mine if a.declared_epsilon == s and a.details.get("with_block") == v]
            if not at:
                checked = sorted({a.declared_epsilon for a in mine})
                why[s] = (f"its audit did not check ε = {s:g}{tag}, the least protective setting shown safe"
                          + (f" (it checked ε = {', '.join(f'{e:g}' for e in checked)})" if checked else " (no audit)"))
                steps[s] = (f"audit ε = {s:g}: add it to release.audit.epsilons (or epsilons: all), then rerun with "
                            "--reaudit")
                break
            other = sorted({str(a.details.get("published_through")) for a in at} - {mech})
            if other:
                why[s] = (f"its audit at ε = {s:g}{tag} drew its releases through another publishing function "
                          f"({', '.join(other)}), not its own")
                steps[s] = "audit it through its own publishing function (evaluate-release --reaudit)"
                break
            short = [a for a in at if a.outcome != "passed"]
            if short:
                unchecked = sorted({c for a in short for c in a.unchecked()})
                why[s] = (f"its audit at ε = {s:g}{tag} is {short[0].outcome}"
                          + (f": not shown to keep its ε ({', '.join(unchecked)} could not run)" if unchecked else ""))
                need = max((a.details.get("runs_to_certify") or 0 for a in short), default=0)
                steps[s] = (f"rerun the audit with about {need:,} releases per neighbour (release.audit.runs) to "
                            "certify its ε" if need else "rerun the audit (evaluate-release --reaudit)")
                break
            audited = {str(u) for a in at for u in a.details.get("audited_units") or []}
            left = [u for u in released if u not in audited]
            if left and not sample or len(left) == len(released):
                why[s] = (f"{len(left)} of its {len(released)} released units {'was' if len(left) == 1 else 'were'} "
                          f"not audited at ε = {s:g}{tag} ({', '.join(left[:5])}{', …' if len(left) > 5 else ''})")
                steps[s] = "audit every released unit: release.audit.units: all (the default), then rerun with --reaudit"
                break
            units &= audited
        else:
            covered.append(s)
    top = max(settings, default=None)
    return Coverage(covered, sorted(units) if sample and units != set(released) else None,
                    why.get(top, ""), steps.get(top, ""))


def combine(mech: str, verdicts: list[Verdict]) -> tuple[str, float | None]:
    """One verdict across variants: any shown above the tolerance decides against; any undecided leaves
    it undecided; else safe at the most protective of the variants' safe settings."""
    statuses = [v.status for v in verdicts]
    if "none_safe" in statuses:
        return "none_safe", None
    if any(s != "safe" for s in statuses):
        return next(s for s in statuses if s != "safe"), None
    settings = [v.setting for v in verdicts]
    return "safe", (min(settings) if registry.is_dp(mech) else max(settings))


@dataclass(frozen=True)
class Evidence:
    """Everything a release evaluation measured that its decision reads: per variant the verdict rows
    (:func:`experiments.release.release_report.verdict_rows`, each with the words of the attack's strength at its
    setting, ``strength``, and the best attack on the exact tables, ``exact``: built by
    :func:`experiments.release.evaluate.verdicts_of`), the audit results, the ledger's entries (fit for
    publication), the mechanisms that published rows, the risks measured (anonymeter's table, or empty, and why
    not), the units of the file (None: not a file's), the units released (which the audit must cover), and what the
    decision file records of the run (the code's fingerprint, the inputs' digests, which audit command's audit
    stands, if one does)."""

    verdicts: dict
    audits: list
    entries: list
    row_mechanisms: frozenset = frozenset()
    risks: object = None
    risk_note: str | None = None
    units_in_file: int | None = None
    released: tuple = ()
    code_fingerprint: str = ""
    inputs: dict = field(default_factory=dict)
    audit_when: str | None = None
    membership: pd.DataFrame | None = None  # the membership attacks' figures (inference.summarise_membership)
    attribute: pd.DataFrame | None = None  # attribute inference's (inference.summarise_attribute)
    inference_notes: pd.DataFrame | None = None  # the games not played, and why
    persons: pd.DataFrame | None = None  # persons beyond the best guess per setting (summarise_release_persons)


@dataclass(frozen=True)
class Standing:
    """Where one mechanism stands before its action is chosen: its verdicts and their combined status at its
    setting, its audit's state and coverage, whether its ledger says it is fit for publication (and, where not, why),
    its risks."""

    status: str
    setting: float | None
    verdicts: list
    audit: str
    coverage: Coverage | None
    fit: bool | None
    risk: str
    unfit_why: str = ""
    gates: tuple = ()  # the inference attacks' gates
    decided_by: str = ""
    unsaturated: tuple = ()  # covered settings at which RAP-Rank had not saturated: (setting, K, gain)

    @property
    def simulated(self) -> bool:
        """Not fit for publication because its noise came from the simulation backend."""
        return self.fit is False and "simulation" in self.unfit_why


def decide(cfg, ev: Evidence) -> Decision:
    """The decision, once, from everything the evaluation measured (:class:`Evidence`): per mechanism PUBLISH,
    DO NOT PUBLISH or CANNOT DECIDE; PUBLISH covers only the settings, variants and units the audit checked
    (:func:`audit_coverage`)."""
    r = cfg.release
    measured = set(ev.risks["mechanism"]) if ev.risks is not None and len(ev.risks) else set()
    out = [d for mech in r.evaluated if (d := _mechanism_decision(cfg, mech, ev, measured)) is not None]
    units = max((int(_num(v.figures, "units")) for m in out for v in m.verdicts if v.figures), default=0)
    return Decision(out, r.tolerance.words(), units, ev.units_in_file, ev.code_fingerprint, cfg.digest(),
                    ev.inputs or {}, ev.audit_when, r.inference.fpr)


def _standing(cfg, mech: str, ev: Evidence, measured: set) -> Standing | None:
    """Where ``mech`` stands (None: no variant has a verdict row for it)."""
    r = cfg.release
    verdicts = []
    for v, rows in ev.verdicts.items():
        row = next((x for x in rows if x["mechanism"] == mech), None)
        if row is not None:
            verdicts.append(Verdict(v, row["status"], row["setting"], figures_of(row["x"]),
                                    figures_of(row.get("next")), row["plan"], row["text"],
                                    row.get("table_error"), row.get("strength", ""), figures_of(row.get("exact")),
                                    list(row.get("unsaturated", []))))
    if not verdicts:
        return None
    status, setting = combine(mech, verdicts)
    gs = tuple(gates(mech, r.settings_of(mech), ev.membership, ev.attribute, ev.inference_notes, r.tolerance))
    decided_by = _persons_attack(verdicts)
    if status == "safe":
        setting, decided_by = _gated(mech, setting, verdicts, gs, r.settings_of(mech))
    covered_settings = [x for x in r.settings_of(mech) if _protects_at_least(mech, x, setting)] if setting is not None \
        else []
    unsaturated = tuple(u for v in verdicts for u in v.unsaturated if u[0] in covered_settings)
    coverage = None
    if status == "safe" and registry.is_dp(mech) and not registry.is_file(mech):
        coverage = audit_coverage(mech, [s for s in sorted(r.settings_of(mech)) if s <= setting],
                                  [v.variant for v in verdicts], ev.audits, list(ev.released), r.audit.units != "all")
    entry = next((e for e in ev.entries if e["mechanism"] == mech), None)
    fit = None if entry is None or entry.get("for_publication") is None else bool(entry["for_publication"])
    unfit_why = ((entry.get("not_dp") or entry.get("publication_note") or "not fit for publication")
                 if fit is False else "")
    return Standing(status, setting, verdicts, _audit_state(mech, ev.audits), coverage, fit,
                    _risk_state(mech, ev.row_mechanisms, measured, ev.risk_note), unfit_why, gs, decided_by,
                    unsaturated)


def _protects_at_least(mech: str, s: float, setting: float) -> bool:
    """Whether setting ``s`` protects at least as much as ``setting`` (ε no larger; a swap rate no smaller)."""
    return s <= setting if registry.is_dp(mech) else s >= setting


def _persons_attack(verdicts: list) -> str:
    """The attack whose persons the verdict rests on, as a decision names it."""
    fig = next((v.figures for v in verdicts if v.figures), None) or {}
    names = re.sub(r" \(\d+ units?\)", "", str(fig.get("best_attacks", "") or ""))
    return f"reconstruction: {names}" if names else "reconstruction"


def _gated(mech: str, setting: float, verdicts: list, gs: tuple, settings: list[float]) -> tuple[float | None, str]:
    """The setting shown safe by the persons' verdict and every inference gate that passed somewhere, and the attack
    that decided it: the one whose safe settings stop first, or, where several stop at the same one (or none
    stops), the one closest to its tolerance there."""
    order = protective_order(mech, settings)
    fig = next((v.figures for v in verdicts if v.figures and v.setting == setting), None) or {}
    tol = _num(fig, "tolerance")
    persons_margin = (tol - _num(fig, "excess_upper")) / tol if tol and tol > 0 else math.inf
    cands = [(order.index(setting), persons_margin if math.isfinite(persons_margin) else math.inf,
              _persons_attack(verdicts))]
    for g in gs:
        if g.status == "safe" and g.setting is not None:
            cands.append((order.index(g.setting), (g.margin or 0.0) / g.tolerance if g.tolerance > 0 else 0.0,
                          ATTACK_WORDS[g.attack]))
    index, _, who = min(cands, key=lambda c: (c[0], c[1]))
    return order[index], who


def _closing(cfg, mech: str, st: Standing, ev: Evidence) -> tuple[list[str], list[str]]:
    """What closes PUBLISH to ``mech``: the reasons for DO NOT PUBLISH, then those for CANNOT DECIDE."""
    closed_no, closed_undecided = [], []
    if st.audit == "failed":
        failing = [f"ε = {a.declared_epsilon:g}: {a.checks_summary()}" for a in ev.audits
                   if a.mechanism == mech and a.outcome == "failed"]
        closed_no.append("the audit of the code that publishes it failed (" + "; ".join(failing) + ")")
    if st.fit is False:
        closed_no.append("noise from the simulation backend: seeded, for studies, not for publication" if st.simulated
                         else st.unfit_why)
    if st.status == "none_safe":
        closed_no.append("shown above the tolerance even at its most protective setting")
    if st.coverage is not None and not st.coverage.covered and st.audit != "failed":
        closed_undecided.append(st.coverage.missing)
    elif st.coverage is None and st.audit in ("inconclusive", "not run"):
        mine = [a for a in ev.audits if a.mechanism == mech and a.outcome == "inconclusive"]
        closed_undecided.append(f"its audit is {st.audit}" + (
            f": not shown to keep its ε ({', '.join(sorted({c for a in mine for c in a.unchecked()}))} could not run)"
            if mine else ""))
    if st.risk.startswith("not measured"):
        closed_undecided.append("the risks of the rows it publishes were not measured (" + _risk_why(st.risk) + ")")
    if st.status == "not_shown_safe":
        closed_undecided.append(f"no setting is shown safe at the tolerance of {cfg.release.tolerance.words()}")
    elif st.status == "cannot_decide":
        closed_undecided.append("the attack is not beyond the best guess even on the exact tables, so this "
                                "evaluation cannot tell a protected release from an unprotected one")
    for g in st.gates:  # the inference attacks, after the reconstruction's own verdict
        if g.status == "none_safe":
            closed_no.append(gate_words(g, mech))
        elif g.status == "not_shown_safe" or (g.status == "not_run" and not registry.is_file(mech)):
            closed_undecided.append(gate_words(g, mech))
    if st.unsaturated:
        said = ", ".join(f"{setting_label(mech, s)} (doubling K from {k // 2} to {k} added {gain:+d} persons)"
                         for s, k, gain in st.unsaturated[:3])
        closed_undecided.append(f"RAP-Rank had not saturated at {said}: a stronger attack could still change the "
                                "verdict")
    return closed_no, closed_undecided


def _mechanism_decision(cfg, mech: str, ev: Evidence, measured: set) -> MechanismDecision | None:
    """One mechanism's decision (None: no verdict of it to decide on)."""
    st = _standing(cfg, mech, ev, measured)
    if st is None:
        return None
    closed_no, closed_undecided = _closing(cfg, mech, st, ev)
    caveats = []
    if registry.is_file(mech):
        caveats.append("its ε is the agency's declaration: a file cannot be audited")
    if not registry.is_dp(mech):
        caveats.append("not differentially private: the verdict holds against these attacks only")
    caveats += [f"{gate_words(g, mech)}: a file cannot be drawn again, so the decision rests on the other attacks"
                for g in st.gates if g.status == "not_run" and registry.is_file(mech)]
    action = DO_NOT_PUBLISH if closed_no else CANNOT_DECIDE if closed_undecided else PUBLISH
    step = _next_step(mech, st, ev)
    setting, coverage, released = st.setting, st.coverage, ev.released
    covered, units_covered = [], None
    if coverage is not None and coverage.covered:
        covered, units_covered = coverage.covered, coverage.units
        if max(coverage.covered) < setting:  # shown safe further than the audit checked: PUBLISH names the audited
            caveats.append(f"shown safe up to {setting_label(mech, setting)}, but {coverage.missing.removeprefix('its ')}"
                           f": {coverage.step}")
            setting = max(coverage.covered)
        if units_covered is not None:
            caveats.append(f"the audit checked a sample of {len(units_covered)} of the {len(released)} released "
                           "units (release.audit.units): this decision covers those units only")
    publish = action == PUBLISH
    audited = [{"declared": a.declared_epsilon, **{k: a.measured[k] for k in ("epsilon", "share", "by", "tight")}}
               for a in ev.audits if a.mechanism == mech]
    loose = [m for m in audited if not m["tight"] and (not publish or m["declared"] in covered)]
    if loose and st.audit == "passed":
        caveats.append("the audit measured only " + ", ".join(f"{m['share']:.0%} of ε = {m['declared']:g}"
                                                             for m in loose)
                       + ": below half, it could miss code that spends twice its ε")
    variant = st.verdicts[0].variant
    risk = risk_rows(mech, cfg.release.settings_of(mech), ev.membership, ev.attribute, ev.persons, variant)
    return MechanismDecision(mech, action, setting if publish else None, closed_no + closed_undecided, step, caveats,
                             st.audit, st.fit, st.risk, st.verdicts, covered if publish else [],
                             units_covered if publish else None,
                             len(released) if publish and units_covered is not None else None,
                             sorted(cfg.release.settings_of(mech)), st.simulated,
                             st.decided_by if publish else "", [g.as_dict() for g in st.gates], risk, audited)


def _next_step(mech: str, st: Standing, ev: Evidence) -> str:
    """What to do next, for every outcome."""
    steps = []
    if st.unsaturated:
        k = max(k for _, k, _ in st.unsaturated)
        steps.append(f"raise RAP-Rank's K (attack.runs) to {2 * k} or more, until doubling it adds no persons, and "
                     "rerun")
    for g in st.gates:
        if g.status == "not_run" and not registry.is_file(mech):
            steps.append("play the inference games (release.inference.run: true; the realistic adversary needs a "
                         "geographic baseline or chance, and a holdout half or a release that can be drawn again)")
        elif g.status == "not_shown_safe":
            steps.append(f"evaluate more units or {more_protective(mech)} to show {ATTACK_WORDS[g.attack]} within "
                         "its tolerance")
    if st.coverage is not None and not st.coverage.covered and st.audit != "failed":
        steps.append(st.coverage.step)
    if st.audit == "failed":
        steps.append("fix the code that publishes it (the audit's failing checks are in the report) and rerun with "
                     "--reaudit")
    if st.fit is False:
        if st.simulated:
            steps.append("evaluate it with a publishing backend: release.backend: opendp (pip install "
                         "'censusrecon[dp]')")
        elif not registry.is_dp(mech):
            steps.append("a differentially private mechanism is what could be published; this one is evaluated for "
                         "comparison")
    if st.coverage is None and st.audit in ("inconclusive", "not run"):
        mine = [a for a in ev.audits if a.mechanism == mech and a.outcome == "inconclusive"]
        need = max((a.details.get("runs_to_certify") or 0 for a in mine), default=0)
        steps.append((f"rerun the audit with about {need:,} releases per neighbour (release.audit.runs) to certify its "
                       "ε" if need else "run the audit (censusrecon audit, or evaluate-release --reaudit)"))
    if st.risk.startswith("not measured"):
        why = _risk_why(st.risk)
        steps.append("measure the risks of its rows on a random half of each unit (target.whole_units: false): the "
                     "other half is anonymeter's control set" if "whole units" in why else
                     "measure the risks of its rows: release.risks: true" if "release.risks" in why else
                     "measure the risks of its rows: make risk-env")
    verdicts = st.verdicts
    if st.status == "none_safe":
        x = verdicts[0].figures or {}
        steps.append(f"evaluate {more_protective(mech)} than {setting_label(mech, _num(x, 'setting'))}, or choose "
                     "another mechanism")
    elif st.status in ("not_shown_safe", "cannot_decide"):
        plans = [v.plan for v in verdicts if v.plan]
        steps.append(plans[0].removeprefix("To decide (an estimate, at 80% power): ").rstrip(".") if plans else
                     "evaluate more units or a stronger attack")
    elif st.status == "safe":
        v = next((v for v in verdicts if v.setting == min(x.setting for x in verdicts)), verdicts[0]) \
            if registry.is_dp(mech) else verdicts[0]
        steps.append(partial_step(mech, v.figures or {}, v.next, ev.units_in_file))
    return "; ".join(s for s in steps if s)


def _measure(fig: dict) -> str:
    return ("each unit's persons unique in D (the tolerance's measure)" if fig.get("scale", "persons") == "share"
            else "persons per unit (the tolerance's measure)")


def _figure(fig: dict, value: float) -> str:
    if not math.isfinite(value):
        return "+∞ (one unit: no spread)" if value > 0 else "−∞ (one unit: no spread)"
    return f"{100 * value:+.1f}%" if fig.get("scale", "persons") == "share" else f"{value:+.1f}"


def _tolerated(fig: dict) -> str:
    t = _num(fig, "tolerance")
    return f"{100 * t:g}%" if fig.get("scale", "persons") == "share" else f"{t:g}"


def rule_words(status: str, fig: dict, exact: dict | None = None) -> str:
    """The comparison the verdict rests on, in the tolerance's measure, with the one-sided limit the rule
    uses: for a setting shown safe its upper 95% limit below the tolerance; shown above, its lower 95%
    limit above it; neither, the upper limit not below it; undecidable, the two-sided interval of the
    attack on the exact tables not above 0.

    >>> f = {"scale": "share", "tolerance": 0.01, "excess_upper": 0.024, "excess_lower": 0.012, "setting": 1.0}
    >>> rule_words("none_safe", f)
    "lower one-sided 95% limit of the excess +1.2% of each unit's persons unique in D (the tolerance's measure), above the 1% tolerated"
    """
    c = f"{CONFIDENCE:.0%}"
    if status == "cannot_decide":
        if not exact:
            return "the exact tables were not evaluated: nothing shows the attack's power"
        low, high = (("share_low", "share_high") if exact.get("scale", "persons") == "share" else ("ci_low", "ci_high"))
        return (f"on the exact tables the two-sided {c} interval of the excess, {_figure(exact, _num(exact, low))} to "
                f"{_figure(exact, _num(exact, high))} of {_measure(exact)}, is not above 0")
    if status == "none_safe":
        return (f"lower one-sided {c} limit of the excess {_figure(fig, _num(fig, 'excess_lower'))} of {_measure(fig)}, "
                f"above the {_tolerated(fig)} tolerated")
    up = _figure(fig, _num(fig, "excess_upper"))
    if status == "safe":
        return f"upper one-sided {c} limit of the excess {up} of {_measure(fig)}, below the {_tolerated(fig)} tolerated"
    return (f"upper one-sided {c} limit of the excess {up} of {_measure(fig)}, not below the {_tolerated(fig)} "
            "tolerated" + (f" (lower limit {_figure(fig, _num(fig, 'excess_lower'))}: not shown above it either)"
                           if status == "not_shown_safe" else ""))


def estimate_words(fig: dict) -> str:
    """The estimate beside the rule, labelled as such: the mean excess with its two-sided interval, in the
    tolerance's measure and in persons per unit.

    >>> print(estimate_words({"scale": "share", "units": 3, "excess_mean": 0.092, "share_low": 0.005,
    ...                       "share_high": 0.18, "difference_mean": 3.1, "ci_low": -1.0, "ci_high": 7.2}))
    mean +9.2% (two-sided 95% interval +0.5% to +18.0%, 3 units); in persons +3.1 per unit (-1.0 to +7.2)
    """
    c = f"{CONFIDENCE:.0%}"
    n = int(_num(fig, "units"))
    if n < 2:
        return f"mean {_figure(fig, _num(fig, 'excess_mean'))} (1 unit: no interval)"
    if fig.get("scale", "persons") == "share":
        return (f"mean {_figure(fig, _num(fig, 'excess_mean'))} (two-sided {c} interval "
                f"{_figure(fig, _num(fig, 'share_low'))} to {_figure(fig, _num(fig, 'share_high'))}, {n} units); in "
                f"persons {_num(fig, 'difference_mean'):+.1f} per unit ({_num(fig, 'ci_low'):+.1f} to "
                f"{_num(fig, 'ci_high'):+.1f})")
    return (f"mean {_num(fig, 'difference_mean'):+.1f} per unit (two-sided {c} interval {_num(fig, 'ci_low'):+.1f} to "
            f"{_num(fig, 'ci_high'):+.1f}, {n} units)")


def exact_words(exact: dict) -> str:
    """The attack on the exact tables, the yardstick of its power: persons against the best guess, and the
    rule that lets the evaluation decide (the two-sided interval of the excess, in the tolerance's measure,
    above 0), with the other measure's interval labelled as not the rule's."""
    share = exact.get("scale", "persons") == "share"
    low, high = (("share_low", "share_high") if share else ("ci_low", "ci_high"))
    beyond = _num(exact, low) > 0
    one = _num(exact, "units") < 2
    other = (f"; in persons {_num(exact, 'difference_mean'):+.1f} per unit ("
             + ("1 unit: no interval" if one else f"{_num(exact, 'ci_low'):+.1f} to {_num(exact, 'ci_high'):+.1f}")
             + "), not the rule's measure" if share else "")
    return (f"best attack ({exact.get('best_attacks', '')}) {persons_words(exact)}, best guess "
            f"({exact.get('best_baselines', '')}) {int(_num(exact, 'baseline_persons'))}; rule: the two-sided "
            f"{CONFIDENCE:.0%} interval of the excess, {_figure(exact, _num(exact, low))} to "
            f"{_figure(exact, _num(exact, high))} of {_measure(exact)}, is " + ("" if beyond else "not ")
            + "above 0, so the evaluation " + ("can" if beyond else "cannot") + " decide" + other)


#: a verdict's status, as the terminal's per-mechanism detail says it
STATUS_SAID = {"safe": "shown safe up to", "none_safe": "shown above the tolerance even at",
               "not_shown_safe": "not shown safe at any setting; at the most protective,",
               "cannot_decide": "cannot decide (the attack is not beyond the best guess on the exact tables); at"}


def terminal_lines(decision: Decision, variant_names: dict | None = None) -> list[str]:
    """What ``evaluate-release`` prints: first the decision's lines (one per mechanism), then per mechanism
    the verdict of each variant with the rule's limit and the estimate labelled apart, the gates, any
    caveat and the next step."""
    out = [f"DECISION (tolerance: {decision.tolerance} reconstructed beyond the best guess; {decision.units} units "
           "evaluated" + (f" of the {decision.units_in_file} in the file" if decision.units_in_file else "") + "):"]
    out += ["  " + line for line in decision.lines()]
    seen = set()
    for m in decision.mechanisms:  # the yardstick, once per variant: the attack on the exact tables
        for v in m.verdicts:
            if v.exact and v.variant not in seen:
                seen.add(v.variant)
                tag = f" ({variant_names[v.variant]})" if variant_names and len(variant_names) > 1 else ""
                out.append(f"exact tables{tag}: {exact_words(v.exact)}")
    for m in decision.mechanisms:
        out.append("")
        out.append(f"{m.mechanism}: {HEADS[m.action]}" + (f" at {m.where()}" if m.action == PUBLISH else ""))
        for v in m.verdicts:
            tag = f" ({variant_names[v.variant]})" if variant_names and len(variant_names) > 1 else ""
            fig = v.figures or {}
            where = setting_label(m.mechanism, _num(fig, "setting")) if fig else ""
            out.append(f"  verdict{tag}: {STATUS_SAID[v.status]} {where}")
            out.append(f"    rule: {rule_words(v.status, fig, v.exact)}")
            if fig:
                out.append(f"    estimate (not the rule): {estimate_words(fig)}")
                out.append(f"    persons: best attack ({fig.get('best_attacks', '')}) {persons_words(fig)}; best guess "
                           f"({fig.get('best_baselines', '')}) {int(_num(fig, 'baseline_persons'))}"
                           + (f"; table error {v.table_error:.2f} persons per published cell"
                              if v.table_error is not None else ""))
            if v.next:
                out.append(f"    at {setting_label(m.mechanism, _num(v.next, 'setting'))}: not shown safe; rule: "
                           f"{rule_words('next', v.next)}")
        out.append(f"  audit: {m.audit}; fit for publication: {fit_words(m.fit_for_publication)}; risks of published "
                   f"rows: {m.risks}")
        if m.measured:
            out.append("  measured ε: " + "; ".join(f"{x['epsilon']:.3g} at ε = {x['declared']:g} ({x['share']:.0%}, "
                                                    f"{x['by']})" for x in m.measured))
        out += risk_lines(m, decision.fpr)
        for r in m.reasons[1:]:
            out.append(f"  also: {r}")
        for c in m.caveats:
            out.append(f"  caveat: {c}")
        if m.next_step:
            out.append(f"  next: {m.next_step}")
    return out
