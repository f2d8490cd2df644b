import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from censusrecon.microdata.acs import ACSDataError, Binning, read_folktables, read_nist
from tests.acs_fixture import make_acs_root, make_nist_file

SHARED = Path(__file__).resolve().parents[2] / "microdata" / "data" / "acs_nist_2018"  # shipped


def test_binning_is_equal_width_and_clips_to_the_end_bins():
    b = Binning(0, 100, 10)
    assert b.codes(np.array([-5, 0, 9.99, 10, 99, 100, 250])).tolist() == [0, 0, 0, 1, 9, 9, 9]
    with pytest.raises(ACSDataError):
        Binning(5, 5)


@pytest.mark.parametrize("task,target", [("employment", "ESR"), ("coverage", "PUBCOV"), ("mobility", "MIG")])
def test_folktables_tasks_on_the_generated_fixture(tmp_path, task, target):
    import folktables

    root = make_acs_root(tmp_path)
    d = read_folktables(root, ["CA", "TX"], task)
    problem = getattr(folktables, {"employment": "ACSEmployment", "coverage": "ACSPublicCoverage",
                                   "mobility": "ACSMobility"}[task])
    expected = [f for f in problem.features if f != "ST"] + [target]
    assert list(d.domain.names) == expected
    raw = pd.concat([pd.read_csv(p) for p in sorted((root / "2018" / "1-Year").glob("*.csv"))], ignore_index=True)
    assert len(d) == len(problem._preprocess(raw))  # folktables' own row filter
    assert d.domain.attribute(target).values == ("False", "True")
    assert d.domain.size("AGEP") == 10  # AGEP binned
    assert d.geography.levels == ("national", "state", "puma")
    assert set(d.geography.unit_ids("state")) == {"06", "48"}
    # categories are the union over states: race code 9 occurs only in TX
    assert "9" in d.domain.attribute("RAC1P").values


def test_folktables_nulls_are_their_own_category(tmp_path):
    d = read_folktables(make_acs_root(tmp_path), ["CA"], "employment", include_target=False)
    assert "ESR" not in d.domain.names
    schl = d.domain.attribute("SCHL")
    assert schl.values[-1] == "N/A"
    age_bin = d.column("AGEP")
    # persons under 3 have no schooling value: they are exactly the N/A rows
    assert ((d.column("SCHL") == schl.size - 1) == (age_bin == 0) & (d.column("SCHL") == schl.size - 1)).all()


def test_folktables_missing_file_names_it_and_the_layout(tmp_path):
    make_acs_root(tmp_path, states=("CA",))
    with pytest.raises(ACSDataError, match=r"psam_p48\.csv.*root/<year>/<horizon>/psam_p<FIPS>\.csv"):
        read_folktables(tmp_path, ["CA", "TX"], "employment")
    with pytest.raises(ACSDataError, match="unknown ACS task"):
        read_folktables(tmp_path, ["CA"], "income")


def test_folktables_2019_relshipp_is_renamed(tmp_path):
    root = make_acs_root(tmp_path, year=2019, relshipp=True)
    d = read_folktables(root, ["CA"], "employment", year=2019)
    assert "RELP" in d.domain.names


def test_nist_format_reader_on_a_generated_file(tmp_path):
    path = make_nist_file(tmp_path / "x2018.csv")
    d = read_nist(path)
    assert d.domain.names == ("AGEP", "SEX", "MSP", "NOC", "PINCP")  # PUMA is geography, PWGTP a weight
    assert d.domain.attribute("MSP").values == ("1", "2", "3", "4", "5", "6", "N/A")
    assert d.domain.attribute("NOC").values[:2] == ("0", "1") and d.domain.size("NOC") == 21
    assert d.domain.size("PINCP") == 11  # 10 bins and N/A
    assert d.geography.parent("puma", "48-00201", "state") == "48"
    with pytest.raises(ACSDataError, match="does not exist"):
        read_nist(tmp_path / "nope.csv")
    with pytest.raises(ACSDataError, match="lacks columns \\['DEAR'\\]|not in the data dictionary"):
        read_nist(path, attributes=["AGEP", "DEAR"])


def test_nist_shipped_excerpts():
    d = read_nist(SHARED / "national2018.csv")
    assert len(d) == 27111
    assert len(d.geography.unit_ids("puma")) == 20 and len(d.geography.unit_ids("state")) == 16
    assert len(read_nist(SHARED / "ma2018.csv")) == 7244
    assert len(read_nist(SHARED / "tx2018.csv")) == 8775


def _add_person(csv: Path, **values) -> None:
    """Append one person to a PUMS file: a copy of its first adult with ``values`` changed."""
    df = pd.read_csv(csv)
    person = df[(df["AGEP"] >= 30) & (df["AGEP"] <= 60)].iloc[[0]].copy()
    for k, v in values.items():
        person[k] = v
    pd.concat([df, person], ignore_index=True).to_csv(csv, index=False)


@pytest.mark.parametrize("task", ["employment", "coverage", "mobility"])
def test_adding_one_person_changes_no_acs_domain(tmp_path, task):
    """Domains come from the PUMS dictionary, not from the values present: a person with a race
    code nobody else has and nulls where nobody else has one leaves every attribute's categories
    (and so every table's shape) as they were."""
    root = make_acs_root(tmp_path, states=("CA",))
    csv = root / "2018" / "1-Year" / "psam_p06.csv"
    df = pd.read_csv(csv)
    df["RAC1P"] = np.minimum(df["RAC1P"], 8)  # nobody has race code 9
    df["ESP"] = df["ESP"].fillna(1)  # nobody has a null ESP, COW or GCL
    df["COW"] = df["COW"].fillna(1)
    df["GCL"] = df["GCL"].fillna(1)
    df.to_csv(csv, index=False)
    before = read_folktables(root, ["CA"], task)
    _add_person(csv, AGEP=30, RAC1P=9, ESP=np.nan, COW=np.nan, GCL=np.nan, PINCP=1000)
    after = read_folktables(root, ["CA"], task)
    assert len(after) == len(before) + 1
    assert after.domain == before.domain
    assert before.domain.attribute("RAC1P").values == tuple(str(v) for v in range(1, 10))
    assert before.domain.attribute("ESP").values[-1] == "N/A"  # declared, though nobody was N/A
    assert "N/A" not in before.domain.attribute("SEX").values  # SEX has no N/A code


def test_acs_values_outside_the_dictionary_name_file_row_column_and_value(tmp_path):
    root = make_acs_root(tmp_path, states=("CA",))
    csv = root / "2018" / "1-Year" / "psam_p06.csv"
    _add_person(csv, RAC1P=12)
    with pytest.raises(ACSDataError, match=r"row \d+, column RAC1P: '12' is not one of the values"):
        read_folktables(root, ["CA"], "employment")
    root = make_acs_root(tmp_path / "b", states=("CA",))
    csv = root / "2018" / "1-Year" / "psam_p06.csv"
    _add_person(csv, SEX=np.nan)
    with pytest.raises(ACSDataError, match="column SEX: a null value, but the column's declared domain has no N/A"):
        read_folktables(root, ["CA"], "employment")


def test_nist_domains_come_from_the_dictionary(tmp_path):
    path = make_nist_file(tmp_path / "x2018.csv")
    df = pd.read_csv(path, dtype=str, keep_default_na=False)
    df.loc[df["MSP"] == "N", "MSP"] = "1"  # nobody N/A in MSP: the dictionary still lists N
    df.to_csv(path, index=False)
    d = read_nist(path)
    assert d.domain.attribute("MSP").values == ("1", "2", "3", "4", "5", "6", "N/A")
    bigger = pd.concat([df, df.iloc[[0]].assign(MSP="N")], ignore_index=True)
    bigger.to_csv(path, index=False)
    assert read_nist(path).domain == d.domain
    spec = json.loads((tmp_path / "data_dictionary.json").read_text())
    spec["SEX"] = {"description": "no codes listed"}
    (tmp_path / "data_dictionary.json").write_text(json.dumps(spec))
    with pytest.raises(ACSDataError, match="column SEX: no declared domain"):
        read_nist(path)
