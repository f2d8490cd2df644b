"""The `table` source: any person file with declared columns, codes and geography, checked value by value."""

import numpy as np
import pandas as pd
import pytest

from censusrecon.microdata.table_source import ColumnSpec, DataFileError, read_table, read_units

GEO = [("state", "st"), ("county", "cty"), ("tract", "tract"), ("block", "blk")]
ATTRS = {"AGE": ColumnSpec("AGE", "age", range=(0, 115)), "SEX": ColumnSpec("SEX", "sex", ("M", "F")),
         "RACE": ColumnSpec("RACE", "race", ("W", "B", "2+"))}


def _persons(tmp_path, rows=None, name="persons.csv"):
    rows = rows or [
        ["01", "001", "000100", "1001", "34", "F", "W"],
        ["01", "001", "000100", "1001", "7", "M", "B"],
        ["01", "001", "000100", "1002", "80", "F", "2+"],
        ["01", "001", "000200", "1001", "51", "M", "W"],
    ]
    df = pd.DataFrame(rows, columns=["st", "cty", "tract", "blk", "age", "sex", "race"])
    path = tmp_path / name
    if name.endswith(".parquet"):
        df.to_parquet(path)
    else:
        df.to_csv(path, index=False)
    return path


def _units(tmp_path, extra=()):
    rows = [["01", "001", "000100", "1001"], ["01", "001", "000100", "1002"], ["01", "001", "000100", "1003"],
            ["01", "001", "000200", "1001"], *extra]
    path = tmp_path / "blocks.csv"
    pd.DataFrame(rows, columns=["st", "cty", "tract", "blk"]).to_csv(path, index=False)
    return path


@pytest.mark.parametrize("name", ["persons.csv", "persons.parquet"])
def test_a_person_file_with_its_own_names_and_codes_is_read_with_its_public_block_list(tmp_path, name):
    d = read_table(_persons(tmp_path, name=name), GEO, ATTRS, units_file=_units(tmp_path))
    assert len(d) == 4 and d.domain.names == ("AGE", "SEX", "RACE")
    assert d.column("AGE").tolist() == [34, 7, 80, 51] and d.column("SEX").tolist() == [1, 0, 1, 0]
    assert d.column("RACE").tolist() == [0, 1, 2, 0]
    geo = d.geography
    assert geo.levels == ("national", "state", "county", "tract", "block")
    # tract 000100's blocks, the empty 1003 included, come from the units file
    blocks, source = geo.units_within("tract", "01:001:000100", "block")
    assert [b.rsplit(":", 1)[1] for b in blocks] == ["1001", "1002", "1003"] and "blocks.csv" in source
    # block 1001 of tract 000200 is a different block from 1001 of tract 000100
    assert len(set(geo.units("block").tolist())) == 3


def _error(tmp_path, rows=None, attrs=ATTRS, geo=GEO, units=None) -> str:
    with pytest.raises(DataFileError) as e:
        read_table(_persons(tmp_path, rows), geo, attrs, units_file=units)
    msg = str(e.value)
    assert "\n" not in msg and "persons.csv" in msg
    return msg


@pytest.mark.parametrize("bad, expected", [
    (["01", "001", "000100", "1001", "34", "X", "W"], "persons.csv row 3, column sex: 'X' is not one of [M, F]"),
    (["01", "001", "000100", "1001", "-1", "F", "W"], "row 3, column age: '-1' is not an integer in [0, 115]"),
    (["01", "001", "000100", "1001", "116", "F", "W"], "row 3, column age: '116' is not an integer in [0, 115]"),
    (["01", "001", "000100", "1001", "abc", "F", "W"], "row 3, column age: 'abc' is not an integer in [0, 115]"),
    (["01", "001", "000100", "1001", "3.5", "F", "W"], "row 3, column age: '3.5' is not an integer"),
    (["01", "001", "", "1001", "34", "F", "W"], "row 3, column tract: the tract code is blank"),
    (["01", "001", "000100", "1001", "34", "F", "white"], "row 3, column race: 'white' is not one of [W, B, 2+]"),
])
def test_each_malformed_value_is_one_line_naming_file_row_column_and_value(tmp_path, bad, expected):
    rows = [["01", "001", "000100", "1001", "34", "F", "W"], bad]
    assert expected in _error(tmp_path, rows)


def test_a_unit_missing_from_the_units_file_and_a_missing_column_are_errors(tmp_path):
    rows = [["01", "001", "000100", "1001", "34", "F", "W"], ["01", "001", "000900", "1001", "34", "F", "W"]]
    msg = _error(tmp_path, rows, units=_units(tmp_path))
    assert "row 3" in msg and "000900" in msg and "not in the units file" in msg and "blocks.csv" in msg
    msg = _error(tmp_path, attrs={**ATTRS, "HISP": ColumnSpec("HISP", "hisp", ("N", "Y"))})
    assert "missing column hisp" in msg and "the file has columns [st, cty, tract, blk, age, sex, race]" in msg
    dup = _units(tmp_path, extra=[["01", "001", "000100", "1001"]])
    with pytest.raises(DataFileError, match="listed more than once"):
        read_units(dup, GEO)


def test_an_empty_or_binary_file_is_a_clear_error(tmp_path):
    empty = tmp_path / "persons.csv"
    empty.write_text("")
    with pytest.raises(DataFileError, match="persons.csv: the file is empty"):
        read_table(empty, GEO, ATTRS)
    empty.write_text("st,cty,tract,blk,age,sex,race\n")
    with pytest.raises(DataFileError, match="has a header but no persons"):
        read_table(empty, GEO, ATTRS)
    empty.write_bytes(np.random.default_rng(0).bytes(2000))
    with pytest.raises(DataFileError, match="not UTF-8"):
        read_table(empty, GEO, ATTRS)
    wrong = tmp_path / "persons.xlsx"
    wrong.write_text("x")
    with pytest.raises(DataFileError, match="unknown file type"):
        read_table(wrong, GEO, ATTRS)
