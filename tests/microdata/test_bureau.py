"""The Census Bureau's 2010 extract format: hand-made rows (leading zero, race flags, a malformed row), the
shipped 8 tracts, and tables tabulated from binned ages equal to hand-counted ones."""

from pathlib import Path

import numpy as np
import pytest

from censusrecon.microdata.bureau import BureauFileError, cenrace_of_flags, read_bureau_extract
from censusrecon.microdata.census import AGE_BINS_38_LABELS, CENRACE_COMBOS

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "microdata" / "data" / "bureau_2010"
HEADER = ("RowID,Block ID,Sex,Age,Binned Age,White,Black,American Indian or Alaskan Native,Asian,"
          "Native Hawaiian or Pacific Island,Some Other Race,Hispanic,BSAb Unique,BSAbER Unique\n")


def _write(path: Path, rows: list[str]) -> Path:
    path.write_text(HEADER + "".join(r + "\n" for r in rows))
    return path


ROWS = [
    # Block ID with its leading zero (the CSV as zero-padded) and without it (as Excel left it): the same block
    "0,010730051031000,male,4,4,N,Y,N,N,N,N,N,True,True",
    "1,10730051031000,female,27,25 - 29,Y,N,N,N,N,N,Y,True,True",
    "2,010730051031001,female,90,85+,Y,Y,N,N,N,N,N,False,True",
    "3,380879650001002,male,62,62 - 64,N,N,N,N,Y,Y,N,True,True",
]


def test_hand_made_rows_are_read_as_published(tmp_path):
    d = read_bureau_extract(_write(tmp_path / "x.csv", ROWS), age="single")
    assert len(d) == 4 and d.domain.names == ("AGE", "SEX", "HISP", "RACE", "CENRACE")
    geo = d.geography
    assert geo.units("block").tolist()[:2] == ["010730051031000"] * 2  # the leading zero restored
    assert geo.units("tract").tolist() == ["01073005103"] * 3 + ["38087965000"]
    assert geo.units("county").tolist()[-1] == "38087" and geo.units("state").tolist()[0] == "01"
    age, sex, hisp, race, cenrace = d.codes.T
    assert age.tolist() == [4, 27, 90, 62] and sex.tolist() == [0, 1, 1, 0] and hisp.tolist() == [0, 1, 0, 0]
    # Black alone; White alone; White and Black; NHPI and Some Other Race (two or more races: RACE 6)
    assert [CENRACE_COMBOS[c] for c in cenrace] == [(1,), (0,), (0, 1), (4, 5)] and race.tolist() == [1, 0, 6, 6]
    binned = read_bureau_extract(tmp_path / "x.csv")  # the default: SF1's 38 age groups
    assert binned.domain.attribute("AGE").values == AGE_BINS_38_LABELS
    assert [AGE_BINS_38_LABELS[a] for a in binned.codes[:, 0]] == ["4", "25 - 29", "85+", "62 - 64"]
    only = read_bureau_extract(tmp_path / "x.csv", tracts=["38087965000"])
    assert len(only) == 1


def test_race_flags_map_to_cenrace_in_sf1_order():
    flags = np.array([[int(i in combo) for i in range(6)] for combo in CENRACE_COMBOS])
    assert cenrace_of_flags(flags).tolist() == list(range(63))


@pytest.mark.parametrize("row, column, says", [
    ("0,0107300510310,male,4,4,N,Y,N,N,N,N,N,True,True", "Block ID", "15-digit block id"),
    ("0,010730051031000,M,4,4,N,Y,N,N,N,N,N,True,True", "Sex", "male or female"),
    ("0,010730051031000,male,four,4,N,Y,N,N,N,N,N,True,True", "Age", "an integer"),
    ("0,010730051031000,male,30,25 - 29,N,Y,N,N,N,N,N,True,True", "Binned Age", "not the SF1 age group of Age 30"),
    ("0,010730051031000,male,4,4,N,maybe,N,N,N,N,N,True,True", "Black", "Y or N"),
    ("0,010730051031000,male,4,4,N,N,N,N,N,N,N,True,True", "White", "every race flag of this row is N"),
])
def test_a_malformed_row_names_file_row_column_and_value(tmp_path, row, column, says):
    path = _write(tmp_path / "bad.csv", [ROWS[0], row])
    with pytest.raises(BureauFileError) as e:
        read_bureau_extract(path)
    msg = str(e.value)
    assert f"{path} row 3, column {column}" in msg and says in msg and "\n" not in msg


def test_other_files_are_refused_in_one_line(tmp_path):
    (tmp_path / "x.txt").write_text("a")
    for path, says in ((tmp_path / "none.csv", "does not exist"), (tmp_path / "x.txt", "a Bureau extract is .csv"),
                       (_write(tmp_path / "empty.csv", []), "no persons")):
        with pytest.raises(BureauFileError, match=says):
            read_bureau_extract(path)
    (tmp_path / "cols.csv").write_text("RowID,Block ID\n0,010730051031000\n")
    with pytest.raises(BureauFileError, match=r"lacks columns \['Sex'"):
        read_bureau_extract(tmp_path / "cols.csv")


def test_the_shipped_tracts_read_both_files():
    rhdf = read_bureau_extract(SHIPPED / "rhdf_bt_0solvar_extract_8tracts.csv.gz")
    rmdf = read_bureau_extract(SHIPPED / "rmdf_bt_0solvar_extract_8tracts.csv.gz")  # Block IDs as Excel left them
    assert len(rhdf) == 19318 and len(rmdf) == 19314
    tracts = sorted(set(rhdf.geography.units("tract")))
    assert tracts == sorted(set(rmdf.geography.units("tract"))) and len(tracts) == 8
    assert "01073005103" in tracts and "06037532400" in tracts


def test_block_tables_from_binned_ages_equal_hand_counted_ones(tmp_path):
    """A hand-made tract of two blocks: P12 (sex by age group) and P14 (sex by single year under 20) tabulated
    on the 38 groups equal the counts made by hand from the rows; PCT12 (single years 22+) is refused."""
    from censusrecon.microdata.census import CensusWorkload, sf1_tables
    from censusrecon.microdata.errors import CensusReconError

    rows = ["0,010730051031000,male,4,4,Y,N,N,N,N,N,N,,",
            "1,010730051031000,male,3,3,Y,N,N,N,N,N,N,,",
            "2,010730051031000,female,27,25 - 29,Y,N,N,N,N,N,N,,",
            "3,010730051031001,female,29,25 - 29,Y,N,N,N,N,N,N,,",
            "4,010730051031001,female,19,19,N,Y,N,N,N,N,Y,,"]
    d = read_bureau_extract(_write(tmp_path / "t.csv", rows))
    t = sf1_tables()
    block = d.geography.units("block")

    def count(table: str, number: int, which: str) -> int:
        w = CensusWorkload.build(d.domain, [c for c in t[table] if c.number == number], block_attr=None)
        return int(w.counts(d.take(np.flatnonzero(block == which)))[0])

    b0, b1 = "010730051031000", "010730051031001"
    # P12 cell 3: male under 5 (both boys of block 1000); cell 35: female 25-29 (one in each block)
    assert (count("P12", 3, b0), count("P12", 3, b1)) == (2, 0)
    assert (count("P12", 35, b0), count("P12", 35, b1)) == (1, 1)
    # P14 cell 43: female aged 19 (single years under 20 are groups); P12I (White alone, not Hispanic) total
    assert (count("P14", 43, b0), count("P14", 43, b1)) == (0, 1)
    assert (count("P12I", 1, b0), count("P12I", 1, b1)) == (3, 1)
    with pytest.raises(CensusReconError, match="PCT12 is keyed on single years of age"):
        CensusWorkload.build(d.domain, t["PCT12"], block_attr=None)


def test_the_published_xlsx_is_read_with_block_ids_excel_stored_as_numbers(tmp_path):
    """The archive's .xlsx: Excel keeps Block ID as a number, so states 01-09 lose their leading zero."""
    openpyxl = pytest.importorskip("openpyxl")  # the xlsx extra (dev installs it)
    wb = openpyxl.Workbook()
    ws = wb.active
    ws.append(HEADER.strip().split(","))
    for row in ROWS:
        cells = row.split(",")
        ws.append([int(cells[0]), int(cells[1]), *cells[2:3], int(cells[3]), *cells[4:]])
    wb.save(tmp_path / "x.xlsx")
    from_xlsx = read_bureau_extract(tmp_path / "x.xlsx")
    from_csv = read_bureau_extract(_write(tmp_path / "x.csv", ROWS))
    assert np.array_equal(from_xlsx.codes, from_csv.codes)
    assert from_xlsx.geography.units("block").tolist() == from_csv.geography.units("block").tolist()


def test_the_real_data_config_runs_on_one_small_tract(tmp_path, capsys):
    """configs/census/bureau_2010.yaml end to end on the Los Angeles tract (5 blocks, 112 persons), cut small:
    RAP-Rank's match rate and persons beyond the best guess, on real 2010 tables."""
    import pandas as pd

    from censusrecon.experiments.cli import main

    sets = ["target.unit_ids=['06037532400']", "attack.runs=2", "attack.steps=30", "attack.rows=120",
            "grid_points=10"]
    assert main(["run", str(ROOT / "configs" / "census" / "bureau_2010.yaml"), "--out", str(tmp_path),
                 "--no-progress", *[x for o in sets for x in ("--set", o)]]) == 0
    out = capsys.readouterr().out
    assert "rap_rank" in out and "persons unique in D" in out and "best guess" in out
    run = next((tmp_path / "census_bureau_2010").iterdir())
    df = pd.read_parquet(run / "match_rate.parquet")
    assert {"rap_rank", "national", "chance"} <= set(df["method"]) and df["u"].max() > 0


def test_the_missouri_program_is_rebuilt_from_its_published_counts_and_solved_to_gurobis_persons():
    """The Bureau's integer program for a real Missouri tract (11 persons, 2 blocks): the published counts read
    from its constraint names, the project's own program built from them (a detail cell the file leaves out is
    0, a total it leaves out is free), solved with HiGHS: the same persons as Gurobi's solution, block by block."""
    from censusrecon.microdata.bureau import bureau_program, compare_persons, read_lp_counts, read_lp_solution
    from censusrecon.reconstruct.exact import reconstruct_exact

    lp = SHIPPED / "lp" / "model_29165030307.lp.gz"
    counts = read_lp_counts(lp)
    assert counts[("P1", 1, "291650303071018")] == 7 and counts[("P1", 1, "291650303071141")] == 4
    assert counts[("P12A", 3, "291650303071018")] == 1 and counts[("PCT12", 3, "29165030307")] == 0
    w, vec, blocks = bureau_program(lp)
    res, _ = reconstruct_exact(w, vec, certify_support=False)
    assert res.status == "solved"
    keys, n = res.rows()
    codes = w.domain.decode(keys)
    ours = [(blocks[c[0]], int(c[1]), int(c[2]), int(c[3]), int(c[4])) for c, k in zip(codes, n) for _ in range(k)]
    theirs = read_lp_solution(SHIPPED / "lp" / "model_29165030307.sol.gz")
    assert len(theirs) == 11
    rows = compare_persons(ours, theirs)
    assert [(r["ours"], r["theirs"]) for r in rows] == [(7, 7), (4, 4)]
    assert all(r["same_exact_age"] == r["ours"] for r in rows)


def test_an_lp_file_that_is_not_the_bureaus_is_refused(tmp_path):
    from censusrecon.microdata.bureau import read_lp_counts

    (tmp_path / "x.lp").write_text("Minimize\n obj: x\nSubject To\n c1: x + y = 1\nEnd\n")
    with pytest.raises(BureauFileError, match="no constraint named after a table cell"):
        read_lp_counts(tmp_path / "x.lp")
    (tmp_path / "y.lp").write_text("Subject To\n_C_Q0010001_291650303071018_1: x = 1\n")
    with pytest.raises(BureauFileError, match="not named after a table cell"):
        read_lp_counts(tmp_path / "y.lp")


def test_agreement_by_block_size_on_a_hand_made_pair(tmp_path):
    """Block 1000 (3 persons: size 1-9) and block 1001 (1 person): the other file gets one of block 1000's
    persons exactly, one in the right age group only (27 for 25), one wrong in sex, and block 1001's person
    in another block. Exact 1 of 4, binned 2 of 4; by size, all four are in blocks of 1-9."""
    from censusrecon.microdata.bureau import agreement_by_block_size

    truth = ["0,010730051031000,male,4,4,Y,N,N,N,N,N,N,,", "1,010730051031000,female,25,25 - 29,Y,N,N,N,N,N,N,,",
             "2,010730051031000,female,60,60 - 61,Y,N,N,N,N,N,N,,", "3,010730051031001,male,40,40 - 44,Y,N,N,N,N,N,N,,"]
    other = ["0,010730051031000,male,4,4,Y,N,N,N,N,N,N,,", "1,010730051031000,female,27,25 - 29,Y,N,N,N,N,N,N,,",
             "2,010730051031000,male,60,60 - 61,Y,N,N,N,N,N,N,,", "3,010730051031002,male,40,40 - 44,Y,N,N,N,N,N,N,,"]
    t = read_bureau_extract(_write(tmp_path / "t.csv", truth), age="single")
    o = read_bureau_extract(_write(tmp_path / "o.csv", other), age="single")
    rows = {r["block_size"]: r for r in agreement_by_block_size(t, o)}
    assert rows["all"] == {"block_size": "all", "persons": 4, "binned": 0.5, "exact": 0.25}
    assert rows["1-9"]["persons"] == 4 and rows["100+"]["persons"] == 0 and rows["100+"]["binned"] is None


def test_agreement_of_the_real_das_output_with_the_published_tables_records():
    """The 8 shipped tracts: the 2020 DAS run on 2010 data against the records of the published tables, by
    block size (the Bureau's 38 age groups; the paper's national figures are 8.0 / 18.2 / 27.3 / 38.5%)."""
    from censusrecon.microdata.bureau import agreement_by_block_size

    t = read_bureau_extract(SHIPPED / "rhdf_bt_0solvar_extract_8tracts.csv.gz", age="single")
    o = read_bureau_extract(SHIPPED / "rmdf_bt_0solvar_extract_8tracts.csv.gz", age="single")
    got = {r["block_size"]: (round(100 * r["binned"], 1), round(100 * r["exact"], 1)) for r in
           agreement_by_block_size(t, o)}
    assert got == {"1-9": (9.2, 3.4), "10-49": (21.4, 8.1), "50-99": (35.9, 12.4), "100+": (47.6, 24.4),
                   "all": (23.9, 9.8)}


def test_the_public_block_list_keeps_empty_blocks_and_refuses_a_missing_one(tmp_path):
    from censusrecon.microdata.geography import GeographyError

    (tmp_path / "blocks.csv").write_text("Block ID\n010730051031000\n10730051031001\n010730051031002\n"
                                         "380879650001002\n")
    d = read_bureau_extract(_write(tmp_path / "x.csv", ROWS), units_file=tmp_path / "blocks.csv")
    assert d.geography.listed("block", "010730051031002")  # nobody lives there: still on the list
    (tmp_path / "short.csv").write_text("Block ID\n010730051031000\n")
    with pytest.raises(GeographyError, match="has persons but is missing from the unit list"):
        read_bureau_extract(tmp_path / "x.csv", units_file=tmp_path / "short.csv")
    (tmp_path / "bad.csv").write_text("Block ID\n0107300510\n")
    with pytest.raises(BureauFileError, match="bad.csv row 2, column Block ID"):
        read_bureau_extract(tmp_path / "x.csv", units_file=tmp_path / "bad.csv")


@pytest.mark.slow(seconds=90)  # the DAS file's decision and table: test_the_das_config_runs_on_other_files_of_the_format
def test_the_real_das_output_and_our_topdown_are_evaluated_side_by_side(tmp_path, capsys):
    """configs/census/bureau_2010_das.yaml on two real tracts, cut small: the 2020 DAS output of the same persons
    read with the Bureau reader over the public block list (it has persons in blocks empty in 2010), attacked,
    and decided (a file cannot be audited, and its rows' risks cannot be measured on whole units); our TopDown at
    the production budget beside it (simulation noise: not for publication). The report's agreement table gives
    both by block size with the Bureau's national figures, and the DAS column is the file-level measure
    (agreement_by_block_size on the two extracts) of the same tracts."""
    from censusrecon.experiments.cli import main
    from censusrecon.experiments.release.decision import load_decision
    from censusrecon.microdata.bureau import agreement_by_block_size

    tracts = ["06037532400", "48427950105"]
    sets = [f"target.unit_ids={tracts}", "attack.runs=2", "attack.steps=30", "attack.rows=120", "grid_points=10",
            "release.audit.replay_pairs=1", "release.audit.replay_far=0"]  # the audit is not this test's subject
    status = main(["evaluate-release", str(ROOT / "configs" / "census" / "bureau_2010_das.yaml"), "--out",
                   str(tmp_path), "--no-progress", *[x for o in sets for x in ("--set", o)]])
    rel = next((tmp_path / "census_bureau_2010_das").iterdir()) / "release"
    decision = load_decision(rel)
    by_name = {m.mechanism: m for m in decision.mechanisms}
    assert set(by_name) == {"topdown", "file:das_2020"} and status == decision.exit_status() == 5
    das, ours = by_name["file:das_2020"], by_name["topdown"]
    assert das.audit.startswith("not applicable") and "whole units" in das.reasons[0]
    assert ours.action == "do_not_publish" and "simulation" in ours.reasons[0]
    report = (rel / "report.md").read_text()
    assert "Census Bureau's 2010 reconstruction extract" in report
    table = report[report.index("### Agreement of the published rows with D, by block size"):]
    lines = [line for line in table.splitlines() if line.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    assert header[3:] == ["topdown, ε = 12.3214: 38 age bins", "file:das_2020, as released: 38 age bins",
                          "Census Bureau, 2020 DAS, national (HDSR 2025): 38 age bins"]
    rows = {cells[0]: cells for cells in ([c.strip() for c in line.strip("|").split("|")] for line in lines[2:7])}
    assert list(rows) == ["1-9", "10-49", "50-99", "100+", "all"]
    assert [rows[k][5] for k in ("1-9", "10-49", "50-99", "100+")] == ["8.0%", "18.2%", "27.3%", "38.5%"]
    t = read_bureau_extract(SHIPPED / "rhdf_bt_0solvar_extract_8tracts.csv.gz", tracts=tracts)
    o = read_bureau_extract(SHIPPED / "rmdf_bt_0solvar_extract_8tracts.csv.gz", tracts=tracts)
    for r in agreement_by_block_size(t, o):
        assert rows[r["block_size"]][2] == str(r["persons"])
        assert rows[r["block_size"]][4] == f"{100 * r['binned']:.1f}%"
    assert all(rows[k][3].endswith("%") for k in rows)  # our TopDown's MDF measured in every class


def test_the_real_data_config_runs_unchanged_on_another_file_of_the_format(tmp_path, capsys):
    """--set data.path pointing at another file in the Bureau's format (here the DAS counterpart, Block IDs as
    Excel left them) runs configs/census/bureau_2010.yaml unchanged."""
    from censusrecon.experiments.cli import main

    other = SHIPPED / "rmdf_bt_0solvar_extract_8tracts.csv.gz"
    sets = [f"data.path={other}", "target.unit_ids=['06037532400']", "attack.runs=2", "attack.steps=20",
            "attack.rows=100", "grid_points=10", "attack.exact=false"]
    assert main(["run", str(ROOT / "configs" / "census" / "bureau_2010.yaml"), "--out", str(tmp_path),
                 "--no-progress", *[x for o in sets for x in ("--set", o)]]) == 0
    assert "rap_rank" in capsys.readouterr().out


def test_the_das_config_runs_on_other_files_of_the_format(tmp_path, capsys):
    """bureau_2010_das.yaml with every path given by --set: another extract (plain .csv), another block list and
    another DAS file (Block IDs as Excel left them), read from wherever they are; the table measures those files
    (the DAS column equals the file-level measure of the same tract)."""
    import gzip
    import shutil

    from censusrecon.experiments.cli import main
    from censusrecon.microdata.bureau import agreement_by_block_size

    for name in ("rhdf_bt_0solvar_extract_8tracts", "rmdf_bt_0solvar_extract_8tracts", "blocks_8tracts"):
        with gzip.open(SHIPPED / f"{name}.csv.gz") as src, open(tmp_path / f"{name[:4]}.csv", "wb") as dst:
            shutil.copyfileobj(src, dst)
    tract = "06037532400"
    sets = [f"data.path={tmp_path / 'rhdf.csv'}", f"data.units_file={tmp_path / 'bloc.csv'}",
            f"release.files=[{{name: das_2020, kind: microdata, path: '{tmp_path / 'rmdf.csv'}', made_with: the DAS}}]",
            "release.mechanisms=[]", f"target.unit_ids=['{tract}']", "attack.runs=2", "attack.steps=20",
            "attack.rows=100", "grid_points=10"]
    from censusrecon.experiments.release.decision import load_decision

    status = main(["evaluate-release", str(ROOT / "configs" / "census" / "bureau_2010_das.yaml"), "--out",
                   str(tmp_path / "out"), "--no-progress", *[x for o in sets for x in ("--set", o)]])
    rel = next((tmp_path / "out" / "census_bureau_2010_das").iterdir()) / "release"
    assert str(tmp_path / "rmdf.csv") in (rel / "ledger.json").read_text()
    # a file cannot be audited, and its rows' risks cannot be measured on whole units: never PUBLISH
    [das] = load_decision(rel).mechanisms
    assert das.mechanism == "file:das_2020" and das.audit.startswith("not applicable") and status != 0
    assert "whole units" in das.reasons[0]
    report = (rel / "report.md").read_text()
    table = report[report.index("### Agreement of the published rows with D, by block size"):]
    lines = [line for line in table.splitlines() if line.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    assert header[-2:] == ["file:das_2020, as released: 38 age bins",
                           "Census Bureau, 2020 DAS, national (HDSR 2025): 38 age bins"]
    rows = {cells[0]: cells for cells in ([c.strip() for c in line.strip("|").split("|")] for line in lines[2:7])}
    assert [rows[k][-1] for k in ("1-9", "10-49", "50-99", "100+")] == ["8.0%", "18.2%", "27.3%", "38.5%"]
    t = read_bureau_extract(tmp_path / "rhdf.csv", tracts=[tract])
    o = read_bureau_extract(tmp_path / "rmdf.csv", tracts=[tract])
    share = next(r for r in agreement_by_block_size(t, o) if r["block_size"] == "all")["binned"]
    assert rows["all"][-2] == f"{100 * share:.1f}%"
