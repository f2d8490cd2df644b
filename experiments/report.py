"""`censusrecon report`: a Markdown summary of a finished run, leading with who is reconstructed."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from censusrecon.experiments.config import ConfigError, parse_config
from censusrecon.reconstruct import attacks
from censusrecon.reconstruct.attacks import is_attack
from censusrecon.experiments.metrics import (CONFIDENCE, OUTSIDE_COLUMNS, SATURATION_SHARE, at_u, average_curves, band_kind,
                                 by_seed, difference_words, lift_by_baseline, persons_by_block_size,
                                 persons_reconstructed, saturation, strength_table, summarise_persons, variant_label)
from censusrecon.experiments.doc import Doc
from censusrecon.experiments.results import results_kind, time_words
from censusrecon.microdata.census import TABLE_SETS


def _pct(a: float, b: float, digits: int = 0) -> str:
    return f"{100 * a / b:.{digits}f}%" if b > 0 else "n/a"


def _share(x: float, n: float) -> str:
    """"x of n" as a percentage to one decimal, with the counts: "12.5% (1 of 8)"."""
    return f"{_pct(x, n, 1)} ({int(x)} of {int(n)})"


def _bureau_precision(method: str, attacker_file: str, group: str, ref: "BureauReference | None" = None) -> float | None:
    """The Bureau's precision for a method (any exact-attack method counts as its reconstruction),
    attacker file and group, in the experiment ``ref`` (default: all its tables); None where it published none.
    The guessers and the HDF read no reconstruction: theirs are the same in every experiment."""
    kind = attacks.kind_of(method)  # an attack's methods by its registered name; the Bureau's own by theirs
    if ref is not None and kind is not None and kind.reads_tables and (attacker_file, group) in ref.precision:
        return ref.precision[(attacker_file, group)]
    return BUREAU_REID.get((attacker_file, group), {}).get(kind.name if kind is not None else method)


def unguessable_sentence(df: pd.DataFrame, variant, around: str | None) -> list[str]:
    """One sentence per attack method: the share of its matches at k = u that occur nowhere
    outside the unit, against the same share for the best baseline of each unit."""
    if around is None or df[OUTSIDE_COLUMNS[0]].isna().all():
        return []
    top = at_u(df[df["variant"] == variant])
    per = persons_reconstructed(df[df["variant"] == variant])
    out = []
    for m in [m for m in dict.fromkeys(top["method"]) if is_attack(m)]:
        rows = top[top["method"] == m]
        best = per[per["method"] == m][["unit", "best_baseline"]]
        base = top.merge(best, left_on=["unit", "method"], right_on=["unit", "best_baseline"])
        names = ", ".join(f"{b} on {n}" for b, n in base["best_baseline"].value_counts().items())
        out.append(
            f"**{m}**: of its {int(rows['num_matched'].sum())} matches among the top u, "
            f"{int(rows[OUTSIDE_COLUMNS[0]].sum())} ({_pct(rows[OUTSIDE_COLUMNS[0]].sum(), rows['num_matched'].sum())}) "
            f"are rows no person outside the target unit in its {around} has — rows no prior built from outside the "
            f"unit could have guessed — against {int(base[OUTSIDE_COLUMNS[0]].sum())} of {int(base['num_matched'].sum())} "
            f"({_pct(base[OUTSIDE_COLUMNS[0]].sum(), base['num_matched'].sum())}) for the best baseline "
            f"of each unit ({names}).")
    return out


#: The Bureau's reidentification precision (HDSR 2025, Tables 5 and 6 Panel B): its reconstruction
#: (rHDF b,t), and its modal and proportional guessers, per attacker file and group.
BUREAU_REID = {("perfect", "all"): {"exact": 0.779, "modal": 0.766, "proportional": 0.663, "hdf": 0.853},
               ("commercial", "all"): {"exact": 0.412, "modal": 0.459, "proportional": 0.399, "hdf": 0.485},
               ("perfect", "vulnerable"): {"exact": 0.952, "modal": 0.025, "proportional": 0.202, "hdf": 0.956},
               ("commercial", "vulnerable"): {"exact": 0.954, "modal": 0.033, "proportional": 0.209, "hdf": 0.964}}

#: The Bureau's solution variability at block percentiles (HDSR Table 2: 0 through the 70th). Its 100th row
#: (21.1%) is left out: whether it is the largest block's or a summary of the top bucket is not said.
BUREAU_SOLVAR_PERCENTILES = {70: 0.0, 75: 1.7, 80: 4.7, 85: 7.3, 90: 10.5, 95: 14.6}


def solvar_percentiles(values, percentiles=tuple(BUREAU_SOLVAR_PERCENTILES)) -> dict[int, float]:
    """Block solution variability at block percentiles (nearest rank: the smallest value with at least
    p% of blocks at or below it), as HDSR Table 2 gives them.

    >>> solvar_percentiles([0, 0, 0, 0, 0, 0, 0, 10, 20, 50], (70, 80, 100))
    {70: 0.0, 80: 10.0, 100: 50.0}
    """
    v = np.sort(np.asarray(values, dtype=np.float64))
    return {p: float(v[max(0, int(np.ceil(p / 100 * len(v))) - 1)]) for p in percentiles} if len(v) else {}


#: The HDF (the swapped file the 2010 tables were computed from) against the CEF: agreement on exact and on
#: 38-bin age (SUPP Table 8), the effect of 2010's swapping.
BUREAU_HDF_AGREEMENT = (96.3, 96.4)


#: The Bureau's figures by block-size bin (SUPP Table 7: zero solution variability, % of blocks and of
#: persons; SUPP Table 8: agreement of rHDF b,t with the HDF on exact and on 38-bin age).
BUREAU_BY_SIZE = {
    "1-9": (99.5, 99.3, 43.3, 99.9), "10-49": (78.5, 71.6, 47.1, 98.8), "50-99": (32.6, 31.1, 47.1, 96.4),
    "100-249": (12.6, 11.4, 47.0, 94.0), "250-499": (2.9, 2.7, 48.9, 92.5), "500-999": (0.8, 0.7, 52.9, 91.6),
    "1000+": (1.1, 1.2, 63.1, 92.1)}


#: The Bureau's overall figures (SUPP Table 7 summed: 69.4% of blocks and 28.7% of persons in blocks of zero
#: solution variability; SUPP Table 8: agreement 48.5% and 95.2% against the HDF).
BUREAU_OVERALL = (69.4, 28.7, 48.5, 95.2)

_SF1 = TABLE_SETS["sf1"]  # the 34 SF1 person tables of the Bureau's experiment


@dataclass(frozen=True)
class BureauReference:
    """The Bureau's figures for one of its experiments, named by the SF1 tables it attacked: overall and per
    block-size bin, each (solvar 0 % of blocks, % of persons, agreement exact age, 38-bin age), None where it
    published none; its reconstruction's precision per (attacker file, group) where it differs from the full
    experiment's; and whether its solvar summaries (cumulative, percentiles) are published."""

    name: str
    tables: frozenset
    overall: tuple
    by_size: dict
    precision: dict
    solvar_summaries: bool


_NO_FIGURES = (None, None, None, None)
#: The Bureau's experiments: all 34 SF1 person tables (rHDF b,t); the block tables only (rHDF b: SUPP Table 8's
#: agreement, HDSR Table 5's precision); the 32 tables without P8 and P10 (HDSR p.10: solvar 0 for 65% of blocks).
BUREAU_EXPERIMENTS = (
    BureauReference("all 34 SF1 person tables (the Bureau's rHDF b,t)", frozenset(_SF1), BUREAU_OVERALL, BUREAU_BY_SIZE,
                    {}, True),
    BureauReference("the block tables only, without PCT12 (the Bureau's rHDF b)",
                    frozenset(t for t in _SF1 if not t.startswith("PCT")), (None, None, 44.2, 92.9),
                    {b: (None, None, None, v) for b, v in zip(BUREAU_BY_SIZE, (99.8, 97.8, 94.4, 91.4, 89.3, 87.5, 86.7))},
                    {("perfect", "all"): 0.759, ("commercial", "all"): 0.406, ("perfect", "vulnerable"): None,
                     ("commercial", "vulnerable"): None}, False),
    BureauReference("32 tables, without P8 and P10 (HDSR p.10)", frozenset(_SF1) - {"P8", "P10"}, (65.0, None, None, None),
                    {}, {key: None for key in BUREAU_REID}, False),
)


def _size_difference(r) -> str:
    """'+12.3 (95% interval +4.1 to +20.5)', or the mean alone where one unit leaves no spread."""
    if pd.isna(r["difference_mean"]):
        return ""
    if not np.isfinite(r["ci_low"]):
        return f"{r['difference_mean']:+.1f} (one unit: no interval)"
    return f"{r['difference_mean']:+.1f} ({CONFIDENCE:.0%} interval {r['ci_low']:+.1f} to {r['ci_high']:+.1f})"


def bureau_reference(cfg) -> BureauReference | None:
    """The Bureau experiment whose SF1 tables the config's tables workload attacks (``tables: sf1``, or a list of
    SF1 names); None when they are none of the Bureau's (its figures would not be comparable)."""
    tables = [q.tables for q in cfg.queries if q.is_tables]
    if len(tables) != 1 or tables[0] == "reference":
        return None
    t = tables[0]
    if isinstance(t, list) and not all(isinstance(x, str) for x in t):  # declared tables: not the Bureau's
        return None
    names = frozenset(TABLE_SETS[t] if isinstance(t, str) else t)
    return next((e for e in BUREAU_EXPERIMENTS if e.tables == names), None)

#: The Bureau's solution variability on each key (:data:`experiments.exact_eval.SOLVAR_KEYS`): its rows' words
#: (solvar 0, % of blocks; % of persons; the records that can differ, at most). Its text keys solvar on the
#: 38 age bins (SUPP Table 7 is compared with it), its released code on P12's 23 age groups.
SOLVAR_ROWS = (("solvar", ("zero solution variability (solvar 0), % of blocks",
                           "zero solution variability (solvar 0), % of persons",
                           "records that can differ, at most (cumulative solvar)")),
               ("solvar_p12", ("solvar 0 keyed on P12's 23 age groups (the released code's key), % of blocks",
                               "solvar 0 keyed on P12's 23 age groups, % of persons",
                               "cumulative solvar keyed on P12's 23 age groups")))

_BY_SIZE_KEYS = ("blocks", "blocks_zero_variability", "persons", "persons_zero_variability", "agree_exact_age_persons",
                 "agree_binned_age_persons",
                 *[k.format(key) for key, _ in SOLVAR_ROWS
                   for k in ("blocks_{}", "blocks_{}_zero", "persons_{}", "persons_{}_zero", "{}_records")])


def pooled_by_size(units: list[dict]) -> dict[str, dict]:
    """The exact attack's per-bin counts (:func:`experiments.exact_eval.by_block_size`) summed over
    units and workloads, in the Bureau's bin order, with an ``all`` entry; empty when no unit has
    the breakdown."""
    acc: dict = {}
    for u in units:
        for f in u.get("exact", {}).values():
            for r in f.get("by_block_size", []):
                a = acc.setdefault(r["size"], dict.fromkeys(_BY_SIZE_KEYS, 0))
                for k in a:
                    a[k] += r.get(k, 0)
    if not acc:
        return {}
    out = {label: acc[label] for label in BUREAU_BY_SIZE if label in acc}
    out["all"] = {k: sum(a[k] for a in out.values()) for k in _BY_SIZE_KEYS}
    return out


def _fig(x) -> str:
    return "—" if x is None else f"{x}%"


def bureau_table(units: list[dict], reid: pd.DataFrame | None,
                 ref: BureauReference | None = BUREAU_EXPERIMENTS[0]) -> tuple[list, list] | None:
    """One table, ours beside the Bureau's 2010 figures of the experiment ``ref`` (:func:`bureau_reference`; None:
    tables of none of its experiments, so no figure of its beside ours): zero solution variability (% of blocks
    and of persons) and agreement (exact and 38-bin age) by the Bureau's block-size bins and overall, all units
    pooled; then the exact attack's reidentification precision (confirmed of putative) per attacker file,
    overall and for the vulnerable group, with the modal and proportional guessers'. "—" where the Bureau
    published no figure for that experiment. None when there is nothing to compare."""
    pooled = pooled_by_size(units)
    rows = []
    for label, a in pooled.items():
        fig = (ref.overall if label == "all" else ref.by_size.get(label, _NO_FIGURES)) if ref else _NO_FIGURES
        where = f"blocks of {label} persons" if label != "all" else "all blocks"
        n, solvar = a["persons"], bool(a["blocks_solvar"])
        cumulative = "10.0%" if label == "all" and ref is not None and ref.solvar_summaries else "—"
        for key, words in SOLVAR_ROWS:  # the Bureau's measure on its text's key, then its released code's
            if a[f"blocks_{key}"]:
                rows += [[words[0], where, _share(a[f"blocks_{key}_zero"], a[f"blocks_{key}"]), _fig(fig[0])],
                         [words[1], where, _share(a[f"persons_{key}_zero"], a[f"persons_{key}"]), _fig(fig[1])],
                         [words[2], where, _pct(a[f"{key}_records"], a[f"persons_{key}"], 1), cumulative]]
        # ours: zero variability on all the tables (compared with Table 7 only where solvar was not measured)
        zv = "zero variability on all the tables" if solvar else "zero variability"
        rows += [[f"{zv}, % of blocks", where, _share(a["blocks_zero_variability"], a["blocks"]),
                  "—" if solvar else _fig(fig[0])],
                 [f"{zv}, % of persons", where, _share(a["persons_zero_variability"], n),
                  "—" if solvar else _fig(fig[1])],
                 ["agreement, exact age", where, _pct(a["agree_exact_age_persons"], n, 1), _fig(fig[2])],
                 ["agreement, 38-bin age", where, _pct(a["agree_binned_age_persons"], n, 1), _fig(fig[3])]]
    values = [v for u in units for f in u.get("exact", {}).values() for v in f.get("solvar_by_block", [])]
    for p, v in solvar_percentiles(values).items():  # HDSR Table 2: block solvar by block percentile
        rows.append([f"solvar at the {p}th block percentile", "all blocks", f"{v:.1f}%",
                     _fig(BUREAU_SOLVAR_PERCENTILES[p]) if ref is not None and ref.solvar_summaries else "—"])
    hdf = [(u.get("rows", 0), a) for u in units for a in u.get("agreement", []) if a.get("method") == "hdf"]
    if hdf:  # the tables were tabulated from a swapped file: its own agreement with D, as the Bureau's HDF vs CEF
        n = sum(w for w, _ in hdf)
        for key, label, fig in (("agree_exact_age", "exact age", BUREAU_HDF_AGREEMENT[0]),
                                ("agree_binned_age", "38-bin age", BUREAU_HDF_AGREEMENT[1])):
            rows.append([f"agreement of the swapped file with D (HDF vs CEF), {label}", "all blocks",
                         _pct(sum(w * a[key] for w, a in hdf), n, 1), _fig(fig if ref is not None else None)])
    if reid is not None and len(reid):
        g = reid.groupby(["method", "attacker_file", "group"], sort=False)[["putative", "confirmed"]].sum()
        for (m, f, grp), x in g.iterrows():
            if _bureau_precision(m, f, grp) is None:  # RAP-Rank and the baselines: no Bureau counterpart (reid table)
                continue
            theirs = _bureau_precision(m, f, grp, ref) if ref is not None else None
            who = "the vulnerable group" if grp == "vulnerable" else "all persons"
            rows.append([f"reidentification precision, {f} attacker file", f"{m}, {who}",
                         _share(x["confirmed"], x["putative"]), "—" if theirs is None else f"{100 * theirs:.1f}%"])
    if not rows:
        return None
    return ["measure", "where", "ours", "the Bureau's (2010)"], rows


def reid_table(reid: pd.DataFrame) -> tuple[list, list]:
    """Putative, confirmed and precision per method, attacker file and group (all units summed), with
    the Bureau's precision for the same method, file and group beside it."""
    g = reid.groupby(["method", "attacker_file", "group"], sort=False)[["attacker_records", "putative",
                                                                         "confirmed"]].sum()
    rows = []
    for (m, f, grp), x in g.iterrows():
        ref = _bureau_precision(m, f, grp)
        rows.append([m, f, grp, int(x["attacker_records"]), int(x["putative"]), int(x["confirmed"]),
                     _pct(x["confirmed"], x["putative"], 1), "" if ref is None else f"{100 * ref:.1f}%"])
    return (["method", "attacker file", "group", "attacker records", "putative", "confirmed", "precision",
             "the Bureau's precision"], rows)


def write_run_report(run_dir: str | Path) -> Path:
    """report.md and report.html (self-contained) of a finished run directory; a release run
    directory (evaluate-release) gets the release report."""
    run_dir = Path(run_dir)
    kind = results_kind(run_dir)
    if kind == "release":
        from censusrecon.experiments.release.release_report import write_release_report_from_dir

        return write_release_report_from_dir(run_dir)
    if kind == "sweep":
        return write_sweep_report(run_dir)
    cfg = parse_config(yaml.safe_load((run_dir / "config.yaml").read_text()), str(run_dir / "config.yaml"))
    manifest = json.loads((run_dir / "manifest.json").read_text())
    df = pd.read_parquet(run_dir / "match_rate.parquet")
    units = manifest["units"]
    variants = list(dict.fromkeys(df["variant"].tolist()))
    doc = Doc().h(1, cfg.name)
    doc.p(f"Config hash `{manifest['config_hash']}`, code `{manifest.get('code_fingerprint', '?')}`, "
          f"JAX {manifest['versions'].get('jax')} on {manifest['jax']['backend']}; {time_words(manifest)}.")
    _who_section(doc, df, variants, manifest.get("rarity_level"))  # the answer first: who is reconstructed
    exact = attacks.attack(attacks.EXACT_ATTACK)
    if any(exact.facts[0] in u for u in units):
        _exact_section(doc, run_dir, units, bureau_reference(cfg))
    _what_ran_section(doc, cfg, units)
    _curves_section(doc, df, variants)
    _strength_section(doc, run_dir)
    kind = band_kind(df["unit"].nunique())
    doc.p(f"Bands in the plots: {'± one standard error' if kind == 'sem' else 'a 95% bootstrap band'} across "
          "units (standard errors below 20 units, bootstrap from 20).")
    doc.img(run_dir / "match_rate.png", "match rate")
    if (run_dir / "metrics.png").exists():
        doc.img(run_dir / "metrics.png", "who is matched, persons reconstructed, lift, calibration")
    md, _ = doc.write(run_dir, "report", cfg.name)
    return md


def _who_section(doc: Doc, df: pd.DataFrame, variants: list, around: str | None) -> None:
    """Who is reconstructed, per variant: against the best baselines, by matches outside the unit (in ``around``,
    the level rarity is measured in) and by block size."""
    summary = summarise_persons(persons_reconstructed(df))
    by_size = persons_by_block_size(df)
    doc.h(2, "Who is reconstructed")
    doc.p("A person is *reconstructed* when their exact row is unique in D (no one else in D shares it) and the "
          "method ranks it among its top u candidates. The best baseline of a unit is the baseline that finds the "
          f"most such persons there; the difference is per unit: the mean across units with its {CONFIDENCE:.0%} "
          "Student t interval, the interval the terminal prints; with it, the difference as a share of each unit's "
          "persons unique in D (the mean over units, with its interval), the measure of a release verdict's default "
          "tolerance.")
    for v in variants:
        s = summary[summary["variant"] == v]
        doc.h(3, variant_label(v, variants))
        doc.table(["method", "persons reconstructed", "by the best baselines", "difference per unit", "units",
                   "persons in D"],
                  [[r["method"], int(r["persons"]), int(r["baseline_persons"]),
                    difference_words(r), int(r["units"]), int(r["persons_in_d"])]
                   for _, r in s.iterrows()])
        doc.ul(unguessable_sentence(df, v, around))
        if around is not None and not df[OUTSIDE_COLUMNS[0]].isna().all():
            top = at_u(df[df["variant"] == v]).groupby("method", sort=False)[
                ["num_matched", *OUTSIDE_COLUMNS, "num_matched_unique", "k"]].sum()
            doc.p(f"Matches at k = u (all units), by how many persons outside the target unit in its {around} share "
                  "the row's person attributes, and by uniqueness in D:")
            doc.table(["method", "top-u slots", "matched", "0 outside", "1–2", "3–9", "≥ 10", "unique in D"],
                      [[m, int(r["k"]), int(r["num_matched"])] + [int(r[c]) for c in [*OUTSIDE_COLUMNS,
                                                                                   "num_matched_unique"]]
                       for m, r in top.iterrows()])
        if by_size is not None and (by_size["variant"] == v).any():
            b = by_size[by_size["variant"] == v]
            doc.p("Persons unique in D reconstructed by the size of their block in D (the Census Bureau's classes), "
                  "all units, against the unit's best baseline; the difference per unit over the units that have "
                  f"blocks of the class, with its {CONFIDENCE:.0%} Student t interval:")
            doc.table(["method", "block size", "units", "unique in D", "reconstructed", "by the best baselines",
                       "difference per unit"],
                      [[r["method"], r["block_size"], int(r["units"]), int(r["unique_in_D"]),
                        int(r["persons_reconstructed"]), int(r["baseline_persons"]), _size_difference(r)]
                       for _, r in b.iterrows()], numeric={2, 3, 4, 5})


def _what_ran_section(doc: Doc, cfg, units: list) -> None:
    """The data, the queries and the methods, generated from the config and the units' facts."""
    doc.h(2, "Data")
    doc.p(f"Source: {cfg.data.source}{' (' + cfg.data.path + ')' if cfg.data.path else ''}; "
          f"{len({u['unit'] for u in units})} {cfg.target.level} units; attributes "
          f"{', '.join(next(iter(units))['domain'])}. "
          + ("The attack sees the published statistics of D, every person of each unit (whole units, as the "
             "Census Bureau tabulated whole blocks; no holdout: the baselines are priors from outside the unit)."
             if cfg.target.whole_units else
             "The attack sees the published statistics of D, a random half of each unit; the other half, "
             "D_holdout, is the holdout baseline's prior (persons of the same unit)."))
    doc.table(["unit", "BLOCK", "rows of D", "u", "distinct/total", "entropy (bits)", "queries"],
              [[u["unit"], "yes" if u["with_block"] else "no", u["rows"], u["u"],
                f"{u.get('concentration', {}).get('distinct_over_total', float('nan')):.2f}",
                f"{u.get('concentration', {}).get('entropy_bits', float('nan')):.1f}",
                ", ".join(str(w["num_queries"]) for w in u["workloads"].values())] for u in units], numeric={2, 3, 4, 5})
    doc.h(2, "Queries and methods")
    a = cfg.attack
    draws = {None: "one row per relaxed row", "n": "|D| rows"}.get(a.draws_per_run, f"{a.draws_per_run} rows")
    doc.ul([f"workload `{q.label}`: {q.describe()}" for q in cfg.queries]
           + [f"attack: RAP-Rank, K = {a.runs}, T = {a.steps}, n' = {a.rows}, init {', '.join(a.init)} "
              f"({a.init_mode}), {draws} drawn per run",
              f"baselines (never see the statistics): {', '.join(cfg.baselines.methods)}"
              + ("; geographic pools include the target unit (as the paper's did)" if cfg.baselines.include_target
                 else "; geographic pools exclude the target unit")])


def _curves_section(doc: Doc, df: pd.DataFrame, variants: list) -> None:
    """Match rate at k/u = 0.1, 0.5 and 1, and the lift over each baseline, per variant."""
    curves = average_curves(df, 10, by=["variant", "method"])
    lift = lift_by_baseline(df)
    for v in variants:
        n_units = df.loc[df["variant"] == v, "unit"].nunique()
        pick = curves[(curves["variant"] == v) & curves["k_over_u"].round(2).isin([0.1, 0.5, 1.0])]
        table = pick.pivot_table(index="method", columns="k_over_u", values="match_rate", sort=False)
        spread = pick.pivot_table(index="method", columns="k_over_u", values="sem", sort=False)
        sub = df[df["variant"] == v]
        ends = {m: int((g.groupby("unit")["union_size"].first() < g.groupby("unit")["u"].first()).sum())
                for m, g in sub.groupby("method", sort=False)}
        doc.h(2, f"Match rate, {variant_label(v, variants)} (mean ± s.e. over {n_units} units)")
        doc.p("Match rate at k = matched among the top k / k; a method whose list ends before k stops matching.")
        doc.table(["method", "k/u = 0.1", "0.5", "1.0", "units whose list ends before u"],
                  [[m] + [f"{x:.3f} ± {e:.3f}" for x, e in zip(row.to_numpy(), spread.loc[m].to_numpy())]
                   + [ends.get(m, 0)] for m, row in table.iterrows()])
        lv = lift[lift["variant"] == v].groupby(["method", "baseline"], sort=False)["lift"].agg(["mean", "std", "count"])
        doc.p(f"Lift over each baseline, {variant_label(v, variants)}: area between the curves over k/u in (0, 1], "
              "mean ± s.e. over units.")
        doc.table(["method", "baseline", "lift"],
                  [[m, b, f"{r['mean']:+.3f} ± {0.0 if pd.isna(r['std']) else r['std'] / np.sqrt(r['count']):.3f}"]
                   for (m, b), r in lv.iterrows()], numeric={2})


def _strength_section(doc: Doc, run_dir: Path) -> None:
    """Persons reconstructed by the first k of the K runs (a prefix of the runs is the attack with
    K = k), and whether the attack had saturated."""
    path = run_dir / "strength.parquet"
    if not path.exists():
        return
    table = saturation(pd.read_parquet(path), ["variant", "method"])
    if table.empty:
        return
    doc.h(2, "Attack strength")
    doc.p("Persons reconstructed (unique in D, among the top u), summed over units, by RAP-Rank on its first k "
          "runs: run k is the same whatever K is, so each column is the attack with K = k. The attack has "
          f"saturated when the last doubling of K adds at most {SATURATION_SHARE:.0%} of the persons (and at most "
          "one per unit); otherwise a stronger attack would likely reconstruct more, and every comparison with a "
          "baseline understates the risk.")
    headers, rows, numeric = strength_table(table, [("variant", lambda r: variant_label(r["variant"])),
                                                    ("method", lambda r: r["method"])])
    doc.table(headers, rows, numeric=numeric)


def bureau_section(doc: Doc, units: list[dict], reid: pd.DataFrame | None, run_dir: Path | None = None,
                   ref: BureauReference | None = BUREAU_EXPERIMENTS[0]) -> None:
    """The paragraph and the one table of ours beside the Bureau's experiment ``ref`` (:func:`bureau_table`), and,
    with ``run_dir``, its plot by block size (``bureau.png`` there)."""
    table = bureau_table(units, reid, ref)
    if table is None:
        return
    pooled = pooled_by_size(units)
    if run_dir is not None and len(pooled) > 1:
        from censusrecon.experiments.plots import plot_bureau

        plot_bureau(pooled, {b: ref.by_size.get(b, _NO_FIGURES) if ref else _NO_FIGURES for b in BUREAU_BY_SIZE},
                    run_dir / "bureau", "the exact attack beside the Census Bureau's 2010 figures")
        doc.img(run_dir / "bureau.png", "the exact attack beside the Bureau's figures, by block size")
    doc.p(f"The Bureau's experiment with the same tables: {ref.name}; where it published no figure, its column reads "
          "—." if ref is not None else "These tables are none of the Bureau's experiments (all 34 SF1 person tables, "
          "the block tables only, or the 32 without P8 and P10): no figure of the Bureau's is put beside them.")
    doc.p("Beside the Census Bureau's 2010 figures, in one table. By the Bureau's block-size bins (a block's size: "
          "its persons in D, the population the tables count), all units pooled. *Solution variability* is the "
          "Bureau's (supplement, Eqs. 4.6 and 4.10): the share of a block's records that can differ from the "
          "reconstruction, on the 38 age bins, maximised by an integer program over the block's own tables with the "
          "tract's tables as upper bounds on the block alone (a relaxation, so an upper bound); blocks with solvar 0 as "
          "% of blocks and of persons are SUPP Table 7's figures, and the persons-weighted mean is its cumulative "
          "solvar (HDSR Table 2: 10.0%). The supplement's text keys solvar on the 38 age bins; the Bureau's released "
          "code (recon_replication, solution_variability/config.ini: useImpreciseAgeBuckets = Yes) keys it on the start "
          "age of P12's 23 groups, which merges the single years under 22 that the 38 bins keep apart: both are given, "
          "each beside the one published figure, which cannot say which it is. *Zero variability on all the tables* is ours: every dataset consistent with "
          "all of the tract's tables has the block's counts (certified on the full tables; a block left undecided by "
          "the time limit counts as not zero); it holds for every solvar-0 block and more. Agreement is the exact "
          "attack's with D (SUPP Table 8: the reconstruction against the HDF, the file the tables were computed "
          "from). Then reidentification precision, confirmed of putative (HDSR Tables 5 and 6 Panel B), for the exact "
          "attack and the modal and proportional guessers; the vulnerable group's blocks are those of solvar 0, as "
          "the Bureau's.")
    swaps = [f["tables_from"] for u in units for f in u.get("exact", {}).values() if "tables_from" in f]
    if swaps:
        moved, n = sum(f["records_swapped"] for f in swaps), sum(u.get("rows", 0) for u in units)
        doc.p(f"As the Bureau's, the tables attacked were tabulated from a swapped file (its HDF): "
              f"{_pct(moved, n, 1)} of the persons ({moved:,} of {n:,}) exchanged blocks with a person of the same sex "
              "and P12 age group (attack.exact_swap_rate; 2010's rate is not public, so the swapped file's agreement "
              "with D is given beside the Bureau's HDF vs CEF). Agreement by block size is the reconstruction's "
              "against the swapped file, as SUPP Table 8's; reidentification is confirmed against D, as the Bureau "
              "confirmed against the CEF; the hdf rows are the swapped file itself used as the attacker's "
              "reconstruction.")
    else:
        doc.p("The tables attacked were D's own (not swapped): the Bureau's were tabulated from its swapped HDF, and "
              "its agreement measured against it (attack.exact_swap_rate gives the like-for-like comparison).")
    doc.table(*table, numeric={2, 3})


def _exact_section(doc: Doc, run_dir: Path, units: list[dict], ref: BureauReference | None) -> None:
    """The exact attack: solve and certificates per unit, RAP-Rank's rows certified, the Bureau's
    agreement measure, and the reidentification simulation, beside the Bureau's experiment ``ref``."""
    doc.h(2, "Exact reconstruction by integer programming")
    doc.p("The published tables, as the Census Bureau's 2010 experiment used them, in count form: one non-negative "
          "integer per (block, person type) that no published zero rules out, one equality per published cell, "
          "solved by HiGHS. A row is *certified* when every dataset consistent with the tables contains it (an "
          "integer program with that row's count below its value, or at 0, is infeasible); a block is exact "
          "(zero solution variability) when its whole solution is certified and its total fixed. As the Bureau "
          "measures it, zero variability is on its 38 age bins (single years 0-21, then P12's groups): a block "
          "qualifies when its total is fixed and every consistent dataset has its counts on {sex, 38-bin age, race, "
          "ethnicity}; it is decided before the single-year certificates, which take what time is left.")
    rows, proven = _exact_rows(units)
    doc.table(["unit", "tables", "status", "variables (left of all)", "zero-variability blocks (38-bin age)",
               "persons in them", "zero-variability blocks (single-year age)", "certified", "persons solved",
               "solve s", "certify s"], rows, numeric={5, 8, 9, 10})
    reid_path = run_dir / "reid.parquet"
    bureau_section(doc, units, pd.read_parquet(reid_path) if reid_path.exists() else None, run_dir, ref)
    if proven:
        doc.p("Generate-then-Verify on RAP-Rank's own rows: how many of its top u are provable (in every consistent "
              "dataset), and how many provable rows it ranks below u.")
        doc.table(["unit", "method", "top u", "provable among them", "provable rows in all", "provable, ranked below u"],
                  proven)
    agree_path, reid_path = run_dir / "agreement.parquet", run_dir / "reid.parquet"
    if agree_path.exists():
        a = pd.read_parquet(agree_path).groupby("method", sort=False)[["agree_exact_age", "agree_binned_age"]].mean()
        doc.p("The Bureau's agreement measure: reconstructed persons matched one-to-one to D's within each block, on "
              "exact age, then the leftovers on the Bureau's 38 age bins (share of D's persons, mean over units; RAP-Rank and "
              "the best baseline contribute their top |D| rows). The Bureau reports 48.5% (exact age) and 95.2% "
              "(38-bin) against the HDF, the file its tables were computed from (SUPP Table 8; 46.6% and 91.9% "
              "against the CEF, before swapping), from the 2010 tables.")
        doc.table(["method", "agree, exact age", "agree, exact or binned age"],
                  [[m, f"{100 * r['agree_exact_age']:.1f}%", f"{100 * r['agree_binned_age']:.1f}%"]
                   for m, r in a.iterrows()])
    if reid_path.exists():
        doc.p("Reidentification, as the Bureau ran it: an attacker file of named records (block, sex, age) linked one "
              "to one, without replacement and in random order, to each reconstructed file within each block on sex "
              "and age, then the records left on sex and the 38 age bins; the linked record's race and ethnicity "
              "make a putative reidentification, confirmed (as the Bureau's code confirms every link: on exact age, "
              "failing that on the bin) when the named person's own block, sex, 38-bin age, race and ethnicity are the "
              "record's. Two attacker files: perfect (every person of D, right) and "
              "commercial-like (about 37% of records right, as the Bureau's commercial file; missing persons, wrong "
              "blocks, sex and age errors and records of nobody otherwise). The vulnerable group: persons whose race "
              "and ethnicity is not their block's mode (the Bureau's rule: a block whose top count is 1 or tied takes the unit's mode, failing that non-Hispanic White alone), unique on {block, sex, "
              "38-bin age}, in a block whose reconstruction has zero solution variability; an attacker file's "
              "records of it are those naming such a person in their own block (the Bureau's universe, HDSR Table 6's "
              "notes). The Bureau's figures (HDSR "
              "Tables 5-6, the 2010 population, its attack's reconstruction) are beside ours; its guessers are the "
              "modal and proportional rows.")
        doc.table(*reid_table(pd.read_parquet(reid_path)), numeric={3, 4, 5, 6})


def _exact_rows(units: list[dict]) -> tuple[list, list]:
    """Per unit and workload the exact attack's solve and certificates, and RAP-Rank's rows certified."""
    rows, proven = [], []
    for u in units:
        for label, f in u.get("exact", {}).items():
            if f["status"] != "solved":
                rows.append([u["unit"], label, f["status"], f["variables"], "", "", "", "", "", f"{f['seconds_solve']:.1f}",
                             ""])
                continue
            if "coarse_blocks" in f:
                und = f.get("coarse_blocks_undecided", 0)
                zv38 = (f"{f['coarse_blocks_zero_variability']} of {f['coarse_blocks']}"
                        + (f" ({und} undecided at the time limit)" if und else ""))
                if "solvar_blocks" in f:
                    zv38 += (f"; solvar 0: {f['solvar_blocks_zero']} of {f['solvar_blocks']}, cumulative solvar "
                             f"{f['cumsolvar']:.1f}%" + ("" if f.get("solvar_complete") else " (cut by the time limit)"))
            else:
                zv38 = "not measured"
            rows.append([u["unit"], label, "solved" + ("" if f.get("certification_complete") else
                                                      " (certification cut by the time limit)"),
                         f"{f['variables']} of {f['variables_before_zeros']}",
                         zv38, f.get("coarse_persons_in_zero_variability_blocks", ""),
                         (f"{f.get('blocks_zero_variability', 0)} of {f.get('blocks_solved', 0)}"
                          if f.get("certification_complete") else "not known (certification cut)"),
                         f"{f.get('certified_rows', 0)} rows, {f.get('certified_persons', 0)} persons",
                         f["persons"], f"{f['seconds_solve']:.2f}",
                         f"{f.get('seconds_coarse', 0) + f['seconds_certify']:.1f}"])
            for name, c in f.get("rap_rank_certified", {}).items():
                complete = c.get("top_u_certification_complete", True)
                proven.append([u["unit"], name, c["top_u"],
                               f"{c['top_u_certified']}" + ("" if complete else
                                                            f" (at least: {c.get('top_u_undecided')} undecided at the "
                                                            "time limit)"),
                               c["certified_rows"], c["certified_rows_ranked_below_u"]])
    return rows, proven


def write_sweep_report(run_dir: str | Path) -> Path:
    """sweep_report.md and .html of a finished sweep: its tasks, the match rate per method over
    every (unit, seed), and, with exact tasks, every unit's exact attack pooled beside the Bureau's
    figures, with the time per unit."""
    run_dir = Path(run_dir)
    cfg = parse_config(yaml.safe_load((run_dir / "config.yaml").read_text()), str(run_dir / "config.yaml"))
    summary = json.loads((run_dir / "sweep.json").read_text())
    df = pd.read_parquet(run_dir / "sweep_match_rate.parquet")
    doc = Doc().h(1, f"{cfg.name}: sweep")
    doc.p(f"{summary['tasks_total']} tasks ({cfg.target.level} × method × seed; {df['unit'].nunique()} "
          f"{cfg.target.level}s, seeds {', '.join(map(str, sorted(df['seed'].unique())))}), "
          f"{summary['tasks_run']} computed by the last call, {summary['tasks_skipped']} found finished; "
          f"{summary['seconds']:.0f} s for that call.")
    curves = average_curves(by_seed(df), 10, by=["variant", "method"])
    pick = curves[curves["k_over_u"].round(2).isin([0.1, 0.5, 1.0])]
    table = pick.pivot_table(index=["variant", "method"], columns="k_over_u", values="match_rate", sort=False)
    persons = pd.read_parquet(run_dir / "persons.parquet") if (run_dir / "persons.parquet").exists() else None
    if persons is not None and len(persons):
        summary_p = summarise_persons(persons)
        doc.h(2, "Who is reconstructed (every unit and seed)")
        doc.p("Persons whose exact row is unique in D and among the method's top u candidates, against the best "
              "baseline of each unit (the one that finds the most); the difference per unit is the mean across "
              f"(unit, seed) pairs with its {CONFIDENCE:.0%} Student t interval.")
        doc.table(["BLOCK", "method", "persons reconstructed", "by the best baselines", "difference per unit",
                   "units", "persons in D"],
                  [["yes" if r["variant"] else "no", r["method"], int(r["persons"]), int(r["baseline_persons"]),
                    difference_words(r), int(r["units"]), int(r["persons_in_d"])] for _, r in summary_p.iterrows()])
    doc.h(2, "Match rate (mean over every unit and seed)")
    doc.table(["BLOCK", "method", "k/u = 0.1", "0.5", "1.0"],
              [["yes" if v else "no", m] + [f"{x:.3f}" for x in row.to_numpy()] for (v, m), row in table.iterrows()])
    if (run_dir / "match_rate.png").exists():
        doc.img(run_dir / "match_rate.png", "match rate")
    _strength_section(doc, run_dir)
    seconds = summary.get("task_seconds", {})
    rap = {k: v for k, v in seconds.items() if "_rap_rank" in k}
    if rap:
        doc.p(f"RAP-Rank tasks: {len(rap)}, median {np.median(list(rap.values())) / 60:.1f} min each (K = "
              f"{cfg.attack.runs}, T = {cfg.attack.steps}, n' = {cfg.attack.rows}); the sweep's call took "
              f"{summary['seconds'] / 60:.1f} min in all.")
    exact_path = run_dir / "exact_units.parquet"
    if exact_path.exists():
        units = json.loads((run_dir / "exact_units.json").read_text())
        e = pd.read_parquet(exact_path)
        ex = summary.get("exact", {})
        doc.h(2, f"Exact reconstruction, every {cfg.target.level} pooled")
        near = ex.get("nearest_average_2010_tract")
        doc.p(f"{ex.get('solved', 0)} of {ex.get('units', 0)} {cfg.target.level} tasks solved; median "
              f"{ex.get('median_seconds_per_unit', float('nan')):.1f} s per task (building the tables, solving, "
              "certifying, agreement and reidentification; one CPU per task)."
              + (f" The {cfg.target.level} nearest 2010's average size (4,257 persons in 85 occupied blocks): "
                 f"{near['unit']}, {near['persons']:,} persons in {near['blocks']} blocks, {near['seconds']:.1f} s in "
                 f"all, {near.get('seconds_bureau_measures', float('nan')):.1f} s of it the solve and the Bureau's "
                 "measures (solvar, zero variability); single-year certificates take what is left of "
                 f"attack.exact_time_limit ({cfg.attack.exact_time_limit:g} s)."
                 if near else ""))
        reid_path = run_dir / "reid.parquet"
        bureau_section(doc, units, pd.read_parquet(reid_path) if reid_path.exists() else None, run_dir,
                       bureau_reference(cfg))
        doc.p(f"Per {cfg.target.level}: blocks of solvar 0 (the Bureau's measure) and of zero variability on all the "
              "tables, on the Bureau's 38 age bins; cumulative solvar (the records that can differ, at most); the same "
              "two keyed on P12's 23 age groups (the released code's key); seconds.")
        def sec(r, k):
            return f"{r[k]:.1f}" if k in r and pd.notna(r[k]) else ""

        def num(r, k, pct=False):
            v = r.get(k)
            return "" if v is None or pd.isna(v) else (f"{v:.1f}%" if pct else int(v))

        doc.table([cfg.target.level, "seed", "persons", "blocks", "status", "solvar 0 blocks", "cumulative solvar",
                   "solvar 0 blocks, P12 key", "cumulative solvar, P12 key",
                   "zero variability on all tables", "decided in time", "solve s", "solvar s", "zero variability s",
                   "certify s", "task s"],
                  [[r["unit"], r["seed"], r["persons"], r["blocks"], r["status"], num(r, "solvar_blocks_zero"),
                    num(r, "cumsolvar", True), num(r, "solvar_p12_blocks_zero"), num(r, "cumsolvar_p12", True),
                    r["blocks_zero_variability"],
                    "yes" if r["zero_variability_complete"] else "no", sec(r, "seconds_solve"), sec(r, "seconds_solvar"),
                    sec(r, "seconds_zero_variability"), sec(r, "seconds_certify"), sec(r, "seconds_task")]
                   for _, r in e.iterrows()], numeric={2, 3, 5, 6, 7, 8, 9, 11, 12, 13, 14, 15})
    md, _ = doc.write(run_dir, "sweep_report", cfg.name)
    return md


def _leading_percent(cell: str) -> float | None:
    """The figure of a table cell written as "69.3% (1,234 of 1,780)" or "69.3%"; None for "—" or "n/a"."""
    head = str(cell).split("%", 1)[0]
    try:
        return float(head) if "%" in str(cell) else None
    except ValueError:
        return None


def spread_rows(tables: list[list[list]]) -> list[list]:
    """One row per (measure, where) of the first table: the figure of each table (one per run), the spread
    ("min–max" of the figures present) and the reference column; a row missing from a run reads "—" there.
    Each table's rows are [measure, where, ours, reference], as :func:`bureau_table` gives them."""
    keyed = [{(r[0], r[1]): r for r in rows} for rows in tables]
    out = []
    for r in tables[0]:
        cells = [k.get((r[0], r[1])) for k in keyed]
        figures = [_leading_percent(c[2]) for c in cells if c is not None]
        figures = [f for f in figures if f is not None]
        spread = f"{min(figures):.1f}–{max(figures):.1f}%" if len(figures) > 1 else "—"
        out.append([r[0], r[1], *[str(c[2]).split(" (")[0] if c is not None else "—" for c in cells], spread, r[3]])
    return out


def write_seeds_report(run_dirs: list[str | Path]) -> Path:
    """seeds_report.md and .html, beside the runs (in their common folder): the exact sweeps of one config over
    several seeds (each a population seed and an attack seed), the Bureau table of each side by side, the
    spread between them, and the Bureau's figure."""
    dirs = [Path(d) for d in run_dirs]
    tables, labels, names = [], [], set()
    for d in dirs:
        if results_kind(d) != "sweep" or not (d / "exact_units.json").exists():
            raise ConfigError(f"{d} is not a finished sweep with exact tasks: the seeds report compares the Bureau "
                              "tables of several exact sweeps (censusrecon sweep of a config with attack.exact)")
        cfg = parse_config(yaml.safe_load((d / "config.yaml").read_text()), str(d / "config.yaml"))
        names.add(cfg.name)
        reid = d / "reid.parquet"
        table = bureau_table(json.loads((d / "exact_units.json").read_text()),
                             pd.read_parquet(reid) if reid.exists() else None, bureau_reference(cfg))
        tables.append(table[1] if table else [])
        labels.append(f"population seed {cfg.data.model_dump().get('seed', '—')}, seed {cfg.seed}")
    if not all(tables):
        raise ConfigError("a run has no exact attack to compare (its sweep had no exact tasks)")
    out_dir = Path(os.path.commonpath([str(d.resolve()) for d in dirs]))
    doc = Doc().h(1, f"{', '.join(sorted(names))}: {len(dirs)} seeds beside the Bureau's figures")
    doc.p("Each column is one exact sweep of the state (its own generated population and its own attack seed: the "
          "swap, the commercial file, the ties), measured as its sweep report measures it; the spread is the lowest "
          "and highest of them. A Bureau figure inside the spread is as close as another draw of the same kind of "
          "state comes; one outside it differs by more than the draw of the state. Runs: "
          + "; ".join(f"{lab} ({d})" for lab, d in zip(labels, dirs)) + ".")
    doc.table(["measure", "where", *[f"run {i + 1}" for i in range(len(dirs))], "spread", "the Bureau's (2010)"],
              spread_rows(tables))
    md, _ = doc.write(out_dir, "seeds_report", " and ".join(sorted(names)))
    return md
