from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from censusrecon.microdata.ppmf import PPMFError, read_ppmf

SHARED = Path(__file__).resolve().parents[2] / "microdata" / "data" / "ppmf_perry_al" / "ppmf_perry_county_al.csv"


def _full_ppmf(path: Path, n=300, seed=0) -> Path:
    rng = np.random.default_rng(seed)
    df = pd.DataFrame({
        "TABBLKST": rng.choice(["01", "02"], n), "TABBLKCOU": "001",
        "TABTRACTCE": rng.choice(["000100", "000200"], n), "TABBLKGRPCE": "1",
        "TABBLK": rng.choice(["1001", "1002", "2001"], n), "RTYPE": "3", "GQTYPE": "000",
        "QAGE": rng.integers(0, 116, n), "QSEX": rng.integers(1, 3, n), "CENHISP": rng.integers(1, 3, n),
        "CENRACE": [f"{v:02d}" for v in rng.integers(1, 64, n)],
    })
    df.to_csv(path, index=False)
    return path


def test_full_format_reader_streams_chunks_and_filters(tmp_path):
    path = _full_ppmf(tmp_path / "ppmf.csv")
    raw = pd.read_csv(path, dtype=str)
    d = read_ppmf(path, chunksize=37)
    assert len(d) == len(raw)
    assert d.domain.names == ("AGE", "SEX", "HISP", "RACE", "CENRACE")
    np.testing.assert_array_equal(d.column("CENRACE"), raw["CENRACE"].astype(int) - 1)
    only = read_ppmf(path, states=["02"], chunksize=50)
    assert len(only) == (raw["TABBLKST"] == "02").sum()
    t = read_ppmf(path, tracts=["01001000200"], chunksize=50)
    assert set(t.geography.unit_ids("tract")) == {"01001000200"}
    with pytest.raises(PPMFError, match="no persons"):
        read_ppmf(path, states=["99"])
    with pytest.raises(PPMFError, match="does not exist"):
        read_ppmf(tmp_path / "missing.csv")


def test_redistricting_variant_of_perry_county():
    d = read_ppmf(SHARED, chunksize=4000)
    assert len(d) == 10588
    assert "AGE" not in d.domain and d.domain.names[0] == "VOTING_AGE"
    assert len(d.geography.unit_ids("tract")) == 3 and len(d.geography.unit_ids("block")) == 511
