"""The exact attack in a run: curves, certificates checked against D, agreement, reidentification, report."""

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from censusrecon.experiments.config import ConfigError, load_config, parse_config
from censusrecon.experiments.exact_eval import agreement, reidentification
from censusrecon.experiments.runner import run_experiment
from censusrecon.microdata.dataset import Dataset
from censusrecon.microdata.domain import Attribute, Domain
from censusrecon.microdata.errors import CensusReconError

pytest.importorskip("highspy")
ROOT = Path(__file__).resolve().parents[2]
SMALL = ["target.units=2", "attack.runs=2", "attack.steps=20", "attack.rows=60", "grid_points=10",
         "attack.exact_time_limit=120", "data.population={shape: compact}", "target.min_rows=200",
         "target.max_rows=900"]  # the compact population's tracts: every certificate within the time


@pytest.fixture(scope="module")
def exact_run(tmp_path_factory):
    cfg = load_config(ROOT / "configs" / "census" / "exact_tracts.yaml", SMALL)
    return run_experiment(cfg, tmp_path_factory.mktemp("exact"), progress=False)


def test_the_exact_attack_writes_its_curves_and_certified_rows_are_all_in_d(exact_run):
    df = pd.read_parquet(exact_run / "match_rate.parquet")
    assert {"exact", "exact_certified", "rap_rank", "county", "chance"} <= set(df.method) and "holdout" not in set(df.method)
    cert = df[df.method == "exact_certified"]
    assert (cert.num_matched == cert.num_candidates).all()  # a certified row not in D is impossible
    assert cert.groupby("unit").union_size.first().max() > 0  # some unit has certified rows
    facts = json.loads((exact_run / "manifest.json").read_text())["units"]
    for u in facts:
        assert u["holdout_rows"] == 0  # whole units, as the Bureau's: D is every person of the tract
        f = u["exact"]["sf1"]
        assert f["status"] == "solved" and f["persons"] == u["rows"] and f["certification_complete"]
        assert 0 <= f["blocks_zero_variability"] <= f["blocks_solved"]
        # the Bureau's 38-bin zero variability, decided for every block; a block fixed on single years is
        # fixed on their bins, so it has at least as many
        assert f["coarse_complete"] and f["coarse_blocks_undecided"] == 0
        assert f["blocks_zero_variability"] <= f["coarse_blocks_zero_variability"] <= f["coarse_blocks"]
        rc = f["rap_rank_certified"]["rap_rank"]
        assert rc["top_u_certified"] == rc["top_u_certified_in_d"] <= rc["top_u"]
    agree = pd.read_parquet(exact_run / "agreement.parquet")
    assert {"exact", "rap_rank"} <= set(agree.method) and agree.agree_exact_age.between(0, 1).all()
    assert (agree.agree_binned_age >= agree.agree_exact_age).all()
    reid = pd.read_parquet(exact_run / "reid.parquet")
    assert {"exact", "rap_rank", "modal", "proportional"} <= set(reid.method)
    assert (reid.confirmed <= reid.putative).all()


def test_the_report_has_the_exact_sections(exact_run):
    from censusrecon.experiments.report import write_run_report

    text = write_run_report(exact_run).read_text()
    for phrase in ("## Exact reconstruction by integer programming", "zero-variability blocks", "Generate-then-Verify",
                   "agreement measure", "Reidentification", "vulnerable"):
        assert phrase in text


def test_the_run_stops_if_a_certified_count_exceeds_ds(tmp_path, monkeypatch):
    import censusrecon.reconstruct.exact
    from censusrecon import reconstruct

    def claims_everything(solver, variables, values):  # a broken certifier: every solved row "certified"
        return np.asarray(values), True

    monkeypatch.setattr(reconstruct.exact, "certify", claims_everything)
    cfg = load_config(ROOT / "configs" / "census" / "exact_tracts.yaml", SMALL + ["target.units=1"])
    with pytest.raises(CensusReconError, match=r"certified \d+ times but D holds it \d+ times"):
        run_experiment(cfg, tmp_path, progress=False)


def test_exact_needs_tables_and_reidentification_needs_exact():
    with pytest.raises(ConfigError, match="add a kind: tables workload"):
        parse_config({"name": "x", "attack": {"exact": True}})
    with pytest.raises(ConfigError, match="set attack.exact: true"):
        parse_config({"name": "x", "queries": {"kind": "tables"}, "reidentification": {}})


def test_the_perry_county_ppmf_is_reconstructed_exactly(tmp_path):
    """The config as shipped, its PPMF extract inside the project (microdata/data/ppmf_perry_al)."""
    cfg = load_config(ROOT / "configs" / "census" / "exact_ppmf_perry.yaml",
                      ["target.units=1", "attack.runs=2", "attack.steps=20", "grid_points=10"])
    run = run_experiment(cfg, tmp_path, progress=False)
    f = json.loads((run / "manifest.json").read_text())["units"][0]["exact"]["race_hispanic"]
    assert f["status"] == "solved" and f["blocks_zero_variability"] > 0.9 * f["blocks_solved"]


def _dom():
    return Domain((Attribute.range("BLOCK", 2), Attribute.range("AGE", 116), Attribute.range("SEX", 2),
                   Attribute.range("HISP", 2), Attribute.range("CENRACE", 63)))


def test_agreement_matches_exact_age_first_then_age_groups_one_to_one():
    dom = _dom()
    truth = dom.encode(np.array([[0, 30, 0, 0, 0], [0, 31, 0, 0, 0], [0, 70, 1, 0, 1], [1, 5, 1, 1, 0]]))
    rec = dom.encode(np.array([[0, 30, 0, 0, 0], [0, 33, 0, 0, 0], [0, 34, 0, 0, 0], [1, 5, 1, 1, 0]]))
    a = agreement(dom, truth, rec)
    # exact: 30 and the block-1 child; then 31 (bin 30-34) takes one of 33/34; 70 finds nothing
    assert a == {"agree_exact_age": 0.5, "agree_binned_age": 0.75}
    assert agreement(Domain.from_sizes({"X": 3}), np.array([0]), np.array([0])) is None


def test_reidentification_confirms_only_the_persons_own_race_and_beats_guessing_on_the_vulnerable():
    from censusrecon.experiments.config import ReidentificationConfig

    dom = _dom()
    # block 0: three white non-Hispanic adults and one Black child (the vulnerable person)
    truth = np.array([[0, 40, 0, 0, 0], [0, 41, 1, 0, 0], [0, 60, 0, 0, 0], [0, 8, 1, 0, 1]])
    perfect = {"exact": truth.copy()}
    rc = ReidentificationConfig(attacker_files=["perfect"])
    r = reidentification(Dataset(dom, truth), perfect, np.random.default_rng(0), rc).set_index(["method", "group"])
    assert r.loc[("exact", "all"), "precision"] == 1.0 and r.loc[("exact", "vulnerable"), "putative"] == 1
    assert r.loc[("modal", "vulnerable"), "confirmed"] == 0  # the modal guess says white for the Black child
    assert r.loc[("modal", "all"), "precision"] == 0.75
    # the vulnerable group needs a zero-variability block when that is known
    r = reidentification(Dataset(dom, truth), perfect, np.random.default_rng(0), rc, zero_variability_blocks={1})
    assert r.set_index(["method", "group"]).loc[("exact", "vulnerable"), "attacker_records"] == 0


def test_one_to_one_linkage_never_links_a_reconstructed_record_twice():
    from censusrecon.experiments.reid import perfect_file
    from censusrecon.reconstruct.linkage import AttackerFile, link_one_to_one

    rng = np.random.default_rng(0)
    # five attacker records of the same block, sex and age, two reconstructed records there:
    # two links (each record once), the other three unlinked; then a binned pass on 30-34
    f = AttackerFile("f", np.arange(6), np.zeros(6, np.int64), np.zeros(6, np.int64), np.array([30] * 5 + [31]))
    linked, binned = link_one_to_one(f, np.zeros(3, np.int64), np.zeros(3, np.int64), np.array([30, 30, 33]), rng)
    assert sorted(linked[linked >= 0].tolist()) == [0, 1, 2]  # each reconstructed record at most once
    assert (linked[:5] >= 0).sum() + (linked[5] >= 0) == 3
    assert binned[linked == 2].all() and not binned[(linked == 0) | (linked == 1)].any()
    # many records, random files: never a reconstructed record twice
    for seed in range(5):
        r = np.random.default_rng(seed)
        n, m = 300, 250
        fb, fs, fa = r.integers(0, 3, n), r.integers(0, 2, n), r.integers(0, 40, n)
        linked, _ = link_one_to_one(perfect_file(fb, fs, fa), r.integers(0, 3, m), r.integers(0, 2, m),
                                    r.integers(0, 40, m), r)
        got = linked[linked >= 0]
        assert len(got) == len(set(got.tolist())) and len(got) <= m


def test_a_commercial_file_without_errors_reproduces_the_perfect_files_results():
    from censusrecon.experiments.config import CommercialFileConfig, ReidentificationConfig
    from censusrecon.experiments.reid import commercial_file, perfect_file

    dom = _dom()
    rng = np.random.default_rng(3)
    n = 400
    truth = np.stack([rng.integers(0, 2, n), rng.integers(0, 90, n), rng.integers(0, 2, n), rng.integers(0, 2, n),
                      rng.integers(0, 4, n)], axis=1)
    rec = truth.copy()
    rec[rng.random(n) < 0.3, 4] = 0  # a reconstruction right on race for most persons
    rec[rng.random(n) < 0.2, 1] += 1  # and off by a year on age for some
    zero = CommercialFileConfig(coverage=1.0, wrong_block=0.0, wrong_sex=0.0, age_error=0.0, extra=0.0)
    cols = ["method", "group", "attacker_records", "putative", "confirmed"]
    perfect = reidentification(Dataset(dom, truth), {"exact": rec}, np.random.default_rng(0),
                               ReidentificationConfig(attacker_files=["perfect"]))
    commercial = reidentification(Dataset(dom, truth), {"exact": rec}, np.random.default_rng(0),
                                  ReidentificationConfig(attacker_files=["commercial"], commercial=zero))
    assert (commercial["attacker_file"] == "commercial").all()
    assert perfect[cols].equals(commercial[cols])
    # with errors, fewer records are right and precision falls
    noisy = reidentification(Dataset(dom, truth), {"exact": rec}, np.random.default_rng(0), ReidentificationConfig())
    x = noisy.set_index(["method", "attacker_file", "group"])
    assert x.loc[("exact", "commercial", "all"), "precision"] < x.loc[("exact", "perfect", "all"), "precision"]
    # the default error rates leave about 37% of records right on person, block, sex and 38-bin age
    from censusrecon.microdata.census import AGE_BIN38_OF_AGE

    big = 20_000
    b, s, a = rng.integers(0, 40, big), rng.integers(0, 2, big), rng.integers(0, 90, big)
    c = CommercialFileConfig()
    f = commercial_file(perfect_file(b, s, a), np.arange(40), rng, c, n_ages=116)
    p = f.person
    ok = (p >= 0)
    right = ok.copy()
    right[ok] = (f.block[ok] == b[p[ok]]) & (f.sex[ok] == s[p[ok]]) & (AGE_BIN38_OF_AGE[f.age[ok]] == AGE_BIN38_OF_AGE[a[p[ok]]])
    assert 0.33 < right.mean() < 0.41
    assert 1.02 < len(f) / big < 1.06  # about 104 records per 100 persons, as the Bureau's file
    # records right on person and block are nearly all right on sex and age bin too (the Bureau's note)
    on_block = ok.copy()
    on_block[ok] = f.block[ok] == b[p[ok]]
    assert right.sum() / on_block.sum() > 0.95
    # a misplaced record goes only to an occupied block
    g = commercial_file(perfect_file(b, s, a), np.array([3, 7, 11]), rng,
                        CommercialFileConfig(coverage=1, wrong_block=1, wrong_sex=0, age_error=0, age_error_years=0,
                                             extra=0.5), n_ages=116)
    assert set(g.block[g.person >= 0].tolist()) <= {3, 7, 11} and set(g.block.tolist()) <= {3, 7, 11}

def test_zero_variability_and_agreement_by_the_bureaus_block_size_bins():
    from censusrecon.experiments.exact_eval import by_block_size
    from censusrecon.experiments.report import bureau_table

    dom = _dom()
    # block 0: 3 persons (bin 1-9), reconstructed right; block 1: 12 persons (bin 10-49), half of them
    # reconstructed with the wrong race
    b0 = np.array([[0, 30, 0, 0, 0], [0, 31, 1, 0, 0], [0, 70, 0, 1, 2]])
    b1 = np.array([[1, 20 + i, i % 2, 0, 0] for i in range(12)])
    truth = dom.encode(np.concatenate([b0, b1]))
    wrong = b1.copy()
    wrong[:6, 4] = 5
    rec = dom.encode(np.concatenate([b0, wrong]))
    rows = by_block_size(dom, truth, rec, {0: {"zero_variability": True}, 1: {"zero_variability": False}})
    assert [r["size"] for r in rows] == ["1-9", "10-49"]
    small, mid = rows
    assert (small["blocks"], small["blocks_zero_variability"], small["persons"], small["persons_zero_variability"]) == (1, 1, 3, 3)
    assert small["agree_exact_age_persons"] == 3 and mid["agree_exact_age_persons"] == 6
    assert mid["blocks_zero_variability"] == 0 and mid["persons"] == 12
    reid = pd.DataFrame([
        {"method": "exact", "attacker_file": "perfect", "group": "all", "putative": 10, "confirmed": 8},
        {"method": "exact", "attacker_file": "perfect", "group": "all", "putative": 10, "confirmed": 7},  # 2nd unit
        {"method": "modal", "attacker_file": "commercial", "group": "vulnerable", "putative": 4, "confirmed": 1},
        {"method": "rap_rank", "attacker_file": "perfect", "group": "all", "putative": 5, "confirmed": 5}])
    headers, table = bureau_table([{"exact": {"tables": {"by_block_size": rows}}}], reid)
    got = {(r[0], r[1]): (r[2], r[3]) for r in table}
    assert got[("zero variability, % of blocks", "blocks of 1-9 persons")] == ("100.0% (1 of 1)", "99.5%")
    assert got[("agreement, exact age", "blocks of 10-49 persons")] == ("50.0%", "47.1%")
    assert got[("zero variability, % of persons", "all blocks")] == ("20.0% (3 of 15)", "28.7%")
    assert got[("agreement, exact age", "all blocks")] == ("60.0%", "48.5%")  # (3 + 6) of 15
    assert got[("reidentification precision, perfect attacker file", "exact, all persons")] == ("75.0% (15 of 20)", "77.9%")
    assert got[("reidentification precision, commercial attacker file", "modal, the vulnerable group")] == (
        "25.0% (1 of 4)", "3.3%")
    assert not any("rap_rank" in r[1] for r in table)  # no Bureau counterpart: left to the reid table
    # with the Bureau's solution variability measured: block 0 solvar 0, block 1 solvar 25% (3 of 12 records)
    rows = by_block_size(dom, truth, rec, {0: {"zero_variability": True, "solvar": 0.0},
                                           1: {"zero_variability": True, "solvar": 25.0}})
    assert (rows[1]["blocks_solvar_zero"], rows[1]["persons_solvar"], rows[1]["solvar_records"]) == (0, 12, 3.0)
    got = {(r[0], r[1]): (r[2], r[3]) for r in bureau_table([{"exact": {"tables": {"by_block_size": rows}}}], None)[1]}
    assert got[("zero solution variability (solvar 0), % of blocks", "all blocks")] == ("50.0% (1 of 2)", "69.4%")
    assert got[("zero solution variability (solvar 0), % of persons", "blocks of 10-49 persons")] == (
        "0.0% (0 of 12)", "71.6%")
    assert got[("records that can differ, at most (cumulative solvar)", "all blocks")] == ("20.0%", "10.0%")  # 3 of 15
    assert got[("zero variability on all the tables, % of blocks", "all blocks")] == ("100.0% (2 of 2)", "—")
    assert not any("P12" in key[0] for key in got)  # the released code's key: only where it was measured
    # keyed on P12's 23 groups as well (the Bureau's released code): block 1's 25% falls to 0 there
    rows = by_block_size(dom, truth, rec, {0: {"zero_variability": True, "solvar": 0.0, "solvar_p12": 0.0},
                                           1: {"zero_variability": True, "solvar": 25.0, "solvar_p12": 0.0}})
    assert (rows[1]["blocks_solvar_p12_zero"], rows[1]["persons_solvar_p12"], rows[1]["solvar_p12_records"]) == (
        1, 12, 0.0)
    got = {(r[0], r[1]): (r[2], r[3]) for r in bureau_table([{"exact": {"tables": {"by_block_size": rows}}}], None)[1]}
    key = "solvar 0 keyed on P12's 23 age groups (the released code's key), % of blocks"
    assert got[(key, "all blocks")] == ("100.0% (2 of 2)", "69.4%")
    assert got[("zero solution variability (solvar 0), % of blocks", "all blocks")] == ("50.0% (1 of 2)", "69.4%")
    assert got[("cumulative solvar keyed on P12's 23 age groups", "all blocks")] == ("0.0%", "10.0%")


def test_each_of_the_bureaus_experiments_gets_its_own_figures_and_other_tables_get_none(root):
    """All 34 tables, the block tables only (rHDF b) and the 32 without P8 and P10 are the Bureau's three
    experiments: each is compared with its own figures, "—" where it published none; other tables with none."""
    from censusrecon.experiments.exact_eval import by_block_size
    from censusrecon.experiments.report import BUREAU_EXPERIMENTS, bureau_reference, bureau_table

    def ref(tables):
        return bureau_reference(load_config(root / "configs" / "census" / "exact_state.yaml", [f"queries.tables={tables}"]))

    full, block_only, thirty_two = BUREAU_EXPERIMENTS
    assert ref("sf1") is full and ref("[P1, P12, P12A, P14]") is None and ref("race_hispanic") is None
    from censusrecon.microdata.census import TABLE_SETS

    sf1 = list(TABLE_SETS["sf1"])
    assert ref("[" + ", ".join(t for t in sf1 if not t.startswith("PCT")) + "]") is block_only
    assert ref("[" + ", ".join(t for t in sf1 if t not in ("P8", "P10")) + "]") is thirty_two
    dom = _dom()
    truth = dom.encode(np.array([[0, 30, 0, 0, 0], [0, 31, 1, 0, 0], [1, 5, 1, 1, 0]]))
    rows = by_block_size(dom, truth, truth, {0: {"zero_variability": True, "solvar": 0.0},
                                             1: {"zero_variability": True, "solvar": 0.0}})
    reid = pd.DataFrame([{"method": "exact", "attacker_file": "perfect", "group": "all", "putative": 4, "confirmed": 3},
                         {"method": "modal", "attacker_file": "perfect", "group": "all", "putative": 4, "confirmed": 1}])

    def table(r):
        return {(x[0], x[1]): x[3] for x in bureau_table([{"exact": {"tables": {"by_block_size": rows}}}], reid, r)[1]}

    solvar0, exact_age = ("zero solution variability (solvar 0), % of blocks", "all blocks"), ("agreement, exact age",
                                                                                                "all blocks")
    precision = ("reidentification precision, perfect attacker file", "exact, all persons")
    modal = ("reidentification precision, perfect attacker file", "modal, all persons")
    assert (table(full)[solvar0], table(full)[exact_age], table(full)[precision]) == ("69.4%", "48.5%", "77.9%")
    got = table(block_only)
    assert (got[solvar0], got[exact_age], got[("agreement, 38-bin age", "blocks of 1-9 persons")]) == ("—", "44.2%",
                                                                                                        "99.8%")
    assert got[precision] == "75.9%" and got[modal] == "76.6%"  # the guessers read no reconstruction: the same
    assert got[("records that can differ, at most (cumulative solvar)", "all blocks")] == "—"
    got = table(thirty_two)
    assert (got[solvar0], got[exact_age], got[precision]) == ("65.0%", "—", "—")
    assert set(table(None).values()) == {"—"}


def test_links_are_confirmed_on_the_age_bin_and_the_vulnerable_group_keeps_records_in_the_persons_block():
    """The Bureau's rules: a link is confirmed on exact age, failing that on the 38-bin group, whichever
    pass made it; a commercial record of a vulnerable person counts in the group only when it names
    their own block (HDSR Table 6's notes)."""
    from censusrecon.experiments.reid import reidentify
    from censusrecon.reconstruct.linkage import AttackerFile

    block, sex, age, re = (np.array([0, 0]), np.array([0, 1]), np.array([30, 50]), np.array([1, 0]))
    vulnerable = np.array([True, False])
    rec = (np.array([0, 0]), np.array([0, 1]), np.array([31, 50]), np.array([1, 0]))  # person 0 rebuilt at 31
    # the file has person 0 a year off (31: linked on that exact year, confirmed on the bin 30-34), and a
    # second record of person 0 in block 1 (not the vulnerable group's universe: their block is 0)
    f = AttackerFile("commercial", np.array([0, 1, 0]), np.array([0, 0, 1]), np.array([0, 1, 0]),
                     np.array([31, 50, 30]))
    r = reidentify([f], {"exact": rec}, (block, sex, age, re), vulnerable, seed=0).set_index("group")
    assert (r.loc["all", "putative"], r.loc["all", "confirmed"]) == (2, 2)
    assert (r.loc["vulnerable", "attacker_records"], r.loc["vulnerable", "confirmed"]) == (1, 1)


def test_the_exact_attack_on_swapped_tables_confirms_against_d_and_reports_the_swapped_file(tmp_path):
    # as the Bureau's experiment: tables tabulated from a swapped file (its HDF), the reconstruction's
    # agreement measured against that file, reidentification confirmed against D (the CEF), and the
    # swapped file's own agreement and precision beside (method hdf)
    cfg = load_config(ROOT / "configs" / "census" / "exact_tracts.yaml",
                      SMALL + ["target.units=1", "attack.exact_swap_rate=0.2"])
    run = run_experiment(cfg, tmp_path, progress=False)  # a certified row outside the swapped file would stop it
    [u] = json.loads((run / "manifest.json").read_text())["units"]
    swapped = u["exact"]["sf1"]["tables_from"]
    assert swapped["swapped_file"] and 0.15 * u["rows"] <= swapped["records_swapped"] <= 0.2 * u["rows"] + 2
    agree = pd.read_parquet(run / "agreement.parquet").set_index("method")
    assert {"exact", "hdf", "exact_vs_hdf"} <= set(agree.index)
    assert agree.loc["hdf", "agree_exact_age"] < 1  # the swapped file is not D
    reid = pd.read_parquet(run / "reid.parquet")
    assert {"exact", "hdf", "modal"} <= set(reid.method) and (reid.confirmed <= reid.putative).all()
    hdf = reid[(reid.method == "hdf") & (reid.attacker_file == "perfect") & (reid.group == "all")]
    assert 0 < hdf.precision.iloc[0] < 1  # the swapped records' races are not their persons'
    from censusrecon.experiments.report import bureau_table

    rows = {(r[0], r[1]): r[2:] for r in bureau_table([u], reid)[1]}
    ours, theirs = rows[("agreement of the swapped file with D (HDF vs CEF), exact age", "all blocks")]
    assert ours == f"{100 * agree.loc['hdf', 'agree_exact_age']:.1f}%" and theirs == "96.3%"
    assert ("reidentification precision, perfect attacker file", "hdf, all persons") in rows
    from censusrecon.experiments.report import write_run_report

    text = write_run_report(run).read_text()
    assert "tabulated from a swapped file" in text
