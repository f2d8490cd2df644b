"""Plots and the report of a release evaluation (Markdown and self-contained HTML), regenerated from its files."""

from __future__ import annotations

import json
from dataclasses import dataclass
import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg", force=False)
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from censusrecon.experiments.release.release_bureau import agreement_section, bureau_section
from censusrecon.experiments.release.release_privacy import audit_section, ledger_section, publication_section
from censusrecon.experiments.release.risk_report import risk_section
from censusrecon.experiments.doc import Doc  # noqa: E402
from censusrecon.experiments.metrics import (CONFIDENCE, PLAN_POWER, SATURATION_SHARE,  # noqa: E402
                                 best_baselines, difference_words, saturation, saturation_words,
                                 strength_sequence, strength_table, summarise_persons, unique_share,
                                 unit_names, units_to_decide, upper_limit, variant_label)
from censusrecon.experiments.release.words import (fit_words, less_protective,  # noqa: E402,F401
                                       more_protective, persons_words, setting_label, units_advice)
from censusrecon.experiments.results import time_words  # noqa: E402
from censusrecon.synth.release import DERIVED_ROWS  # noqa: E402
from censusrecon.experiments.config import ConfigError, parse_config, ToleranceConfig  # noqa: E402
from censusrecon.experiments.release.decision import HEADS, load_decision, rule_words  # noqa: E402
from censusrecon.microdata.sources import source  # noqa: E402
from censusrecon.synth.audit.statistics import AuditResult  # noqa: E402
from censusrecon.synth import registry  # noqa: E402
from censusrecon.synth.registry import BASELINE, EXACT  # noqa: E402

#: The best attack on a unit's release: the attack (RAP-Rank, the exact attack, the trivial
#: one-way-margins attack) that reconstructs the most persons there.
BEST_ATTACK = "best attack"


def release_persons(df: pd.DataFrame) -> pd.DataFrame:
    """Per variant, unit, ε and mechanism (the exact tables as ε = inf): persons of D whose row is
    unique in D and among each attack's top u on the release, and the best attack's (attack
    ``"best attack"``, which one in ``best_attack``), next to the best guess without the release
    (the baseline that finds the most such persons on that unit, named in ``best_baseline``) and
    the difference. ``n_rows`` and ``n_unique`` are the unit's persons in D and unique in D."""
    top = df[df["k"] == df["u"]]
    best = best_baselines(top, top["mechanism"] == BASELINE, ["variant", "unit"])[
        ["variant", "unit", "method", "num_matched_unique"]]
    best = best.rename(columns={"method": "best_baseline", "num_matched_unique": "baseline_persons"})
    keep = ["variant", "unit", "setting", "mechanism", "method", "num_matched_unique", "n_rows",
            *(["n_unique"] if "n_unique" in top else [])]
    rel = top[top["mechanism"] != BASELINE][keep].rename(
        columns={"method": "attack", "num_matched_unique": "persons_reconstructed"})
    rel = rel.assign(best_attack=rel["attack"])
    strongest = rel.sort_values(["persons_reconstructed", "attack"], ascending=[False, True]).groupby(
        ["variant", "unit", "setting", "mechanism"], sort=False, dropna=False).head(1).assign(attack=BEST_ATTACK)
    out = pd.concat([rel, strongest], ignore_index=True).merge(best, on=["variant", "unit"])
    out["difference"] = out["persons_reconstructed"] - out["baseline_persons"]
    return out.reset_index(drop=True)


def summarise_release_persons(per_unit: pd.DataFrame, tolerance=None) -> pd.DataFrame:
    """Across units, per variant, mechanism, attack and setting: persons reconstructed and found by
    the best baselines (sums), the denominators (persons in D, unique in D), the mean difference
    per unit with its two-sided t interval, and which attacks and baselines were the best.

    The verdict's figures are in the tolerance's own measure (``scale``): with ``share_of_unique``
    (the default, :class:`~experiments.config.ToleranceConfig`) each unit's excess is its share of
    the unit's persons unique in D (``share``), with ``per_unit`` it is persons (``persons``).
    ``tolerance`` is what each unit tolerates in that measure, ``excess_upper`` / ``excess_lower``
    the one-sided upper / lower :data:`CONFIDENCE` Student t limits of the mean excess over units,
    ``margin_mean`` / ``margin_std`` the mean and spread of (excess − tolerance) (for plans), and
    ``beyond_spread`` whether the two-sided interval of the mean excess lies above 0 (the gate on the
    exact tables). Measuring each unit against its own tolerance keeps units of different sizes
    comparable: a tract twice as large finds about twice the persons, not twice the share."""
    tol = tolerance or ToleranceConfig()
    if tol.per_unit is not None:
        scale, excess, allowed = "persons", per_unit["difference"].astype(np.float64), float(tol.per_unit)
    elif "n_unique" in per_unit:
        scale, excess, allowed = "share", unique_share(per_unit), float(tol.share_of_unique)
    else:
        raise ConfigError("release.tolerance.share_of_unique needs the persons unique in D of each unit, which "
                          "these results do not have; give release.tolerance.per_unit instead")
    per_unit = per_unit.assign(_margin=excess - allowed)
    out = summarise_persons(per_unit, ("variant", "mechanism", "attack", "setting"),
                            best_attacks=("best_attack", unit_names), margin_mean=("_margin", "mean"),
                            margin_std=("_margin", "std"))
    up = [upper_limit(m, sd, n) for m, sd, n in zip(out["margin_mean"], out["margin_std"], out["units"])]
    low = [-upper_limit(-m, sd, n) for m, sd, n in zip(out["margin_mean"], out["margin_std"], out["units"])]
    out = out.assign(scale=scale, tolerance=allowed, excess_mean=out["margin_mean"] + allowed,
                     excess_upper=allowed + np.array(up), excess_lower=allowed + np.array(low))
    if scale == "share":
        out["beyond_spread"] = out["share_low"] > 0
    return out


def published_rows(util: pd.DataFrame) -> pd.DataFrame:
    """The error table's rows of the tables as declared (one per table and level), without the derived
    block and unit totals."""
    return util[~util["table"].isin(DERIVED_ROWS)]


def utility_summary(util: pd.DataFrame, by=("variant", "mechanism", "setting")) -> pd.DataFrame:
    """Per variant, mechanism and ε: the table error, the mean absolute error per published cell
    (``mae_per_cell``, persons) and the share of cells off by more than 10% of their true count, over
    every published cell of the declared tables and every unit, each cell weighing the same (the
    derived block and unit totals left out: their cells are already counted). ``cells``: published
    cells summed over units.

    >>> u = pd.DataFrame({"variant": 0, "mechanism": "m", "setting": 1.0, "table": ["A", "B", "unit total"],
    ...                   "cells": [3, 1, 1], "mae_per_cell": [1.0, 5.0, 17.0], "share_off_10pct": [0.0, 1.0, 1.0]})
    >>> utility_summary(u)[["mae_per_cell", "share_off_10pct", "cells"]].values.tolist()
    [[2.0, 0.25, 4.0]]
    """
    rows = published_rows(util)
    rows = rows.assign(abs_error=rows["mae_per_cell"] * rows["cells"], off=rows["share_off_10pct"] * rows["cells"])
    g = rows.groupby(list(by), sort=False)[["abs_error", "off", "cells"]].sum().reset_index()
    return g.assign(mae_per_cell=g["abs_error"] / g["cells"], share_off_10pct=g["off"] / g["cells"]).drop(
        columns=["abs_error", "off"])


#: verdict statuses that decide (the decision's other gates can still close: experiments.release.decision)
DECIDED = ("safe", "none_safe")


def exact_row(persons: pd.DataFrame, variant):
    """The best attack on the exact tables, summarised over units (None when not evaluated)."""
    e = persons[(persons["variant"] == variant) & (persons["attack"] == BEST_ATTACK) & (persons["setting"] == math.inf)]
    return e.iloc[0] if len(e) else None


def excess_words(x, value: float, signed: bool = True) -> str:
    """A figure in the verdict's measure (``x['scale']``): '+2.4% of each unit's persons unique in D'
    (a share) or '+3.1 per unit' (persons); unsigned for a tolerance.

    >>> excess_words({"scale": "share"}, 0.0243), excess_words({"scale": "persons"}, 3.14, signed=False)
    ("+2.4% of each unit's persons unique in D", '3.1 per unit')
    """
    if not np.isfinite(value):
        return "+∞ (one unit: no spread)"
    sign = "+" if signed else ""
    if x.get("scale", "persons") == "share":
        return f"{100 * value:{sign}.1f}% of each unit's persons unique in D"
    return f"{value:{sign}.1f} per unit"


def limit_words(x, tol_words: str) -> str:
    """'upper 95% limit +3.1 per unit, against 5.0 tolerated (5 persons per unit)', or in
    shares: 'upper 95% limit +2.4% of each unit's persons unique in D, against 1% tolerated'."""
    if x.get("scale", "persons") == "share":
        return (f"upper {CONFIDENCE:.0%} limit {excess_words(x, x['excess_upper'])}, against "
                f"{100 * x['tolerance']:g}% tolerated")
    return (f"upper {CONFIDENCE:.0%} limit {excess_words(x, x['excess_upper'])}, against "
            f"{x['tolerance']:.1f} tolerated ({tol_words})")


def decision_plan(status: str, x, exact, strength: dict | None, mechanism: str, available: int | None = None) -> str:
    """What would decide an undecided verdict, as an estimate: the units needed for the most
    protective setting to be shown safe (``not_shown_safe``) or for the attack on the exact tables to
    be shown beyond the best guess (``cannot_decide``), at :data:`PLAN_POWER` were the observed mean
    and spread the truth (:func:`~experiments.metrics.units_to_decide`), never more units than the file
    has (``available``: then the file cannot decide), and whether a stronger attack would help (the
    strength table: not saturated on the exact tables)."""

    by_k = (strength or {}).get("by_k", pd.DataFrame())
    ex_k = by_k[by_k["mechanism"] == EXACT] if len(by_k) else by_k
    weak = len(ex_k) and not bool(ex_k.iloc[0]["saturated"])
    stronger = ("a stronger attack: RAP-Rank had not saturated on the exact tables (doubling K from "
                f"{ex_k.iloc[0]['half']} to {ex_k.iloc[0]['runs']} added {ex_k.iloc[0]['gain']:+d} persons); "
                "raise attack.runs (K) and attack.steps (T)") if weak else ""
    parts = []
    if status == "cannot_decide":
        # the excess in the verdict's measure and its spread over units (excess − tolerance spreads as much)
        need = units_to_decide(float(exact["excess_mean"]), float(exact["margin_std"]), 0.5 + CONFIDENCE / 2)
        if need is not None:
            parts.append(units_advice(need, int(exact["units"]), available,
                                      "show the attack on the exact tables beyond the best guess"))
        else:
            parts.append("no number of units: on the exact tables the attack finds no more persons than the best "
                         "guess" + ("" if weak else ", and it had saturated: at this attack's strength the tables "
                                    "protect by themselves"))
    elif status == "not_shown_safe":
        need = units_to_decide(-float(x["margin_mean"]), float(x["margin_std"]), CONFIDENCE)
        where = setting_label(mechanism, x["setting"])
        if need is not None:
            parts.append(f"were the excess at {where} ({excess_words(x, x['excess_mean'])}) and its spread what this "
                         "evaluation saw, " + units_advice(need, int(x["units"]), available, f"show {where} safe"))
        else:
            parts.append(f"no number of units shows {where} safe: its excess ({excess_words(x, x['excess_mean'])}) "
                         f"is not below the tolerance ({excess_words(x, x['tolerance'], signed=False)}); evaluate "
                         f"{more_protective(mechanism)} or accept a larger "
                         "tolerance")
    if stronger:
        parts.append(stronger)
    return ("To decide (an estimate, at " + f"{PLAN_POWER:.0%} power): " + "; or ".join(parts) + ".") if parts else ""


def verdict_rows(persons: pd.DataFrame, util: pd.DataFrame, variant, strength: dict | None = None,
                 tolerance=None, available: int | None = None) -> list[dict]:
    """The verdict per mechanism, as data: its ``status`` (safe, none_safe, not_shown_safe or cannot_decide; ``decided``
    when in :data:`DECIDED`), the setting named safe (or None), the row of figures it rests on (``x``),
    the table error there, ``plan`` (what would decide it, when undecided) and the paragraph that
    says it.

    Safe is shown, not presumed: a setting is safe only when the one-sided upper :data:`CONFIDENCE`
    limit of the best attack's excess over the best guess (persons per unit) is below the tolerance
    (``persons`` summarised with it, :func:`summarise_release_persons`). The settings are tested in a
    fixed sequence from the most protective (smallest ε, largest swap rate), each at that level, and
    the sequence stops at the first not shown safe, so the chance of calling any unsafe setting safe
    stays at most 1 − CONFIDENCE over the whole grid. The evaluation decides only when the attack on
    the exact tables is beyond the best guess (its two-sided interval above 0): an attack that finds
    no one on unprotected tables shows nothing about protected ones."""
    tol_words = (tolerance or ToleranceConfig()).words()
    p = persons[(persons["variant"] == variant) & (persons["attack"] == BEST_ATTACK)]
    u = utility_summary(util[util["variant"] == variant]) if len(util) else pd.DataFrame()
    e = exact_row(persons, variant)
    decidable = e is not None and bool(e["beyond_spread"])
    tail = ""
    if e is not None:
        tail = (f" For comparison, on the exact tables the best attack ({e['best_attacks']}) reconstructs "
                f"{persons_words(e)}, against {int(e['baseline_persons'])} by the best guess without the release "
                f"({e['best_baselines']}): {difference_words(e)}.")
    ctx = _VerdictContext(u, e, decidable, strength, available, tol_words)
    out = []
    for mech in dict.fromkeys(p.loc[np.isfinite(p["setting"]), "mechanism"]):
        row, text, note = _mechanism_verdict(mech, p[p["mechanism"] == mech], ctx)
        row["decided"] = row["status"] in DECIDED
        row["text"] = text + note + tail
        out.append(row)
    return out


@dataclass(frozen=True)
class _VerdictContext:
    """What every mechanism's verdict of one variant reads: the tables' errors, the exact tables' row (None: not
    evaluated) and whether it is beyond the best guess, the attack's strength, the units available and the
    tolerance in words."""

    u: pd.DataFrame
    e: object
    decidable: bool
    strength: dict | None
    available: int | None
    tol_words: str


def _mechanism_verdict(mech: str, rows: pd.DataFrame, ctx: _VerdictContext) -> tuple[dict, str, str]:
    """One mechanism's verdict row, its paragraph and its note (not DP), from its rows of the best attack."""
    u, e, decidable, strength, available, tol_words = (ctx.u, ctx.e, ctx.decidable, ctx.strength, ctx.available,
                                                       ctx.tol_words)
    swap = not registry.is_dp(mech)  # a larger swap rate or ptable variance protects more
    rows = rows.sort_values("setting", ascending=not swap)  # most protective first
    note = (f" {registry.mechanism(mech).title} is not differentially private: no ε bounds what other attacks "
            "could learn." if swap else "")
    shown = rows["excess_upper"] < rows["tolerance"]
    first_fail = int(np.argmin(shown.to_numpy())) if not shown.all() else len(rows)
    safe = rows.iloc[:first_fail]
    row = {"mechanism": mech, "status": None, "setting": None, "x": None, "plan": ""}
    seq = ("Settings are tested from the most protective, each at " f"{CONFIDENCE:.0%}, stopping at the first not "
           "shown safe, so the chance of calling any unsafe setting of the grid safe is at most "
           f"{1 - CONFIDENCE:.0%}.")
    if not decidable:
        row.update(status="cannot_decide", x=rows.iloc[0])
        row["plan"] = decision_plan("cannot_decide", rows.iloc[0], e, strength, mech, available) if e is not None else (
            "To decide: evaluate the exact tables too (they are the yardstick of the attack's power).")
        text = (f"**{mech}**: this evaluation cannot tell a protected release from an unprotected one: even on the "
                "exact tables the best attack is not beyond the best guess without the release (too few units, "
                "too weak an attack, or tables that protect by themselves), so no setting is called safe. "
                + row["plan"])
    elif len(safe):
        x = safe.iloc[-1]
        row.update(status="safe", setting=float(x["setting"]), x=x)
        err = u[(u["mechanism"] == mech) & (u["setting"] == x["setting"])] if len(u) else u
        err_text = (f"; there, each published cell is off by {err['mae_per_cell'].iloc[0]:.2f} persons on "
                    f"average and {100 * err['share_off_10pct'].iloc[0]:.0f}% of cells are off by more than "
                    "10%" if len(err) else "")
        later = rows.iloc[first_fail:]
        row["next"] = later.iloc[0] if len(later) else None  # the first setting not shown safe
        after = ("Every setting evaluated is shown safe: the grid stops before protection ends; evaluate "
                 f"{less_protective(mech)} to find where it does." if not len(later) else
                 f"At {setting_label(mech, later['setting'].iloc[0])} it is not shown safe ("
                 + limit_words(later.iloc[0], tol_words) + ").")
        text = (f"**{mech}**: shown safe up to **{setting_label(mech, x['setting'])}** at the tolerance of "
                f"{tol_words}: there the best attack ({x['best_attacks']}) reconstructs {persons_words(x)}, the "
                f"best guess ({x['best_baselines']}) {int(x['baseline_persons'])}; difference "
                f"{difference_words(x)}, {limit_words(x, tol_words)}{err_text}. {after} {seq}")
    else:
        x = rows.iloc[0]
        where = setting_label(mech, x["setting"])
        if x["excess_lower"] > x["tolerance"]:
            row.update(status="none_safe", x=x)
            text = (f"**{mech}**: not safe at any setting evaluated: even at the most protective, {where}, the best "
                    f"attack reconstructs {persons_words(x)} against {int(x['baseline_persons'])} by the best guess, "
                    f"{difference_words(x)}; lower {CONFIDENCE:.0%} limit {excess_words(x, x['excess_lower'])}, "
                    f"above the {excess_words(x, x['tolerance'], signed=False)} tolerated ({tol_words}).")
        else:
            row.update(status="not_shown_safe", x=x)
            row["plan"] = decision_plan("not_shown_safe", x, e, strength, mech, available)
            text = (f"**{mech}**: no setting is shown safe at the tolerance of {tol_words}: at the most protective, "
                    f"{where}, the best attack reconstructs {persons_words(x)} against "
                    f"{int(x['baseline_persons'])} by the best guess, {difference_words(x)}, "
                    f"{limit_words(x, tol_words)}. Not shown safe is not shown unsafe: the evaluation cannot "
                    f"exclude an excess above the tolerance. {row['plan']} {seq}")
    if row["x"] is not None and len(u):  # the cost at the setting the figures are from, whatever the verdict
        err = u[(u["mechanism"] == mech) & (u["setting"] == row["x"]["setting"])]
        if len(err):
            row["table_error"] = float(err["mae_per_cell"].iloc[0])
    return row, text, note


def release_strength(run_dir: Path, variant) -> dict:
    """The attack's strength on each release: ``by_k`` the saturation rows (persons against K at the
    configured T) per (mechanism, setting), and ``by_t`` persons on the exact tables at T and 2T."""
    path = Path(run_dir) / "strength.parquet"
    if not path.exists():
        return {"by_k": pd.DataFrame(), "by_t": None}
    st = pd.read_parquet(path)
    st = st[st["variant"] == variant]
    if st.empty:
        return {"by_k": pd.DataFrame(), "by_t": None}
    t = int(st["steps"].min())
    by_k = saturation(st[st["steps"] == t], ["mechanism", "setting"])
    ex = st[(st["mechanism"] == EXACT) & (st["runs"] == st["runs"].max())].groupby("steps")["persons"].sum()
    return {"by_k": by_k, "by_t": ex if len(ex) > 1 else None}


def strength_sentence(strength: dict, row: dict) -> str:
    """What the verdict's setting owes to the attack's strength: saturated or not."""
    by_k = strength["by_k"]
    if by_k.empty or row.get("x") is None:
        return ""
    x = row["x"]
    hit = by_k[(by_k["mechanism"] == row["mechanism"]) & (by_k["setting"] == x["setting"])]
    if hit.empty:
        return ""
    h = hit.iloc[0]
    where = setting_label(row["mechanism"], x["setting"])
    if h["saturated"]:
        return f" At {where} RAP-Rank had saturated ({saturation_words(h)})."
    head = (f" **At {where} RAP-Rank had not saturated** ({strength_sequence(h)}: doubling K from {h['half']} to "
            f"{h['runs']} added {h['gain']:+d} persons)")
    gap = int(x["baseline_persons"]) - int(h["persons"])
    doublings = doublings_to_reach(gap, int(h["gain"]))
    if doublings is not None and doublings > 3:
        return (f"{head}; it is {gap} persons below the best guess, and even if every further doubling of K added as "
                f"many as the last, it would take {doublings} more doublings (K = {h['runs']}·2^{doublings}) to reach "
                "it: a stronger attack is unlikely to change this verdict.")
    return f"{head}; the verdict could change with a stronger attack."


def doublings_to_reach(gap: int, gain: int) -> int | None:
    """How many more doublings of K, each adding ``gain`` persons (the last doubling's: gains shrink
    as K grows, so this is a lower bound), close a ``gap``; None when there is no gap or no gain."""
    if gap <= 0 or gain <= 0:
        return None
    return -(-gap // gain)


def _release_strength_section(doc: Doc, strength: dict) -> None:
    by_k = strength["by_k"]
    if by_k.empty:
        return
    doc.h(3, "Attack strength")
    doc.p("Persons reconstructed by RAP-Rank (all units) on its first k runs, at each release: run k is the same "
          "whatever K is, so each column is the attack with K = k, at no extra cost. Saturated: the last doubling "
          f"of K added at most {SATURATION_SHARE:.0%} of the persons (and at most one per unit).")
    headers, rows, numeric = strength_table(by_k, [("mechanism", lambda r: r["mechanism"]),
                                                   ("setting", lambda r: setting_label(r["mechanism"], r["setting"]))])
    doc.table(headers, rows, numeric=numeric)
    t = strength["by_t"]
    if t is not None:
        (t1, p1), (t2, p2) = list(t.items())[:2]
        doc.p(f"In T, on the exact tables: {p1} persons at T = {t1}, {p2} at T = {t2} "
              f"({p2 - p1:+d}); " + ("more steps changed little." if abs(p2 - p1) <= max(1, SATURATION_SHARE * p1) else
                                     "**more steps reconstruct more**: the attack had not converged at the configured T."))


# ---- plots -------------------------------------------------------------------------------------


# ---- the report ---------------------------------------------------------------------------------


def _data_words(cfg, facts: dict) -> str:
    d = cfg.data
    src = {"embedded": "the embedded census-style population (generated by our own code)",
           "table": f"the person file {d.path}", "ppmf": f"the PPMF file {d.path}",
           "bureau": f"the Census Bureau's 2010 reconstruction extract {d.path} (real 2010 records)",
           "acs_nist": f"the NIST ACS excerpt {d.path}", "folktables": f"ACS PUMS files under {d.path}"}.get(
        d.source, f"{source(d.source).description}: {d.path}")
    levels = " ⊃ ".join(facts["levels"])
    empty = facts.get("empty_units") or []
    chosen = "named in the config" if cfg.target.unit_ids is not None else f"chosen {cfg.target.selection.replace('_', ' ')}"
    return (f"Data: {src}; geography {levels}. {len(facts['units'])} {cfg.target.level} units attacked, {chosen}"
            + (f" ({len(empty)} more named and listed, but nobody lives there, so nothing to reconstruct: "
               f"{', '.join(empty)})" if empty else "")
            + f"; attributes {', '.join(facts['attributes'])}.")


@dataclass(frozen=True)
class Evaluated:
    """What a release evaluation measured, as its report reads it: the persons-reconstructed curves (``df``), the
    tables' errors (``util``), the audit's results, the ledger (its value or its JSON) and the run's facts."""

    df: pd.DataFrame
    util: pd.DataFrame
    audits: list
    ledger: object
    facts: dict


def write_report(cfg, run_dir: Path, ev: Evaluated, decision) -> Path:
    """report.md and report.html of a release evaluation: the decision first (rendered from ``decision``,
    the value the terminal and the exit status render too, never recomputed here), what ran (generated
    from the config and the data, never hard-coded), who is reconstructed per mechanism and ε against the
    best baseline, the table errors, the verdicts, the audit and the ledger."""
    r = cfg.release
    run_dir = Path(run_dir)
    df, util, audits, ledger, facts = ev.df, ev.util, ev.audits, ev.ledger, ev.facts
    entries = ledger["entries"] if isinstance(ledger, dict) else ledger.entries
    persons = summarise_release_persons(release_persons(df), r.tolerance)
    variants = list(dict.fromkeys(df["variant"].tolist()))
    doc = Doc().h(1, f"Release evaluation: {cfg.name}")
    _decision_section(doc, cfg, decision, audits, variants, run_dir)
    risk_section(doc, decision, decision.fpr, run_dir)
    _what_ran_section(doc, cfg, facts, run_dir)
    for v in variants:
        _variant_section(doc, cfg, run_dir, (persons, util, decision), v, variants)
    doc.img(run_dir / "persons_error.png", "persons reconstructed against table error")
    doc.img(run_dir / "release_match_rate.png", "match rate per release")
    _risk_section(doc, run_dir, variants)
    publication_section(doc, cfg, entries)
    audit_section(doc, cfg, audits, facts)
    ledger_section(doc, cfg, ledger, entries)
    md, _ = doc.write(run_dir, "report", f"Release evaluation: {cfg.name}")
    return md


def _what_ran_section(doc: Doc, cfg, facts: dict, run_dir: Path) -> None:
    """What ran, generated from the config and the data: the workload, the relation and backend, the attacks and
    baselines, the programs and files evaluated."""
    r = cfg.release
    doc.h(2, "What ran")
    manifest = json.loads((run_dir / "manifest.json").read_text()) if (run_dir / "manifest.json").exists() else {}
    doc.p(f"Config hash `{cfg.digest()}`" + (f"; {time_words(manifest)}" if "seconds_total" in manifest else "")
          + ". " + _data_words(cfg, facts))
    doc.p(f"Published workload: {cfg.published.describe()}. Privacy unit: one person. Neighbouring relation: "
          f"**{r.relation}** ({'n is fixed and public' if r.relation == 'replace_one' else 'one person added or removed'}). "
          f"Noise backend: **{r.backend}**" + (" — seeded simulation noise, **not for publication**; use "
                                                 "`release.backend: opendp` for a real release."
                                                 if r.backend == "simulation" else "."))
    attacks = (f"Attacks: RAP-Rank (K = {cfg.attack.runs} runs, T = {cfg.attack.steps} steps, n' = {cfg.attack.rows}), "
               "the trivial attack `one_way_margins` (rows ranked by one-way margins fitted to the release)"
               + (", and the exact attack (integer programming)" if cfg.attack.exact else "") + ". ")
    if cfg.target.whole_units:
        doc.p("The attacks see the released tables of **every person of each unit** (D is the whole unit, as a "
              "release an agency publishes covers everyone) and try to reconstruct D's rows; ε protects the persons "
              "of D. There is no holdout half: the best guess without the release comes from persons outside the "
              "unit. " + attacks + f"Baselines, built without the release and without D: {', '.join(cfg.baselines.methods)}.")
    else:
        doc.p("The attacks see the released tables of **D, a random half of each unit's persons**, and try to "
              "reconstruct D's rows; ε protects the persons of D. The other half, D_holdout, is kept out of every "
              "release and stands for what an outsider may know of the unit's population: the holdout baseline "
              "guesses from it. " + attacks + "Baselines, built without the release and without D (from D_holdout "
              f"and from persons outside the unit): {', '.join(cfg.baselines.methods)}.")
    if r.programs:
        doc.p("Release programs made outside censusrecon, run by it at each ε on the persons each release protects, "
              "attacked like its own releases and audited as black boxes (their outputs on neighbours of the real "
              "data; with a declared noise family, the noise's scale, shape, tail and independence from output minus "
              "truth):")
        doc.table(["release", "program", "declared noise", "settings"],
                  [[registry.PROGRAM_PREFIX + p.name, f"`{p.function or ' '.join(p.command)}`", p.noise or "not declared",
                    json.dumps(p.params) if p.params else "none"] for p in r.programs], numeric=set())
    if r.files:
        doc.p("Releases made outside censusrecon, evaluated as published (their ε is the agency's declaration; a file "
              "cannot be audited):")
        doc.table(["release", "file", "declared ε", "made with"],
                  [[registry.FILE_PREFIX + f.name, f"`{f.path}`", "not DP" if f.epsilon is None else f"{f.epsilon:g}",
                    f.made_with or "not said"] for f in r.files], numeric=set())


def _persons_section(doc: Doc, cfg, persons: pd.DataFrame, v, variants: list) -> None:
    """Who is reconstructed per mechanism and setting in variant ``v``, against the best guess; and by each attack."""
    p = persons[persons["variant"] == v]
    title = "How many persons are reconstructed?" + (f" ({variant_label(v, variants)})" if len(variants) > 1 else "")
    doc.h(2, title)
    doc.p("A person is reconstructed when their row is unique in D and an attack ranks it among its top u "
          "candidates from the release. The *best attack* on a unit is the attack that reconstructs the most "
          "persons there; the *best guess* is the baseline that finds the most such persons there (both named). "
          f"Difference: best attack minus best guess, mean per unit with its {CONFIDENCE:.0%} Student t interval "
          "over units, and the same as a share of each unit's persons unique in D (the mean of the units' shares, "
          "with its interval). *Beyond spread* when the interval of the tolerance's measure lies above 0: the "
          + ("share (a large unit finds more persons than a small one because it is larger; the shares of "
             "units of different sizes agree better)." if cfg.release.tolerance.per_unit is None else "persons."))
    rows = []
    order = {m: i for i, m in enumerate([EXACT, *cfg.release.evaluated])}
    best_rows = p[p["attack"] == BEST_ATTACK]
    for _, x in best_rows.assign(o=best_rows["mechanism"].map(order)).sort_values(["o", "setting"]).iterrows():
        rows.append([x["mechanism"], setting_label(x["mechanism"], x["setting"]), x["best_attacks"],
                     persons_words(x), f"{int(x['baseline_persons'])} ({x['best_baselines']})",
                     difference_words(x), "yes" if x["beyond_spread"] else "no"])
    doc.table(["mechanism", "setting", "best attack", "persons reconstructed", "by the best guess",
               "difference", "beyond spread"], rows, numeric=set())
    each = p[p["attack"] != BEST_ATTACK].pivot_table(index=["mechanism", "setting"], columns="attack",
                                                      values="persons", aggfunc="sum", sort=False)
    doc.p("Persons reconstructed by each attack (all units):")
    doc.table(["mechanism", "setting", *each.columns],
              [[m, setting_label(m, s_), *[("" if pd.isna(v) else str(int(v))) for v in vals]]
               for (m, s_), vals in zip(each.index, each.to_numpy())], numeric=set(range(2, 2 + len(each.columns))))


def _exact_status_section(doc: Doc, run_dir: Path, v) -> None:
    """The exact attack's outcome per release of variant ``v``, units counted."""
    st = pd.read_parquet(run_dir / "exact_attack.parquet")
    if "residual" not in st:
        st["residual"] = np.nan
    st = st[st["variant"] == v].groupby(["mechanism", "setting", "status"], sort=False).agg(
        units=("unit", "size"), residual=("residual", "mean")).reset_index()
    doc.p("The exact attack (integer programming) per release, units counted. Consistent tables (the exact "
          "ones, TopDown's, the swapped and synthetic files') are solved as they are; independently noised "
          "tables by the least-deviation fit, whose residual Σ |A x − c̃| / scale (mean per unit) says how "
          "far the closest dataset is from what was published:")
    doc.table(["mechanism", "setting", "status", "units", "residual"],
              [[x["mechanism"], setting_label(x["mechanism"], x["setting"]), x["status"], int(x["units"]),
                "" if pd.isna(x["residual"]) else f"{x['residual']:,.0f}"] for _, x in st.iterrows()],
              numeric={3, 4})


def _errors_section(doc: Doc, util: pd.DataFrame, v) -> None:
    """The error of each published table of variant ``v``, and the block totals as an agency checks them."""
    u = util[util["variant"] == v]
    doc.h(3, "Error of each published table")
    doc.p("Mean absolute error per published cell, in persons, and the share of cells off by more than 10% of "
          "their true count (an empty cell is off as soon as anything but 0 is published there), per table and "
          "level over every unit's cells; \"all tables\" weighs every published cell the same (the table error "
          "of the verdict and the plot). The block and unit totals derived from the tables are shown below, "
          "not counted again.")
    nu = max(int(u["unit"].nunique()), 1) if "unit" in u else 1
    g = pd.concat([utility_summary(u, ("mechanism", "setting", "table", "level")),
                   utility_summary(u, ("mechanism", "setting")).assign(table="all tables", level="")])
    order = {k: i for i, k in enumerate(dict.fromkeys(zip(u["mechanism"], u["setting"])))}
    g = g.assign(_o=[order.get(k, 0) for k in zip(g["mechanism"], g["setting"])]).sort_values("_o", kind="stable")
    doc.table(["mechanism", "setting", "table", "level", "cells per unit", "mean abs. error per cell",
               "cells off > 10%"],
              [[x["mechanism"], setting_label(x["mechanism"], x["setting"]),
                f"**{x['table']}**" if x["table"] == "all tables" else x["table"], x["level"],
                f"{x['cells'] / nu:.0f}", f"{x['mae_per_cell']:.2f}", f"{100 * x['share_off_10pct']:.0f}%"]
               for _, x in g.iterrows()],
              numeric={4, 5, 6})
    if "share_off_5_persons" in u and u["share_off_5_persons"].notna().any():
        bt = u[u["table"] == "block totals"].groupby(["mechanism", "setting"], sort=False).agg(
            mae=("mae_per_cell", "mean"), off5=("share_off_5_persons", "mean")).reset_index()
        doc.p("Block totals as an agency checks them: mean absolute error of a block's total, and the share of "
              "blocks whose total is off by more than 5 persons.")
        doc.table(["mechanism", "setting", "block total: mean abs. error", "blocks off by > 5 persons"],
                  [[x["mechanism"], setting_label(x["mechanism"], x["setting"]), f"{x['mae']:.2f}",
                    f"{100 * x['off5']:.0f}%"] for _, x in bt.iterrows()], numeric={2, 3})


def _variant_section(doc: Doc, cfg, run_dir: Path, read: tuple, v, variants: list) -> None:
    """One variant (with or without BLOCK): who is reconstructed, the exact attack, the Bureau's measures, the
    verdicts, the attack's strength and the tables' errors (``read``: the persons summarised, the tables' errors and
    the decision)."""
    persons, util, decision = read
    _persons_section(doc, cfg, persons, v, variants)
    if (run_dir / "exact_attack.parquet").exists():
        _exact_status_section(doc, run_dir, v)
    bureau_section(doc, run_dir, cfg, v)
    agreement_section(doc, run_dir, cfg, v)
    doc.h(3, "Verdict")
    for m in decision.mechanisms:
        for vd in m.verdicts:
            if vd.variant == v:
                doc.p(vd.text + vd.strength)
    _release_strength_section(doc, release_strength(run_dir, v))
    _errors_section(doc, util, v)


#: the verdict's status in the decision table, a few words
DECISION_WORDS = {"safe": "shown safe up to", "none_safe": "not safe at any setting", "not_shown_safe":
                  "not shown safe", "cannot_decide": "cannot decide"}


def _limit_cell(status: str, x: dict) -> str:
    """The decision table's 'one-sided limit / tolerated' cell, in the verdict's measure: the limit the
    rule compares (upper for safe and not shown safe, lower for shown above the tolerance).

    >>> _limit_cell("safe", {"scale": "share", "excess_upper": -0.0152, "tolerance": 0.01})
    'upper -1.5% / 1%'
    >>> _limit_cell("none_safe", {"scale": "persons", "excess_lower": 3.0, "tolerance": 2.0})
    'lower +3.0 / 2.0'
    """
    share = x.get("scale", "persons") == "share"
    side, key = ("lower", "excess_lower") if status == "none_safe" else ("upper", "excess_upper")
    v, tol = float(x.get(key, math.nan)), float(x.get("tolerance", math.nan))  # float() reads the saved "inf" too
    v_s = ("+∞" if v > 0 else "−∞") if not np.isfinite(v) else f"{100 * v:+.1f}%" if share else f"{v:+.1f}"
    return f"{side} {v_s} / {100 * tol:g}%" if share else f"{side} {v_s} / {tol:.1f}"


def _decision_section(doc: Doc, cfg, decision, audits, variants: list, run_dir: Path) -> None:
    """The decision, first, rendered from the saved decision: its lines (what the terminal prints first),
    the audit's outcome in one line, the one picture (decision.png: persons beyond the best guess against ε,
    the tolerance and the limits); then per variant the verdicts with the one-sided limit the rule compares."""
    doc.h(2, "Decision")
    doc.ul([f"**{line}**" for line in decision.lines()])
    failed = [a for a in audits if a.outcome == "failed"]
    inconclusive = [a for a in audits if a.outcome == "inconclusive"]
    if failed:
        doc.p("Audit of the publishing code: **FAILED: do not publish with this code.** " + "; ".join(
            f"{a.mechanism} at ε = {a.declared_epsilon:g}: {a.checks_summary()}" for a in failed))
    if inconclusive:
        doc.p("Audit of the publishing code: **INCONCLUSIVE (not passed)** for " + "; ".join(
            f"{a.mechanism} at ε = {a.declared_epsilon:g} ({', '.join(a.unchecked())} could not run"
            + (f"; {a.details['runs_to_certify']:,} releases per neighbour would certify it"
               if a.details.get("runs_to_certify") else "") + ")" for a in inconclusive)
            + ": not shown to keep its ε, so not publishable on this audit's word.")
    if audits and not (failed or inconclusive):
        seed = audits[0].details.get("audit_seed")
        when = audits[0].details.get("recorded_by_audit_command")
        doc.p("Audit of the publishing code: **passed** for every audited mechanism and ε"
              + (f" (seed {seed}" if seed is not None else "")
              + (f"; run by `censusrecon audit` at {when} on the same code and config)" if when else
                 ")" if seed is not None else "") + "; details below.")
    elif not audits:
        doc.p("Audit of the publishing code: **not run**.")
    if (Path(run_dir) / "decision.png").exists():
        doc.img(Path(run_dir) / "decision.png", "persons reconstructed beyond the best guess, against ε")
    shares = cfg.release.tolerance.per_unit is None
    for v in variants:
        rows = [(m, vd) for m in decision.mechanisms for vd in m.verdicts if vd.variant == v]
        if not rows:
            continue
        units = max((int(vd.figures.get("units", 0)) for _, vd in rows if vd.figures), default=0)
        doc.p(f"{variant_label(v, variants).capitalize()}, {units} units"
              + (f" of the {decision.units_in_file} in the file" if decision.units_in_file else "")
              + f"; tolerance **{decision.tolerance}** reconstructed beyond the best guess without the release.")
        table = []
        for m, vd in rows:
            x = vd.figures
            where = setting_label(m.mechanism, float(x["setting"])) if x else ""
            table.append([m.mechanism, f"**{HEADS[m.action]}**", DECISION_WORDS[vd.status], where,
                          f"{int(x['persons'])} / {int(x['baseline_persons'])}" if x else "",
                          _limit_cell(vd.status, x) if x else "",
                          f"{vd.table_error:.2f}" if vd.table_error is not None else "", m.audit.split(":")[0],
                          fit_words(m.fit_for_publication, short=True), m.risks.split(":")[0]])
        doc.table(["mechanism", "decision", "verdict", "at", "persons: attack / guess",
                   f"one-sided {CONFIDENCE:.0%} limit / tolerated", "table error", "audit", "fit for publication",
                   "risks"], table, numeric={4, 5, 6})
        doc.p(f"A setting is safe when the upper one-sided {CONFIDENCE:.0%} limit of the excess (best attack minus "
              "best guess" + (", each unit's as a share of its own persons unique in D" if shares else ", per unit")
              + ") is below the tolerance, shown above it when the lower one-sided limit is above it; the settings "
              "are tested from the most protective, stopping at the first not shown safe.")
    items = []
    for m in decision.mechanisms:
        parts = [f"**{m.mechanism}: {HEADS[m.action]}**" + (f" at {m.where()}" if m.action == "publish" else "")
                 + (", because " + "; ".join(m.reasons) if m.reasons else "")]
        parts += [f"the rule{'' if len(m.verdicts) == 1 else f' ({variant_label(vd.variant, variants)})'}: "
                  + rule_words(vd.status, vd.figures or {}, vd.exact) for vd in m.verdicts]
        if m.risks.startswith("not measured"):
            parts.append(f"risks of published rows: {m.risks}")
        parts += [f"caveat: {c}" for c in m.caveats]
        if m.next_step:
            parts.append(f"next: {m.next_step}")
        items.append(". ".join(x.rstrip(".") for x in [parts[0], *(p[:1].upper() + p[1:] for p in parts[1:])]) + ".")
    doc.ul(items)


def _risk_section(doc: Doc, run_dir: Path, variants: list) -> None:
    """anonymeter's risks of every published microdata file, with their intervals (or why none)."""
    doc.h(2, "Risks of the published microdata (anonymeter)")
    note_path, path = run_dir / "risks.json", run_dir / "risks.parquet"
    note = json.loads(note_path.read_text()).get("note") if note_path.exists() else "not run"
    if not path.exists():
        doc.p(f"Singling out, linkability and attribute inference were not measured: {note}.")
        return
    risks = pd.read_parquet(path)
    doc.p("For every release that publishes rows (synthetic microdata, the swapped file, draws from a smoothed "
          "histogram), anonymeter (Giomi et al. 2023) attacks the published rows and measures the risk to the persons of "
          "D over a control set: D_holdout, persons of the same units whom no release saw. Risk is the attack's success "
          "on D beyond its success on the control set (0: nothing beyond what anyone learns about the population), "
          "with its 95% interval; *singling out* uses multivariate predicates on 3 columns, *linkability* joins two "
          "halves of the columns (geography and the first attributes, the rest) by their 10 nearest neighbours, "
          "*inference* guesses one attribute from all the others. † marks an attack no better than random guessing "
          "(anonymeter's own warning: that figure cannot be trusted). anonymeter draws its attacks without a "
          "fixed seed, so figures move between runs within their intervals. TopDown publishes tables here, not a "
          "microdata file, so it has no row here.")
    for v in variants:
        part = risks[risks["variant"] == v]
        if not len(part):
            continue
        kinds = list(dict.fromkeys(part["risk"]))
        rows = []
        for (mech, setting), g in part.groupby(["mechanism", "setting"], sort=False):
            cells = {}
            for _, x in g.iterrows():
                dagger = "" if x["trusted"] else " †"
                cells[x["risk"]] = f"{x['value']:.3f} [{x['ci_low']:.3f}, {x['ci_high']:.3f}]{dagger}"
                if x["risk"] == "singling_out" and pd.notna(x.get("queries")):
                    cells[x["risk"]] += f" ({int(x['queries'])} queries)"
            rows.append([mech, setting_label(mech, setting), *[cells.get(k, "") for k in kinds]])
        if len(variants) > 1:
            doc.p(f"{variant_label(v, variants)}:")
        doc.table(["mechanism", "setting", *[k.replace("_", " ").replace("inference:", "inference: ") for k in kinds]],
                  rows, numeric=set())


def audits_from_dicts(items: list[dict]) -> list:
    """AuditResults from their ``as_dict`` form (audit.json, a recorded audit)."""
    known = {"mechanism", "declared_epsilon", "epsilon_lower_bound", "runs", "confidence", "event", "checks"}
    return [AuditResult(a["mechanism"], a["declared_epsilon"], a["epsilon_lower_bound"], a["runs"], a["confidence"],
                        a["event"], a.get("checks", {}),
                        {k: v for k, v in a.items() if k not in known | {"passed", "outcome", "measured"}})
            for a in items]


def load_audits(run_dir: Path) -> list:
    """The audit results of a finished release evaluation (``audit.json``), as AuditResult."""
    return audits_from_dicts(json.loads((Path(run_dir) / "audit.json").read_text()))


def write_release_report_from_dir(run_dir: Path) -> Path:
    """Regenerate report.md/.html of a finished release run from its files."""
    import yaml

    run_dir = Path(run_dir)
    cfg = parse_config(yaml.safe_load((run_dir / "config.yaml").read_text()), str(run_dir / "config.yaml"))
    df = pd.read_parquet(run_dir / "release_eval.parquet")
    util = pd.read_parquet(run_dir / "utility.parquet")
    ledger = json.loads((run_dir / "ledger.json").read_text())
    audits = load_audits(run_dir)
    facts = json.loads((run_dir / "manifest.json").read_text()).get("facts", {})
    return write_report(cfg, run_dir, Evaluated(df, util, audits, ledger, facts), load_decision(run_dir))


