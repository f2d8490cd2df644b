"""What a release evaluation's report says of its releases' privacy: whether each is fit for publication and what each
ε protects, the audit of the publishing code (with the synthesizers' spending ledgers), and the ledger."""

from __future__ import annotations
from censusrecon.experiments.doc import Doc
from censusrecon.experiments.release.words import (fit_words)
from censusrecon.synth import registry
from censusrecon.synth.audit.measured import white_box_words


def publication_section(doc: Doc, cfg, entries: list) -> None:
    """Fit for publication, the totals and block list used, the declared invariants, and what each ε protects."""
    r = cfg.release
    doc.h(2, "Fit for publication?")
    doc.table(["mechanism", "fit for publication", "why"],
              [[m, fit_words(e.get("for_publication")), e.get("not_dp") or e.get("publication_note", "")]
               for m in r.evaluated for e in [next((x for x in entries if x["mechanism"] == m), None)] if e],
              numeric=set())
    n_note = next((x.get("total") or x.get("rows_are") for x in entries if x.get("total") or x.get("rows_are")), None)
    blocks = next((x.get("block_list") for x in entries if x.get("block_list")), None)
    doc.ul([f"The total n of each unit: {n_note or 'not used'}."]
           + ([f"The published block list: {blocks}."] if blocks else [])
           + [f"Declared invariants (published exactly): {', '.join(r.invariants) if r.invariants else 'none'}."])
    dp_mechs = r.dp_mechanisms
    rel_rows = [[m, e["neighbours"], e.get("published_exactly", "")] for m in dp_mechs
                for e in [next((x for x in entries if x["mechanism"] == m and x.get("neighbours")), None)] if e]
    level = cfg.target.level
    rel_rows += [[registry.PROGRAM_PREFIX + p.name, f"the persons of one {level}: one person "
                  + ("replaced within it" if r.relation == "replace_one" else "added or removed")
                  + " (the relation it is asked to protect; audited)", "what the program publishes exactly: not declared"]
                 for p in r.programs]
    if rel_rows:
        doc.p(f"What each ε protects (relation {r.relation}): the neighbouring datasets and what is published exactly.")
        doc.table(["mechanism", "neighbouring datasets", "published exactly"], rel_rows, numeric=set())
        if len({(x[1], x[2]) for x in rel_rows}) > 1:
            doc.p("**These mechanisms are not under the same relation**: the same ε protects a person within "
                  "different datasets (see the table), so their ε are not comparable one for one.")


def audit_section(doc: Doc, cfg, audits: list, facts: dict) -> None:
    """The audit of the publishing code: what it checks, earlier failures, the units and each result, the ledgers."""
    r = cfg.release
    doc.h(2, "Audit of the publishing code")
    if not audits:
        doc.p("No mechanism censusrecon runs was evaluated, so nothing was audited" + (
            ": a release file cannot be re-run on neighbouring data" if r.files else "") + ".")
    else:
        doc.p("Each mechanism is audited through the very calls that publish it, on every audited unit's own private "
              "data (TopDown on its production tree, every level and node) and neighbours of it under the declared "
              "relation (a person moved between blocks and areas, changed to the rarest and the commonest type, the worst "
              "type; added and removed under add/remove), at each audited ε; the audited ε is a "
              f"{confidence_words(audits[0].confidence)} Clopper–Pearson lower bound (events on single outputs and on a "
              "discriminant fitted on half the draws) and must not exceed the declared ε. Checks over whole releases: "
              "`noise_scale` (every node, table and band of true counts noised at least as much as the declared ε needs), "
              "`noise_shape` and `noise_tail` (discrete Laplace or Gaussian, not cut off), `noise_independence` (no noise "
              "shared across cells, nodes or releases), `accounting` (OpenDP's privacy maps agree with ours and stay "
              "within the budget); `post_processing` (recorded releases replayed for many neighbours publish the same), "
              "`structure`, `block_list`. The audit's seed is in `audit.json`.")
    for e in facts.get("earlier_audit_failures") or []:
        doc.p(f"**An earlier audit of this code failed** ({e['when']}, seed {e['seed']}): {'; '.join(e['failed'])}. "
              "A later audit under another seed does not replace it (`audit_history.jsonl`).")
    if audits:
        roles = audits[0].details.get("unit_roles") or {}
        if roles and set(roles.values()) - {"all", "given"}:
            doc.p("Units audited, chosen to cover the size range: " + ", ".join(f"{u} ({r})" for u, r in roles.items())
                  + ".")
        doc.p("Two lower bounds on what each mechanism spends. The black box is the best event telling the worst-case "
              "neighbours apart in the released outputs. It assumes nothing, so it is loose where a person moves many "
              "cells. The white box is what the noise the code really added spends: each measurement's noise scale "
              "bounded above from its own draws, its sensitivity over it, summed (for Gaussian noise a μ in Gaussian "
              "DP, beside the μ the declared (ε, δ) allows). It holds where the noise checks pass. The share is the "
              "larger bound over what is declared: below 50%, the audit could miss a mechanism spending twice it.")
        doc.table(["mechanism", "declared ε", "black box ε ≥", "white box ≥", "share of declared", "runs", "outcome",
                   "checks"],
                  [[a.mechanism, f"{a.declared_epsilon:g}",
                    f"{a.epsilon_lower_bound:.3f}" + ("" if a.epsilon_lower_bound <= a.declared_epsilon
                                                      else " **EXCEEDS**"),
                    white_box_words(a.measured["white_box"]), f"{a.measured['share']:.0%}",
                    a.runs, a.outcome if a.passed else f"**{a.outcome}**", a.checks_summary()] for a in audits],
                  numeric={1, 2, 4, 5})
    ledgers = spending_rows(audits)
    if ledgers:
        doc.p("**Synthesizers audited where their privacy is spent** (`spending`): every Gaussian measurement and every "
              "selection of real fits of each unit, recorded as the library makes them. ρ spent is the most any fit's "
              "recorded steps spent (by their own σ and ε), beside the ρ the synthesizer declares and what OpenDP's "
              "conversion allows for its (ε, δ); noise is Σ(noise/σ)² over cells (1 if the noise is as declared, "
              "smaller if it is not); best picks are the selections that chose a best-scored marginal, beside the "
              "exponential mechanism's expectation. The empirical ε lower bound is from whole releases and first "
              "measurements of neighbours (above): a lower bound, not a certificate; the ledger decides.")
        doc.table(["mechanism", "declared ε", "empirical ε lower bound", "ρ spent", "ρ declared", "ρ OpenDP allows",
                   "noise / declared", "best picks (expected)", "fits", "outcome"], ledgers, numeric={1, 2, 3, 4, 5, 6})


def ledger_section(doc: Doc, cfg, ledger, entries: list) -> None:
    """The ledger's releases and how the units released were chosen."""
    doc.h(2, "Ledger")
    doc.p(f"{len(entries)} releases recorded in `ledger.json` (relation, sensitivity, ε, scale, backend, where n and "
          "the block list come from). Every ε above is per release; releasing several of them about the same persons "
          "adds their ε (the ledger never adds ε across different relations).")
    chosen = ledger.get("unit_selection") if isinstance(ledger, dict) else None
    chosen = chosen or unit_selection(cfg)
    doc.p(f"Units released: {chosen['how']}." + (f" **Outside ε:** {chosen['note']}." if chosen["data_dependent"] else
                                                 " A public choice: no person decides which units are released."))


def spending_rows(audits: list) -> list[list]:
    """A row per synthesizer and ε audited by its spending ledger: its empirical ε lower bound beside the declared
    ε, and the ledger's figures over its units (the most ρ spent; noise and best picks pooled).

    >>> from censusrecon.synth.audit.statistics import AuditResult
    >>> unit = {"spending_rho_spent": 0.0035, "spending_rho_declared": 0.0036, "spending_rho_allowed_opendp": 0.0036,
    ...         "spending_noise_ss_over_cells": 1.02, "spending_noise_cells": 100, "spending_best_picked": 3,
    ...         "spending_best_expected": 2.5, "spending_fits": 3}
    >>> a = AuditResult("program:mst", 0.5, 0.0, 10, 0.99, "e", {"spending": "pass"}, {"per_unit": {"u": unit}})
    >>> spending_rows([a])
    [['program:mst', '0.5', '0.000', '0.0035', '0.0036', '0.0036', '1.020', '3 (2.5)', 3, 'passed']]
    """
    out = []
    for a in audits:
        units = [u for u in (a.details.get("per_unit") or {}).values() if "spending_rho_spent" in u]
        if not units:
            continue
        cells = sum(u["spending_noise_cells"] for u in units)
        noise = sum(u["spending_noise_ss_over_cells"] * u["spending_noise_cells"] for u in units) / max(cells, 1)
        out.append([a.mechanism, f"{a.declared_epsilon:g}", f"{a.epsilon_lower_bound:.3f}",
                    f"{max(u['spending_rho_spent'] for u in units):.4g}",
                    f"{max(u['spending_rho_declared'] for u in units):.4g}",
                    f"{max(u['spending_rho_allowed_opendp'] for u in units):.4g}", f"{noise:.3f}",
                    f"{sum(u['spending_best_picked'] for u in units)} "
                    f"({sum(u['spending_best_expected'] for u in units):.3g})",
                    sum(u["spending_fits"] for u in units), a.outcome if a.passed else f"**{a.outcome}**"])
    return out


def confidence_words(c: float) -> str:
    """A confidence level with the digits that tell it from 100% (99.96%, not 100%)."""
    return f"{100 * c:.6g}%" if c < 1 else "100%"


def unit_selection(cfg) -> dict:
    """How the released units were chosen, for the ledger and the report. Units named in the config
    are a public choice; units picked by their number of persons (``min_rows``, ``max_rows``, and
    the seeded pick among those) are a data-dependent choice that no ε accounts for: which units
    are released at all depends on the persons."""
    t = cfg.target
    if t.unit_ids is not None:
        return {"data_dependent": False, "how": f"named in the config: {', '.join(t.unit_ids)}"}
    size = f"at least {t.min_rows}" + (f" and at most {t.max_rows}" if t.max_rows is not None else "")
    return {"data_dependent": True,
            "how": f"{t.units} {t.level}(s) chosen {t.selection.replace('_', ' ')} among those with {size} persons",
            "note": "which units are released depends on their numbers of persons: a data-dependent choice outside "
                    "ε (name the units in target.unit_ids to release a public choice)"}
