"""The snags a new user met between the README and a report: each ends in the one-line message or
the behaviour the user needs."""

import shutil
from pathlib import Path

import pytest

from censusrecon.experiments.cli import main
from censusrecon.experiments.config import ConfigError, load_config, parse_config
from censusrecon.experiments.problem import load_population, resolve, select_units
from censusrecon.microdata.example import write_agency_example

ROOT = Path(__file__).resolve().parents[2]


def _one_line_error(capsys, argv, code=2) -> str:
    assert main(argv) == code
    err = capsys.readouterr().err.strip()
    assert err.startswith("censusrecon: error:") and "\n" not in err and "please report" not in err, err
    return err


def test_target_units_all_and_too_many(root):
    cfg = load_config(root / "configs" / "tiny.yaml", ["target.units=all"])
    pop = load_population(cfg)
    every = select_units(pop, cfg)
    assert len(every) == len(set(pop.geography.units("tract").tolist()))  # every tract of at least min_rows
    cfg = load_config(root / "configs" / "tiny.yaml", [f"target.units={len(every) + 1}"])
    with pytest.raises(ConfigError, match=f"asks for {len(every) + 1} tracts, but the data has only {len(every)}.*"
                                          "units: all"):
        select_units(pop, cfg)


def test_output_paths_and_results_paths_are_user_errors(tmp_path, capsys, root):
    cfg = str(root / "configs" / "tiny.yaml")
    (tmp_path / "afile").write_text("x")
    assert "is a file" in _one_line_error(capsys, ["run", cfg, "--out", str(tmp_path / "afile")])
    assert "cannot be created" in _one_line_error(capsys, ["run", cfg, "--out", str(tmp_path / "afile" / "x")])
    err = _one_line_error(capsys, ["plot", str(tmp_path / "nowhere")])
    assert "does not exist" in err and "match_rate.parquet" not in err
    assert "not a finished results directory" in _one_line_error(capsys, ["report", str(tmp_path)])


def test_validation_messages_have_no_library_prefix():
    with pytest.raises(ConfigError) as e:
        parse_config({"name": "x", "target": {"with_block": []}})
    assert "Value error" not in str(e.value) and "target.with_block needs at least one value" in str(e.value)


def test_a_semicolon_csv_gets_a_delimiter_hint(agency_queries, tmp_path, capsys):
    persons = tmp_path / "inputs" / "persons.csv"
    persons.write_text(persons.read_text().replace(",", ";"))
    err = _one_line_error(capsys, agency_queries)
    assert "semicolons" in err and "persons.csv" in err


def test_relative_data_paths_are_read_from_the_configs_folder(tmp_path, monkeypatch, capsys):
    write_agency_example(tmp_path / "project" / "inputs")
    (tmp_path / "project" / "configs").mkdir()
    cfg = tmp_path / "project" / "configs" / "mine.yaml"
    shutil.copy(ROOT / "configs" / "agency" / "example.yaml", cfg)
    text = cfg.read_text().replace("../../inputs/agency/", "../inputs/")
    cfg.write_text(text)
    monkeypatch.chdir(tmp_path)  # anywhere but the config's folder
    assert main(["queries", str(cfg)]) == 0
    assert "distinct queries" in capsys.readouterr().out
    # a path given with --set is read like the same key in the file: from the config's folder
    monkeypatch.chdir(tmp_path / "project")
    assert main(["queries", str(cfg), "--set", "data.path=../inputs/persons.csv"]) == 0
    capsys.readouterr()
    # one that exists only from where the command runs is an error naming what to write, never read in silence
    assert main(["queries", str(cfg), "--set", "data.path=inputs/persons.csv"]) == 2
    err = capsys.readouterr().err
    assert "read from the config's folder" in err and "data.path=../inputs/persons.csv" in err
    loaded = load_config(cfg)
    assert loaded.data.path == "../inputs/persons.csv"  # the hash does not depend on where the clone lives
    assert loaded.digest() == load_config(cfg).digest()


def test_a_config_copied_elsewhere_says_where_its_paths_are_read_from(tmp_path, capsys):
    """The review's snag: a copied config failed with "person file '…/../../inputs/agency/persons.csv' does not
    exist", not saying that relative paths are read from the config's folder."""
    shutil.copy(ROOT / "configs" / "agency" / "example.yaml", tmp_path / "mine.yaml")
    err = _one_line_error(capsys, ["queries", str(tmp_path / "mine.yaml")])
    assert "data.path: '../../inputs/agency/persons.csv' does not exist" in err
    assert f"read from the config's folder ({tmp_path.resolve()})" in err and "absolute one" in err


def test_unknown_keys_and_values_get_the_closest_one(capsys):
    cfg = str(ROOT / "configs" / "release_demo.yaml")
    assert "unknown key 'release.epsilon' (did you mean 'epsilons'?)" in _one_line_error(
        capsys, ["audit", cfg, "--set", "release.epsilon=[1.0]"])
    assert "unknown key 'release.audit.rusn' (did you mean 'runs'?)" in _one_line_error(
        capsys, ["audit", cfg, "--set", "release.audit.rusn=5"])
    assert "got 'opendpp' (did you mean 'opendp'?)" in _one_line_error(
        capsys, ["audit", cfg, "--set", "release.backend=opendpp"])
    err = _one_line_error(capsys, ["audit", cfg, "--set", "release.nothing_like_it=1"])
    assert "unknown key 'release.nothing_like_it'" in err and "did you mean" not in err


def test_a_yaml_error_points_at_the_line_that_is_wrong(tmp_path, capsys):
    """A key without its colon: YAML's parser notices on the next line; the message names the key's own line."""
    text = (ROOT / "configs" / "tiny.yaml").read_text().splitlines()
    i = next(k for k, line in enumerate(text) if line.startswith("seed:"))
    text[i] = text[i].replace("seed:", "seed")
    (tmp_path / "bad.yaml").write_text("\n".join(text) + "\n")
    err = _one_line_error(capsys, ["run", str(tmp_path / "bad.yaml")])
    assert f"at line {i + 1} ('{text[i].strip()}')" in err and "without its ':'" in err, err


def test_the_install_is_quiet_about_the_licence(root):
    """setuptools warned twice per install that `license = {text = ...}` is deprecated: an SPDX string, with the
    setuptools that reads it (77 and later) required to build."""
    import tomllib

    project = tomllib.loads((root / "pyproject.toml").read_text())
    assert isinstance(project["project"]["license"], str)
    assert any(r.replace(" ", "").startswith("setuptools>=") and
               tuple(int(x) for x in r.split(">=")[1].split(".")[:1]) >= (77,)
               for r in project["build-system"]["requires"])


@pytest.fixture
def agency_queries(tmp_path):
    """`censusrecon queries` on the worked example's config and files, as argv up to the overrides."""
    persons, blocks = write_agency_example(tmp_path / "inputs")
    return ["queries", str(ROOT / "configs" / "agency" / "example.yaml"),
            "--set", f"data.path={persons}", "--set", f"data.units_file={blocks}"]


def test_table_groups_that_leave_values_out_or_overlap_are_errors(agency_queries, capsys):
    gap = "queries.tables=[{name: T, level: block, by: [{AGE: [[0, 17], [18, 64]]}]}]"
    err = _one_line_error(capsys, [*agency_queries, "--set", gap])
    assert "AGE groups leave out 65-115" in err and "partial: true" in err
    overlap = "queries.tables=[{name: T, level: block, by: [{AGE: [[0, 17], [17, 115]]}]}]"
    assert "AGE value 17 is in two groups" in _one_line_error(capsys, [*agency_queries, "--set", overlap])
    declared = "queries.tables=[{name: T, level: block, partial: true, by: [{AGE: [[0, 17], [18, 64]]}]}]"
    assert main([*agency_queries, "--set", declared]) == 0


def test_a_redistricting_ppmf_without_qage_names_its_file(capsys):
    data = ROOT / "microdata" / "data" / "ppmf_perry_al" / "ppmf_perry_county_al.csv"  # shipped
    err = _one_line_error(capsys, ["queries", str(ROOT / "configs" / "census" / "tracts.yaml"), "--set",
                                   "data.source=ppmf", "--set", f"data.path={data}"])
    assert "QAGE" in err and "ppmf_perry_county_al.csv" in err


def test_no_progress_bar_off_a_terminal_but_a_line_per_audit(capsys, root):
    """The audit's bar (and every other) stays off when stderr is not a terminal, as under pytest; the audit
    still says what it does: a line per mechanism and ε, with the time left; nothing with progress off."""
    from censusrecon.experiments.release.audit import audit_release

    cfg = load_config(root / "configs" / "release_tiny.yaml", ["release.audit.runs=2000", "release.epsilons=[1.0, 4.0]",
                                                               "release.mechanisms=[laplace_tables]"])
    audit_release(resolve(cfg), progress=True)
    err = capsys.readouterr().err
    assert "\r" not in err and "audit: 2 (mechanism, ε) pairs" in err
    assert "[1/2 audits] laplace_tables at ε = 1 done" in err and "s left)" in err
    assert "[2/2 audits] laplace_tables at ε = 4 done" in err
    audit_release(resolve(cfg), progress=False)
    assert capsys.readouterr().err == ""


def test_county_tables_are_evaluated_by_attacking_whole_counties(agency_queries, capsys):
    county = "queries.tables=[{name: P1, level: block, by: []}, {name: SEX_COUNTY, level: county, by: [SEX]}]"
    err = _one_line_error(capsys, [*agency_queries, "--set", county])
    assert "coarser than the target level 'tract'" in err and "set target.level: county" in err
    # as the message says: whole counties, their blocks as BLOCK, the county's own table published once
    assert main([*agency_queries, "--set", county, "--set", "target.level=county", "--set", "target.units=2",
                 "--set", "baselines=[state, chance]", "--json"]) == 0
    rows = [__import__("json").loads(x) for x in capsys.readouterr().out.splitlines()]
    assert len(rows) == 2 and all(r["cells_per_table"]["SEX_COUNTY"] == 2 for r in rows)
    assert all(r["cells_per_table"]["P1"] == r["num_blocks"] > 0 for r in rows)


def test_tables_per_tract_inside_a_county_target_are_published_per_tract(agency_queries, capsys, tmp_path):
    """An agency publishing block, tract and county tables evaluates them together: whole counties
    attacked, each tract's table over its listed blocks (empty ones included)."""
    tables = ("queries.tables=[{name: P1, level: block, by: []}, {name: SEX_TRACT, level: tract, by: [SEX]}, "
              "{name: SEX_COUNTY, level: county, by: [SEX]}]")
    assert main([*agency_queries, "--set", tables, "--set", "target.level=county", "--set", "target.units=2",
                 "--set", "baselines=[state, chance]", "--json"]) == 0
    rows = [__import__("json").loads(x) for x in capsys.readouterr().out.splitlines()]
    listed = __import__("pandas").read_csv(tmp_path / "inputs" / "blocks.csv", dtype=str)
    assert set(listed.groupby(["st", "cty"])["tract"].nunique()) == {3}  # the public list: 3 tracts a county
    assert len(rows) == 2
    for r in rows:
        assert r["cells_per_table"]["SEX_COUNTY"] == 2 and r["cells_per_table"]["P1"] == r["num_blocks"]
        assert r["cells_per_table"]["SEX_TRACT"] == 2 * 3


def test_example_data_never_replaces_a_users_file(tmp_path, capsys):
    """A folder already holding the user's persons.csv: the command stops, both files stay byte for
    byte, and nothing else is written; --force replaces them."""
    d = tmp_path / "mydir"
    d.mkdir()
    mine = b"id,age\n1,40\n"
    (d / "persons.csv").write_bytes(mine)
    err = _one_line_error(capsys, ["example-data", str(d)])
    assert "persons.csv exists" in err and "--force" in err and "nothing was written" in err
    assert (d / "persons.csv").read_bytes() == mine and sorted(p.name for p in d.iterdir()) == ["persons.csv"]
    assert main(["example-data", str(d), "--force"]) == 0
    assert (d / "persons.csv").read_bytes() != mine and (d / "blocks.csv").exists()
    assert (d / "agency_tables.csv").exists()  # the example agency's own release
    e = tmp_path / "other"  # a user's release file of that name: stopped before anything is written
    e.mkdir()
    (e / "agency_tables.csv").write_bytes(mine)
    err = _one_line_error(capsys, ["example-data", str(e)])
    assert "agency_tables.csv exists" in err and sorted(p.name for p in e.iterdir()) == ["agency_tables.csv"]


def test_a_failed_run_leaves_nothing_behind_and_keeps_finished_work(tmp_path, capsys, monkeypatch):
    """A run or release evaluation that fails before finishing anything leaves no folder; one that had
    finished files keeps them and says where (a rerun resumes from them)."""
    import censusrecon.experiments.release.evaluate as release
    import censusrecon.experiments.runner as runner

    def boom(*a, **k):
        raise RuntimeError("disk on fire")

    out = tmp_path / "results"
    monkeypatch.setattr(runner, "code_fingerprint", boom)
    assert main(["run", str(ROOT / "configs" / "tiny.yaml"), "--out", str(out), "--no-progress"]) == 1
    monkeypatch.setattr(release, "Ledger", boom)
    assert main(["evaluate-release", str(ROOT / "configs" / "release_tiny.yaml"), "--out", str(out),
                 "--no-progress"]) == 1
    import censusrecon.experiments.sweep as sweep

    monkeypatch.setattr(sweep, "plan_tasks", lambda cfg: [])
    monkeypatch.setattr(sweep, "code_fingerprint", boom)
    assert main(["sweep", str(ROOT / "configs" / "tiny.yaml"), "--out", str(out), "--no-progress"]) == 1
    assert list(out.iterdir()) == []
    capsys.readouterr()
    # finished work is kept and named
    from censusrecon.experiments.results import nothing_half_made

    kept = out / "x" / "y"
    with pytest.raises(RuntimeError), nothing_half_made(kept):
        (kept / "units").mkdir(parents=True)
        (kept / "units" / "a.parquet").write_text("done")
        boom()
    assert (kept / "units" / "a.parquet").exists() and "1 finished file(s) kept" in capsys.readouterr().err
