import numpy as np
import pytest

from censusrecon.microdata.errors import CensusReconError
from censusrecon.microdata.population import RACES, PopulationSpec, embedded_population


@pytest.fixture(scope="module")
def pop():
    return embedded_population(0)


def test_same_seed_same_population_and_other_seed_differs():
    spec = PopulationSpec(states=2, counties_per_state=1, tracts_per_county=2)
    a, b = embedded_population(3, spec), embedded_population(3, spec)
    assert np.array_equal(a.codes, b.codes) and np.array_equal(a.geography.units("block"), b.geography.units("block"))
    c = embedded_population(4, spec)
    assert len(c) != len(a) or not np.array_equal(c.codes, a.codes)


def test_census_shape(pop):
    geo = pop.geography
    assert pop.domain.names == ("AGE", "SEX", "HISP", "RACE", "CENRACE")
    from censusrecon.microdata.population import race_group

    assert np.array_equal(race_group(pop.column("CENRACE")), pop.column("RACE"))
    assert len(np.unique(pop.column("CENRACE"))) > 30  # many of the 63 combinations occur
    assert pop.domain.size("AGE") == 116 and len(RACES) == 7
    # nested geography: every level has several units, each unit inside one parent
    n = {lv: len(geo.unit_ids(lv)) for lv in ("state", "county", "tract", "block")}
    assert 1 < n["state"] < n["county"] < n["tract"] < n["block"]
    _, sizes = np.unique(geo.units("block"), return_counts=True)
    assert sizes.min() == 1 and 100 <= sizes.max() <= 400  # 1 to a few hundred, as real blocks
    assert set(np.unique(pop.column("RACE"))) == set(range(7))
    # race composition varies between tracts (clustering), not just around one national mix
    tracts = geo.units("tract")
    white = [np.mean(pop.column("RACE")[tracts == t] == 0) for t in geo.unit_ids("tract")]
    assert np.std(white) > 0.1


def test_spec_validation():
    with pytest.raises(CensusReconError, match="blocks_per_tract"):
        PopulationSpec(blocks_per_tract=(5, 2))
    with pytest.raises(CensusReconError, match="states must be >= 1"):
        PopulationSpec(states=0)
