import numpy as np
import pandas as pd
import pytest

from censusrecon.microdata.dataset import Dataset
from censusrecon.microdata.domain import Attribute, Domain
from censusrecon.microdata.errors import CensusReconError, DomainError
from censusrecon.microdata.geography import Geography


def test_encode_decode_round_trip_and_order():
    dom = Domain.from_sizes({"A": 3, "B": 5, "C": 2})
    grid = np.stack(np.meshgrid(*[np.arange(s) for s in dom.sizes], indexing="ij"), -1).reshape(-1, 3)
    keys = dom.encode(grid)
    assert keys.dtype == np.int64
    assert keys.tolist() == list(range(dom.total_size))  # row-major, last fastest: a bijection
    assert np.array_equal(dom.decode(keys), grid)


def test_domain_rejects_bad_values_with_named_errors():
    with pytest.raises(DomainError, match="duplicate attribute names"):
        Domain((Attribute.range("A", 2), Attribute.range("A", 3)))
    with pytest.raises(DomainError, match="duplicate value labels"):
        Attribute("S", ("m", "m"))
    with pytest.raises(DomainError, match="more than int64"):
        Domain.from_sizes({f"X{i}": 1000 for i in range(8)})
    dom = Domain.from_sizes({"A": 2, "B": 3})
    with pytest.raises(DomainError, match="'B' has codes in \\[3, 3\\]; valid codes are 0..2"):
        dom.encode(np.array([[0, 3]]))
    with pytest.raises(DomainError, match="unknown attribute 'Z'"):
        dom.index("Z")
    assert issubclass(DomainError, ValueError) and issubclass(DomainError, CensusReconError)


def test_dataset_pandas_and_parquet_round_trip(tmp_path):
    dom = Domain((Attribute("SEX", ("male", "female")), Attribute.range("AGE", 5)))
    geo = Geography.from_parts([1, 1, 2], [1, 1, 3], [100, 100, 200], [1001, 1002, 1001])
    ds = Dataset(dom, np.array([[0, 4], [1, 0], [1, 2]]), geo)
    back = Dataset.from_pandas(ds.to_pandas(labels=True), dom)
    assert np.array_equal(back.codes, ds.codes)
    assert np.array_equal(back.geography.units("block"), geo.units("block"))
    ds.to_parquet(tmp_path / "d.parquet")
    again = Dataset.read_parquet(tmp_path / "d.parquet")
    assert again.domain == dom
    assert np.array_equal(again.codes, ds.codes)
    assert again.geography.units("tract").tolist() == ["01001000100", "01001000100", "02003000200"]
    assert not list(tmp_path.glob(".*tmp"))  # the atomic write left no temp file


def test_dataset_from_pandas_names_bad_label():
    dom = Domain((Attribute("SEX", ("male", "female")),))
    with pytest.raises(DomainError, match="'SEX' has value 'other'"):
        Dataset.from_pandas(pd.DataFrame({"SEX": ["male", "other"]}), dom)


def test_geography_hierarchy():
    geo = Geography.from_parts([1, 1], [3, 3], [100, 200], [1001, 1001])
    assert geo.units("county").tolist() == ["01003", "01003"]
    assert geo.parent("block", "010030001001001", "county") == "01003"
    assert geo.parent("tract", "01003000200", "national") == "US"
    assert geo.coarser("tract") == ("county", "state", "national")
    with pytest.raises(CensusReconError, match="not coarser"):
        geo.parent("tract", "01003000200", "block")
    with pytest.raises(CensusReconError, match="this data has levels"):
        geo.units("zip")
    with pytest.raises(CensusReconError, match="15 digits"):
        Geography.census(np.array(["0100300010"]))


def test_general_hierarchies_must_nest():
    g = Geography.from_levels({"state": ["25", "25", "48"], "puma": ["25-1", "25-2", "48-1"]})
    assert g.levels == ("national", "state", "puma") and g.parent("puma", "48-1", "state") == "48"
    with pytest.raises(CensusReconError, match="lies in more than one state"):
        Geography.from_levels({"state": ["25", "48"], "puma": ["X", "X"]})
