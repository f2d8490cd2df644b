"""A release made outside censusrecon: its tables file checked against the declared layout, read
into the workload's order, and evaluated beside the tool's own mechanisms."""

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from censusrecon.experiments.cli import main
from censusrecon.experiments.config import ConfigError, load_config
from censusrecon.experiments.problem import load_population, occupied_units, resolve, select_units
from censusrecon.experiments.release.files import read_release_files, template, unit_layout
from censusrecon.microdata.example import write_agency_example
from censusrecon.synth.release import workload_counts

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "configs" / "agency" / "own_release.yaml"
SMALL = ["attack.runs=2", "attack.steps=20", "attack.rows=60", "target.units=2", "grid_points=10",
         "release.epsilons=[2.0]", "release.audit.runs=5000", "release.audit.whole_releases=20",
         "release.audit.replay_pairs=2", "release.audit.replay_far=1", "release.programs=[]",
         "release.mechanisms=[laplace_tables]", "release.audit.units=all", "release.audit.backend=local"]


@pytest.fixture(scope="module")
def agency(tmp_path_factory):
    d = tmp_path_factory.mktemp("own")
    persons, blocks = write_agency_example(d / "inputs")
    over = SMALL + [f"data.path={persons}", f"data.units_file={blocks}"]
    cfg = load_config(CONFIG, over + [f"release.files=[{{name: x, path: {d / 'none.csv'}}}]"])
    pop = load_population(cfg)
    units, _ = occupied_units(pop, cfg, select_units(pop, cfg))
    truth = template(resolve(cfg, pop), units)
    for u in units:  # the exact counts of every row, through each row's query
        lay = unit_layout(resolve(cfg, pop), u, True)
        exact = workload_counts(resolve(cfg, pop).prepare(u, True, pad_blocks=False).private, lay.workload)
        truth.loc[truth["unit"] == u, "value"] = exact[lay.rows["query"].to_numpy()]
    return d, over, truth, units


def _write(d: Path, df: pd.DataFrame, name: str) -> Path:
    path = d / name
    df.to_csv(path, index=False)
    return path


def _cfg(over, *files):
    specs = ", ".join(f"{{name: {n}, path: {p}, epsilon: {e}}}" for n, p, e in files)
    return load_config(CONFIG, over + [f"release.files=[{specs}]"])


def test_every_row_maps_to_its_query_and_copies_of_one_query_are_averaged(agency):
    d, over, truth, units = agency
    cfg = _cfg(over, ("exact", _write(d, truth, "exact.csv"), "null"))
    pop = load_population(cfg)
    files = read_release_files(resolve(cfg, pop), units)
    tf = files[("file:exact", 0.0)]
    for u in units:  # the exact file reads back as the exact counts, in the workload's order
        lay = tf.layouts[(u, True)]
        exact = workload_counts(resolve(cfg, pop).prepare(u, True, pad_blocks=False).private, lay.workload)
        assert np.array_equal(tf.counts(u, lay), exact)
    # a table published twice (ALL, a second block total) is two measurements of each block's total query:
    # hand-made copies 10 and 14 of one of them read as 12
    twice = over + ["queries={kind: tables, tables: [{name: TOTAL, level: block, by: []}, {name: ALL, level: block, "
                    "by: []}, {name: SEX_BY_AGE, level: block, by: [SEX]}]}"]
    cfg2 = _cfg(twice, ("exact", d / "none.csv", "null"))
    lay = unit_layout(resolve(cfg2, pop), units[0], True)
    dup = lay.rows[lay.rows.duplicated("query", keep=False)]
    assert set(dup["table"]) == {"TOTAL", "ALL"} and len(dup) == 2 * (lay.rows["table"] == "TOTAL").sum()
    rows = template(resolve(cfg2, pop), units)
    rows["value"] = 1.0
    q = dup["query"].iloc[0]
    for v, (_, r) in zip((10.0, 14.0), dup[dup["query"] == q].iterrows()):
        rows.loc[(rows["unit"] == units[0]) & (rows["table"] == r["table"]) & (rows["geography"] == r["geography"]),
                 "value"] = v
    cfg2 = _cfg(twice, ("dup", _write(d, rows, "dup.csv"), "null"))
    tf2 = read_release_files(resolve(cfg2, pop), units)[("file:dup", 0.0)]
    got = tf2.counts(units[0], tf2.layouts[(units[0], True)])
    assert got[q] == 12.0 and np.all(np.delete(got, q) == 1.0)


def test_the_example_agencys_own_pipeline_writes_the_layout_the_tool_reads(agency):
    """Made by separate code (pandas, microdata.example), with noise too small to move a count: it reads
    back as the exact tables of every unit evaluated, and its other tracts' rows are skipped."""
    from censusrecon.microdata.example import write_agency_release

    d, over, truth, units = agency
    path = write_agency_release(d / "inputs", epsilon=1e9, force=True)
    cfg = _cfg(over, ("agency", path, 1e9))
    pop = load_population(cfg)
    tf = read_release_files(resolve(cfg, pop), units)[("file:agency", 1e9)]
    for u in units:
        lay = tf.layouts[(u, True)]
        exact = workload_counts(resolve(cfg, pop).prepare(u, True, pad_blocks=False).private, lay.workload)
        assert np.array_equal(tf.counts(u, lay), exact)
    assert tf.skipped > 0  # six tracts in the file, two evaluated


def test_a_variant_without_block_reads_each_cell_as_the_sum_of_its_blocks(agency):
    d, over, truth, units = agency
    cfg = _cfg(over + ["target.with_block=[true, false]"], ("exact", _write(d, truth, "exact2.csv"), "null"))
    pop = load_population(cfg)
    tf = read_release_files(resolve(cfg, pop), units)[("file:exact", 0.0)]
    lay = tf.layouts[(units[0], False)]
    exact = workload_counts(resolve(cfg, pop).prepare(units[0], False, pad_blocks=False).private, lay.workload)
    assert np.array_equal(tf.counts(units[0], lay), exact)


@pytest.mark.parametrize("edit, says", [
    (lambda df: df.drop(index=5), r"no row for unit .*, TOTAL cell 1 \('Total'\), geography .*"),
    (lambda df: df.assign(label=df["label"].where(df.index != 3, "Totl")), r"line 5: label 'Totl' is not the label"),
    (lambda df: df.assign(unit=df["unit"].where(df.index != 7, "99:999:999999")),
     r"line 9: unit '99:999:999999' is not a tract of the data"),
    (lambda df: df.assign(table=df["table"].where(df.index != 2, "P99")), r"line 4: table 'P99' is not a published"),
    (lambda df: df.assign(cell=df["cell"].where(df.index != 2, 999)), r"line 4: cell 999 is not a cell of table TOTAL"),
    (lambda df: df.assign(value=df["value"].astype(object).where(df.index != 6, "n/a")),
     r"line 8: value 'n/a' is not a finite number"),
    (lambda df: pd.concat([df, df.iloc[[4]]], ignore_index=True), r"repeats line 6"),
    (lambda df: df.assign(geography=df["geography"].where(df.index != 1, "nowhere")),
     r"line 3: geography 'nowhere' is not where TOTAL cell 1"),
    (lambda df: df.drop(columns="value"), r"no column 'value'"),
    (lambda df: df.assign(cell=df["cell"].astype(object).where(df.index != 4, "2.5")), r"line 6: cell '2.5' is not a"),
])
def test_a_file_that_does_not_fit_is_a_one_line_error_naming_file_row_and_value(agency, edit, says):
    d, over, truth, units = agency
    path = _write(d, edit(truth.copy()), "bad.csv")
    cfg = _cfg(over, ("bad", path, 1.0))
    with pytest.raises(ConfigError, match=says) as e:
        read_release_files(resolve(cfg, load_population(cfg)), units)
    assert "\n" not in str(e.value) and str(path) in str(e.value)


def test_a_parquet_file_with_float_cell_numbers_reads_as_the_csv_does(agency):
    d, over, truth, units = agency
    path = d / "exact.parquet"
    truth.assign(cell=truth["cell"].astype(float)).to_parquet(path)
    cfg = _cfg(over, ("pq", path, "null"))
    pop = load_population(cfg)
    tf = read_release_files(resolve(cfg, pop), units)[("file:pq", 0.0)]
    lay = tf.layouts[(units[0], True)]
    exact = workload_counts(resolve(cfg, pop).prepare(units[0], True, pad_blocks=False).private, lay.workload)
    assert np.array_equal(tf.counts(units[0], lay), exact)


def test_release_files_need_whole_units_and_a_tables_workload():
    with pytest.raises(ConfigError, match="set target.whole_units: true"):
        load_config(ROOT / "configs" / "release_tiny.yaml", ["release.files=[{name: a, path: a.csv}]"])
    with pytest.raises(ConfigError, match="one release at several ε: each needs its own epsilon"):
        load_config(CONFIG, ["release.files=[{name: a, path: a.csv, epsilon: 1}, {name: a, path: b.csv}]"])


def test_a_file_is_evaluated_beside_the_tools_own_release_with_its_table_error_and_verdict(agency, capsys):
    d, over, truth, units = agency
    rng = np.random.default_rng(0)
    noise = rng.choice([-2.0, 2.0], size=len(truth))  # every cell off by exactly 2: table error 2 per cell
    noisy = truth.assign(value=truth["value"] + noise)
    exact, noisy_path = _write(d, truth, "exact3.csv"), _write(d, noisy, "noisy.csv")
    persons = d / "inputs" / "persons.csv"  # the persons themselves as a microdata release: its tables are exact
    specs = f"release.files=[{{name: unprotected, path: {exact}}}, {{name: agency, path: {noisy_path}, epsilon: 1, " \
            f"made_with: 'numpy, noise of plus or minus 2'}}, {{name: rows, kind: microdata, path: {persons}}}]"
    # a tolerance in persons: on these 2 units the persons excess on the exact tables is beyond the best guess (the
    # shares, 1 degree of freedom, are not), so every release gets a verdict line; the measure has its own tests
    sets = [x for o in over + [specs, "release.mechanisms=[laplace_tables, cell_key, targeted_swapping]",
                               "release.cell_key.variances=[1.0]", "release.targeted_swap.rates=[0.1]",
                               "release.tolerance.per_unit=2"]
            for x in ("--set", o)]
    status = main(["evaluate-release", str(CONFIG), "--out", str(d / "results"), "--no-progress", *sets])
    said = capsys.readouterr().out
    rel = next((d / "results" / "agency_own_release").iterdir()) / "release"
    from censusrecon.experiments.release.decision import load_decision

    decision = load_decision(rel)  # laplace_tables on the simulation backend, cell key and swapping not DP
    assert status == decision.exit_status() == 5 and "file:agency" in said and "file:unprotected" in said
    files = {m.mechanism: m for m in decision.mechanisms if m.mechanism.startswith("file:")}
    assert all(m.audit.startswith("not applicable") and m.fit_for_publication is None for m in files.values())
    assert any("a file cannot be audited" in c for c in files["file:agency"].caveats)
    util = pd.read_parquet(rel / "utility.parquet")
    published = util[~util["table"].isin(["block totals", "unit total"])]
    by = published.groupby("mechanism").apply(lambda g: (g["mae_per_cell"] * g["cells"]).sum() / g["cells"].sum())
    assert by["file:unprotected"] == 0.0 and by["file:rows"] == 0.0 and by["file:agency"] == pytest.approx(2.0)
    ledger = json.loads((rel / "ledger.json").read_text())["entries"]
    entry = next(e for e in ledger if e["mechanism"] == "file:agency")
    assert entry["declared_epsilon"] == 1.0 and entry["epsilon"] is None and len(entry["sha256"]) == 64
    ck = next(e for e in ledger if e["mechanism"] == "cell_key")  # not DP: noted, never in a budget
    assert ck["epsilon"] is None and ck["ptable_variance"] == 1.0 and 0 < ck["cells_perturbed"] < 1
    ts = [e for e in ledger if e["mechanism"] == "targeted_swapping"]
    assert ts and all(e["epsilon"] is None and e["records_at_risk"] > 0 and e["records_swapped"] > 0 for e in ts)
    persons = pd.read_parquet(rel / "persons.parquet")
    assert {"file:agency", "file:unprotected", "file:rows", "laplace_tables", "cell_key", "targeted_swapping",
            "exact"} <= set(persons["mechanism"])
    report = (rel / "report.md").read_text()
    assert "Releases made outside censusrecon" in report and "ε = 1 (declared)" in report
    assert "every person of each unit" in report and "a file cannot be audited" in report
    assert "ptable variance 1" in report and "not applicable" in report
    audits = json.loads((rel / "audit.json").read_text())
    assert {a["mechanism"] for a in audits} == {"laplace_tables"}  # the tool's own release, on whole units


def test_a_microdata_file_is_read_with_the_person_files_codes_and_tabulated(agency, tmp_path):
    d, over, truth, units = agency
    persons = pd.read_csv(d / "inputs" / "persons.csv", dtype=str)
    path = tmp_path / "synthetic.csv"
    persons.to_csv(path, index=False)  # the persons themselves, published as they are: tables exact
    cfg = load_config(CONFIG, over + [f"release.files=[{{name: rows, kind: microdata, path: {path}}}]"])
    pop = load_population(cfg)
    mf = read_release_files(resolve(cfg, pop), units)[("file:rows", 0.0)]
    from censusrecon.experiments.release.files import file_published

    lay = unit_layout(resolve(cfg, pop), units[0], True)
    pub = file_published("file:rows", mf, units[0], True, lay.workload)
    exact = workload_counts(resolve(cfg, pop).prepare(units[0], True, pad_blocks=False).private, lay.workload)
    whole = resolve(cfg, pop).prepare(units[0], True, pad_blocks=False).private
    assert np.array_equal(pub.counts, exact) and len(pub.rows) == len(whole) > 0
    bad = persons.copy()
    bad.loc[3, "race"] = "Martian"
    bad.to_csv(path, index=False)
    with pytest.raises(ConfigError, match=f"release file 'rows' \\(microdata\\): {path} row 5, column race: 'Martian'"):
        read_release_files(resolve(cfg, pop), units)
    persons[persons["tract"] != units[0].split(":")[-1]].to_csv(path, index=False)
    with pytest.raises(ConfigError, match=f"has no persons in tract {units[0]}"):
        read_release_files(resolve(cfg, pop), units)
