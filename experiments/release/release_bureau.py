"""A release evaluation beside the Census Bureau's own attack: agreement with D by block size, reidentification."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from censusrecon.experiments.release.words import setting_label

#: The Census Bureau's published figures for its own attack on the 2010 Census (Abowd et al., HDSR 2025,
#: Tables 6-7), measured the same way: agreement with the confidential data on exact age and on 38 age
#: bins (reconstruction, and the published file itself), reidentification precision in the vulnerable
#: group. None where the paper gives no figure.
BUREAU_REFERENCE = [
    ("Census Bureau: 2010 swapped tables", 0.466, 0.919, 0.963, 0.964, None, None),
    ("Census Bureau: 2020 TopDown, production settings", 0.189, 0.366, 0.246, 0.367, 0.217, 0.209),
]


def _variant_rows(run_dir: Path, name: str, variant) -> pd.DataFrame | None:
    """The rows of ``run_dir/name`` for one variant, or None where the file or its rows are missing."""
    path = Path(run_dir) / name
    if not path.exists():
        return None
    rows = pd.read_parquet(path)
    rows = rows[rows["variant"] == variant]
    return None if rows.empty else rows


def bureau_table(run_dir: Path, variant, with_reference: bool = True) -> tuple[list, list] | None:
    """Per mechanism and setting, the Bureau's measures of a release evaluation (all units pooled,
    weighted by persons): headers and rows, or None when they were not measured; with the Bureau's
    published rows (``with_reference``) only where the population is 2010-shaped."""
    ag = _variant_rows(run_dir, "agreement.parquet", variant)
    if ag is None:
        return None
    reid = pd.read_parquet(Path(run_dir) / "reidentification.parquet") if (
        Path(run_dir) / "reidentification.parquet").exists() else pd.DataFrame()
    if len(reid):
        reid = reid[(reid["variant"] == variant) & (reid["group"] == "vulnerable")]
        if "attacker_file" in reid and (reid["attacker_file"] == "commercial").any():
            reid = reid[reid["attacker_file"] == "commercial"]  # the Bureau's published precision is its commercial file's

    def pooled(frame, col):
        return float((frame[col] * frame["persons"]).sum() / frame["persons"].sum()) if len(frame) else None

    def precision(m, s_, method):
        if not len(reid):
            return None
        x = reid[(reid["mechanism"] == m) & (reid["setting"] == s_) & (reid["method"] == method)]
        return float(x["confirmed"].sum() / x["putative"].sum()) if x["putative"].sum() else None

    def pct(x):
        return "" if x is None or pd.isna(x) else f"{100 * x:.1f}%"

    rows = []
    for (m, s_), g in ag.groupby(["mechanism", "setting"], sort=False):
        rec, pub = g[g["of"] == "reconstruction"], g[g["of"] == "published rows"]
        rows.append([m, setting_label(m, s_), pct(pooled(rec, "agree_exact_age")), pct(pooled(rec, "agree_binned_age")),
                     pct(pooled(pub, "agree_exact_age")), pct(pooled(pub, "agree_binned_age")),
                     pct(precision(m, s_, "reconstruction")), pct(precision(m, s_, "proportional")),
                     pct(precision(m, s_, "modal"))])
    for name, *vals in (BUREAU_REFERENCE if with_reference else []):
        rows.append([name, "2010 Census", *[pct(x) for x in vals[:4]], pct(vals[4]), pct(vals[5]), ""])
    headers = ["release", "setting", "reconstruction: exact age", "reconstruction: 38 age bins",
               "published rows: exact age", "published rows: 38 age bins", "reid. precision (vulnerable)",
               "proportional guess", "modal guess"]
    return headers, rows


#: The Census Bureau's agreement of its reconstruction of the 2020 DAS output (run on the 2010 data at the
#: production settings of the April 2023 PPMF) with the confidential 2010 file, nationally, by block size, on
#: the 38 age bins (Abowd et al., HDSR 2025); "all" also on exact age.
BUREAU_DAS_AGREEMENT = {"1-9": 0.080, "10-49": 0.182, "50-99": 0.273, "100+": 0.385, "all": 0.366}


BUREAU_DAS_AGREEMENT_EXACT = 0.189


def agreement_table(run_dir: Path, variant, with_reference: bool) -> tuple[list, list] | None:
    """The Bureau's agreement of every release's published rows with D by block size (all units pooled:
    counts added), on the 38 age bins and, where the ages are single years, exact: headers and rows (one per
    size class and one over all blocks), or None where no release published rows over blocks; with the
    Bureau's national figures for the 2020 DAS beside them (``with_reference``)."""
    ag = _variant_rows(run_dir, "agreement_by_size.parquet", variant)
    if ag is None:
        return None
    order = list(dict.fromkeys(ag["block_size"].tolist()))
    sums = ag.groupby(["mechanism", "setting", "block_size"], sort=False)[["persons", "agree_binned", "agree_exact"]]
    pooled = sums.sum(min_count=1)
    releases = list(dict.fromkeys(zip(ag["mechanism"], ag["setting"])))
    exact_measured = ag["agree_exact"].notna().any()

    def pct(n, p):
        return "" if n is None or pd.isna(n) or not p else f"{100 * n / p:.1f}%"

    headers = ["block size", "blocks", "persons in D"]
    for m, s_ in releases:
        label = f"{m}, {setting_label(m, s_)}"
        headers += [f"{label}: 38 age bins"] + ([f"{label}: exact age"] if exact_measured else [])
    if with_reference:
        headers += ["Census Bureau, 2020 DAS, national (HDSR 2025): 38 age bins"]
    first = ag[(ag["mechanism"] == releases[0][0]) & (ag["setting"] == releases[0][1])]
    blocks = first.groupby("block_size", sort=False)["blocks"].sum()
    rows = []
    for size in order:
        persons = int(pooled.loc[(releases[0][0], releases[0][1], size), "persons"])
        row = [size, int(blocks.get(size, 0)), persons]
        for m, s_ in releases:
            r = pooled.loc[(m, s_, size)]
            row += [pct(r["agree_binned"], r["persons"])] + ([pct(r["agree_exact"], r["persons"])]
                                                              if exact_measured else [])
        if with_reference:
            ref = BUREAU_DAS_AGREEMENT.get(size)
            row += ["" if ref is None else f"{100 * ref:.1f}%" + (
                f" (exact age {100 * BUREAU_DAS_AGREEMENT_EXACT:.1f}%)" if size == "all" else "")]
        rows.append(row)
    return headers, rows


def agreement_section(doc, run_dir: Path, cfg, variant) -> None:
    bureau = cfg.data.source == "bureau"
    table = agreement_table(run_dir, variant, with_reference=bureau)
    if table is None:
        return
    headers, rows = table
    doc.h(3, "Agreement of the published rows with D, by block size")
    doc.p("The Census Bureau's measure (Abowd et al., HDSR 2025) of each release that publishes person rows: the "
          "share of D's persons matched one to one, within their block, by a published row with the same sex, "
          "race, Hispanic origin and age (on SF1's 38 age groups; exact age where the data's ages are single "
          "years), by the size of the block in D, all units pooled. "
          + ("" if any("exact age" in h for h in headers) else
             "Exact age is not measured: AGE here is the 38 groups (data.age: binned; --set data.age=single "
             "measures it too, where the data's single years are worth comparing). ")
          + ("Beside them, the Bureau's national figures for its reconstruction of the 2020 DAS output: those are "
             "measured against the confidential 2010 file over the whole nation, these against D, the records of "
             "the published 2010 tables of the tracts evaluated (the swapped detail file on these keys), so the "
             "two agree in definition, not in truth or population." if bureau else ""))
    doc.table(headers, rows, numeric=set(range(1, len(headers))))


def bureau_section(doc, run_dir: Path, cfg, variant) -> None:
    pop = getattr(cfg.data, "population", None)
    shaped = cfg.data.source == "embedded" and getattr(pop, "shape", None) == "2010"
    table = bureau_table(run_dir, variant, with_reference=shaped)
    if table is None:
        return
    doc.h(3, "The Census Bureau's measures")
    doc.p("As the Bureau measured its own attack on the 2010 Census (Abowd et al., HDSR 2025): the share of D's "
          "persons that the exact attack's reconstruction agrees with, matched one to one within each block on every "
          "attribute with exact age, then the rest on the Bureau's 38 age bins; the same for the rows the release "
          "publishes (TopDown's microdata detail file, the swapped file, synthetic rows); and the precision of "
          "reidentification in the vulnerable group (persons whose race and ethnicity differ from their block's "
          "most common one and who are unique on block, sex and age bin), beside guessing each block's most "
          "common race and ethnicity (modal) or drawing it from the block's shares (proportional), with one "
          "simulated attacker file per unit for every release. Consistent tables get the exact count model; "
          "independently noised ones the least-deviation fit (integer counts closest to the noisy tables in "
          "Σ |A x − c̃| / scale, solved over the LP relaxation's support). An empty cell: nothing to measure there "
          "(no solution, or no vulnerable person linked). "
          + ("The Bureau's rows are its published figures for the whole 2010 population, given for scale: "
             if shaped else
             "The Bureau's published figures are not printed beside these: this population is not 2010-shaped "
             "(data.population.shape: \"2010\" gives the embedded one 2010's blocks and mix), and figures of "
             "another population side by side invite a comparison they do not support. ")
          + "The agreement "
          "is defined as the Bureau's; the reidentification links as the Bureau's (one to one, without replacement, "
          "in random order, on block, sex and age, then the 38 age bins; confirmed, as the Bureau's code confirms "
          "every link, on the named person's block, sex, 38-bin age, race and ethnicity), with a simulated "
          "commercial-like attacker file of the Bureau's file's structure (about 104 records per 100 persons, 37% "
          "right; how the rest split between wrong blocks and persons not in D is a setting, not the Bureau's "
          "file), and the vulnerable group here lacks the Bureau's condition of a block with a unique reconstruction (a noisy release's "
          "reconstruction is not certified); ties of a block's most common race and ethnicity are broken by the "
          "unit's counts.")
    headers, rows = table
    doc.table(headers, rows, numeric=set(range(2, len(headers))))
