"""An agency's own release: its person file, block list and tables, through run and evaluate-release,
and every malformed input of every source ending in one line that names the file."""

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from censusrecon.experiments.cli import main
from censusrecon.experiments.config import ConfigError, load_config
from censusrecon.microdata.example import write_agency_example

ROOT = Path(__file__).resolve().parents[2]
SMALL = ["attack.runs=2", "attack.steps=20", "attack.rows=60", "target.units=2", "grid_points=10",
         "release.epsilons=[1.0, 8.0]", "release.audit.runs=5000", "release.mechanisms=[laplace_tables, synthetic]",
         "release.inference.informed_targets=4", "release.inference.informed_fits=2"]


@pytest.fixture(scope="module")
def agency(tmp_path_factory):
    d = tmp_path_factory.mktemp("agency")
    persons, blocks = write_agency_example(d / "inputs")
    over = SMALL + [f"data.path={persons}", f"data.units_file={blocks}"]
    return d, over


def test_the_agency_config_runs_and_evaluates_a_release_end_to_end(agency, capsys):
    d, over = agency
    cfg = str(ROOT / "configs" / "agency" / "example.yaml")
    # one ε is enough here (the verdict's logic over a grid is tested on hand-made figures); anonymeter's risks are
    # test_release.py's subject
    sets = [x for o in over + ["release.epsilons=[8.0]", "release.risks=false"] for x in ("--set", o)]
    assert main(["run", cfg, "--out", str(d / "results"), "--no-progress", *sets]) == 0
    run = next((d / "results" / "agency_example").iterdir())
    df = pd.read_parquet(run / "match_rate.parquet")
    assert {"rap_rank", "chance", "county"} <= set(df.method) and "holdout" not in set(df.method)  # whole units
    facts = json.loads((run / "manifest.json").read_text())["units"]
    for f in facts:  # TOTAL, SEX_BY_AGE and RACE_HISP per block, SEX_BY_SYA for the tract
        cells = f["workloads"]["tables"]["cells_per_table"]
        blocks = cells["TOTAL"]
        assert cells["SEX_BY_AGE"] == 6 * blocks and cells["RACE_HISP"] == 14 * blocks and cells["SEX_BY_SYA"] == 232
    capsys.readouterr()
    status = main(["evaluate-release", cfg, "--out", str(d / "results"), "--no-progress", *sets])
    rel = run / "release"
    said = capsys.readouterr().out  # the answer on the terminal: decision, persons as "x of N", best guess named
    # the example publishes through OpenDP: the decision rests on the verdict and the audit, never on the backend
    decision = json.loads((rel / "decision.json").read_text())
    assert status == decision["exit_status"] and said.startswith("DECISION (") and "simulation" not in said
    assert "fit for publication: yes" in said and all(m["fit_for_publication"] for m in decision["mechanisms"])
    assert "verdict: " in said and "rule: " in said and " persons unique in D (" in said and "next: " in said
    assert "best guess (" in said and str(rel / "report.html") in said
    util = pd.read_parquet(rel / "utility.parquet")
    assert set(util.table) == {"TOTAL", "SEX_BY_AGE", "RACE_HISP", "SEX_BY_SYA", "block totals", "unit total"}
    assert set(util[util.table == "SEX_BY_SYA"].level) == {"unit"} and set(util[util.table == "TOTAL"].level) == {"block"}
    assert {"mae_per_cell", "share_off_10pct"} <= set(util.columns)
    text = (rel / "report.md").read_text()
    assert "TOTAL (total, per block)" in text and "SEX_BY_AGE (SEX × AGE in 3 groups, per block)" in text
    assert "How many persons are reconstructed?" in text and "### Verdict" in text
    assert "every person of each unit" in text and "all 2-way marginals" not in text
    assert f"the person file {over[-2].split('=', 1)[1]}" in text and "state ⊃ county ⊃ tract ⊃ block" in text
    page = (rel / "report.html").read_text()
    assert page.count("data:image/png;base64,") == 4 and "<table>" in page  # decision.png first, then risk_tpr.png
    # whole units: the realistic game draws each release again for half of each unit, the other half non-members
    assert "risk to one person" in said and "What each ε means for one person" in text
    scores = pd.read_parquet(rel / "membership_scores.parquet")
    assert {"membership_realistic", "membership_informed"} <= set(scores["attack"])
    ledger = json.loads((rel / "ledger.json").read_text())
    assert all("blocks.csv" in e["block_list"] and e["relation"] == "add_remove" for e in ledger["entries"])
    # report and plot accept the release directory as well as the run directory
    (rel / "report.md").unlink()
    assert main(["report", str(rel)]) == 0 and (rel / "report.md").exists()
    assert main(["plot", str(rel)]) == 0 and (rel / "persons_error.png").exists()
    assert main(["report", str(run)]) == 0 and (run / "report.html").exists()
    mode = (rel / "report.md").stat().st_mode & 0o777
    assert mode & 0o040, oct(mode)  # results are readable by the user's group


def test_the_report_describes_the_tables_that_ran(agency, tmp_path):
    from censusrecon.experiments.release.evaluate import evaluate_release

    _, over = agency
    cfg = load_config(ROOT / "configs" / "agency" / "example.yaml",
                      over + ["queries.tables=[{name: ONLY_SEX, level: block, by: [SEX]}]", "target.units=1",
                              "release.epsilons=[4.0]", "release.mechanisms=[laplace_tables]"])
    text = (evaluate_release(cfg, tmp_path, progress=False) / "report.md").read_text()
    assert "tables ONLY_SEX (SEX, per block)" in text and "SEX_BY_AGE" not in text


def test_table_declarations_are_checked_against_the_data(agency):
    from censusrecon.experiments.problem import load_population

    _, over = agency
    for table, expected in (("{name: T, level: block, by: [AGEX]}", "variable 'AGEX' is not an attack attribute"),
                            ("{name: T, level: block, by: [{RACE: [[W], [Z]]}]}", "values ['Z'] that RACE does not"),
                            ("{name: T, level: county, by: [SEX]}", "set target.level: county"),
                            ("{name: T, level: block, by: [{AGE: [[0, 200]]}]}", "outside AGE's range")):
        cfg = load_config(ROOT / "configs" / "agency" / "example.yaml", over + [f"queries.tables=[{table}]"])
        with pytest.raises(ConfigError, match=expected.replace("[", r"\[").replace("]", r"\]")):
            load_population(cfg)


def test_a_key_the_source_does_not_read_is_an_error(capsys):
    assert main(["run", str(ROOT / "configs" / "demo.yaml"), "--set", "data.path=/tmp/x.csv"]) == 2
    err = capsys.readouterr().err.strip()
    assert "data.path is not read by source 'embedded'" in err and "\n" not in err
    # a dumped config (every default written out) still loads
    cfg = load_config(ROOT / "configs" / "demo.yaml")
    from censusrecon.experiments.config import parse_config

    assert parse_config(cfg.model_dump(mode="json")) == cfg


def _malformed_corpus(tmp_path: Path, blocks: Path) -> list[tuple[list[str], str]]:
    """(command line, the file its one-line error must name) for malformed PPMF, ACS, table and config files."""
    bad = tmp_path
    rng = np.random.default_rng(0)
    (bad / "binary.csv").write_bytes(rng.bytes(3000))
    (bad / "empty.csv").write_text("")
    hdr = "VINTAGE,TABBLKST,TABBLKCOU,TABTRACTCE,TABBLKGRPCE,TABBLK,RTYPE,GQTYPE_PL,QAGE,QSEX,CENHISP,CENRACE\n"
    ok = "x,01,105,686800,1,1000,3,0,25,1,1,01\n"
    (bad / "qsex_text.csv").write_text(hdr + ok + "x,01,105,686800,1,1000,3,0,25,female,1,01\n")
    (bad / "qage200.csv").write_text(hdr + ok + "x,01,105,686800,1,1000,3,0,200,1,1,01\n")
    (bad / "cenrace99.csv").write_text(hdr + ok + "x,01,105,686800,1,1000,3,0,20,1,1,99\n")
    (bad / "short_geo.csv").write_text(hdr + ok + "x,1,105,686800,1,1000,3,0,20,1,1,01\n")
    (bad / "ok.csv").write_text(hdr + ok)
    (bad / "latin1.csv").write_bytes((hdr + ok + "x,01,105,686800,1,1000,3,0,25,1,1,0\xe9\n").encode("latin-1"))
    (bad / "config.yaml").write_bytes(b"name: x\nseed: \xff\xfe\n")
    (bad / "config_bad.yaml").write_text("name: [unclosed\n")
    (bad / "config_list.yaml").write_text("- a\n- b\n")
    (bad / "config_type.yaml").write_text("name: x\nattack: {runs: many}\n")
    ppmf = str(ROOT / "configs" / "census" / "tracts.yaml")
    cases = [([ppmf, "--set", "data.source=ppmf", "--set", f"data.path={bad / f}.csv"], f"{f}.csv")
             for f in ("binary", "empty", "qsex_text", "qage200", "cenrace99", "short_geo", "latin1")]
    cases.append(([ppmf, "--set", "data.source=ppmf", "--set", f"data.path={bad / 'ok.csv'}", "--set",
                   "data.tracts=['01105999999']"], "ok.csv"))
    nist = str(ROOT / "configs" / "acs" / "nist_national_2018.yaml")
    for f in ("binary", "empty", "qsex_text"):
        cases.append(([nist, "--set", f"data.path={bad / f}.csv"], f"{f}.csv"))
    cases += [([str(bad / f)], f) for f in ("config.yaml", "config_bad.yaml", "config_list.yaml", "config_type.yaml")]
    agency_cfg = str(ROOT / "configs" / "agency" / "example.yaml")
    for f in ("binary", "empty", "qsex_text"):
        # the units file exists (a fresh clone has no inputs/agency until example-data writes it)
        cases.append(([agency_cfg, "--set", f"data.path={bad / f}.csv", "--set", f"data.units_file={blocks}"],
                      f"{f}.csv"))
    return cases


def test_every_malformed_input_ends_in_one_line_naming_the_file(agency, tmp_path, capsys):
    (tmp_path / "data_dictionary.json").write_text("{}")
    blocks = next(a.split("=", 1)[1] for a in agency[1] if a.startswith("data.units_file="))
    for argv, name in _malformed_corpus(tmp_path, Path(blocks)):
        code = main(["queries", *argv])
        err = capsys.readouterr().err.strip()
        assert code == 2, (argv, err)
        assert "\n" not in err and name in err and "Traceback" not in err, (argv, err)


def test_a_listed_unit_nobody_lives_in_can_be_named(agency, tmp_path, capsys):
    """The public block list names a tract nobody lives in: naming it is no error; it is reported
    as empty (nothing to reconstruct), not attacked; a name in neither the data nor the list is."""
    from censusrecon.experiments.release.evaluate import evaluate_release

    _, over = agency
    blocks_file = Path(next(o for o in over if o.startswith("data.units_file=")).split("=", 1)[1])
    listed = pd.read_csv(blocks_file, dtype=str)
    first = listed.iloc[0]
    empty_tract = {**first.to_dict(), "tract": "999900", "blk": "9001"}
    mine = tmp_path / "blocks.csv"
    pd.concat([listed, pd.DataFrame([empty_tract])], ignore_index=True).to_csv(mine, index=False)
    occupied = f"{first['st']}:{first['cty']}:{first['tract']}"
    empty = f"{first['st']}:{first['cty']}:999900"
    base = [o for o in over if not o.startswith("data.units_file=")] + [f"data.units_file={mine}"]
    cfg = load_config(ROOT / "configs" / "agency" / "example.yaml",
                      base + [f"target.unit_ids=[{occupied}, {empty}]", "release.epsilons=[4.0]",
                              "release.mechanisms=[laplace_tables]", "release.audit.runs=2000"])
    # queries says so too, naming the unit (it used to fail with "cannot split 0 row(s)")
    from censusrecon.experiments.cli import main

    assert main(["queries", str(ROOT / "configs" / "agency" / "example.yaml"),
                 *[x for o in base + [f"target.unit_ids=[{occupied}, {empty}]"] for x in ("--set", o)]]) == 0
    assert f"{empty}: listed, but nobody lives there" in capsys.readouterr().out
    rel = evaluate_release(cfg, tmp_path / "out", progress=False)
    manifest = json.loads((rel / "manifest.json").read_text())
    assert manifest["units"] == [occupied] and manifest["facts"]["empty_units"] == [empty]
    assert json.loads((rel / "ledger.json").read_text())["empty_units"] == [empty]
    assert f"nobody lives there, so nothing to reconstruct: {empty}" in (rel / "report.md").read_text()
    bad = load_config(ROOT / "configs" / "agency" / "example.yaml",
                      base + [f"target.unit_ids=[{occupied}, 01:001:424242]"])
    with pytest.raises(ConfigError, match=r"\['01:001:424242'\] are neither tracts of the data nor in its public"):
        evaluate_release(bad, tmp_path / "out2", progress=False)
    only_empty = load_config(ROOT / "configs" / "agency" / "example.yaml", base + [f"target.unit_ids=[{empty}]"])
    with pytest.raises(ConfigError, match="nobody lives in any of the tracts named"):
        evaluate_release(only_empty, tmp_path / "out3", progress=False)
