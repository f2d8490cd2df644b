"""The 2010-shaped population and the statistics that hold it to 2010 (microdata.describe)."""

import numpy as np
import pytest

from microdata.dataset import Dataset
from microdata.describe import SIZE_LABELS, TARGETS, TARGETS_BY_BIN, describe
from microdata.errors import CensusReconError
from microdata.geography import Geography, UnitCatalogue
from microdata.population import person_domain
from microdata.population2010 import (BLOCK_BINS_2010, MAX_BLOCK, Census2010Spec, _bin_pmf, block_size_pmf_2010,
                                      census2010_population, single_year_age_2010)


def _hand_made() -> Dataset:
    # (age, sex 0 male / 1 female, hisp, race group, cenrace), tract, block
    rows = [((30, 0, 0, 0, 0), 1, 1001), ((30, 1, 0, 0, 0), 1, 1001), ((5, 0, 1, 0, 0), 1, 1001),
            ((40, 0, 0, 1, 1), 1, 1002), ((41, 0, 0, 3, 3), 1, 1002),
            ((90, 1, 1, 5, 5), 2, 1001)]
    codes = np.array([r[0] for r in rows], dtype=np.int64)
    tract = np.array([r[1] for r in rows]) * 100
    block = np.array([r[2] for r in rows])
    geo = Geography.from_parts(np.ones(6, int), np.ones(6, int), tract, block)
    listed = Geography.from_parts(np.ones(4, int), np.ones(4, int), np.array([100, 100, 200, 200]),
                                  np.array([1001, 1002, 1001, 1002]))  # tract 200's block 1002 is empty
    cat = UnitCatalogue({lv: listed.units(lv) for lv in listed.levels[1:]}, "test list")
    return Dataset(person_domain(), codes, geo.with_catalogue(cat))


def test_describe_on_a_hand_made_population():
    s = {x.name: x.value for x in describe(_hand_made())}
    # block 1 (3 persons): mode NH White (2 of 3); block 2: Black and Asian tie, so the tract's
    # mode (NH White, 2 persons) decides and neither is modal; block 3 (1 person): its count is 1
    # and its tract has one person, so the fallback NH White decides and it is not modal
    assert s["modal_pct"] == pytest.approx(100 * 2 / 6)
    # person-weighted Σp²: 3 × (4/9 + 1/9) + 2 × (1/4 + 1/4) + 1 × 1, over 6
    assert s["sum_p2_pct"] == pytest.approx(100 * (3 * 5 / 9 + 2 * 0.5 + 1) / 6)
    assert s["unique_age_pct"] == pytest.approx(100.0)
    assert s["unique_bin38_pct"] == pytest.approx(100 * 4 / 6)  # ages 40 and 41 share the bin 40-44
    assert s["blocks_pct[1-9]"] == 100.0 and s["persons_pct[1-9]"] == 100.0 and s["blocks_pct[10-49]"] == 0.0
    assert np.isnan(s["modal_pct[10-49]"])  # no block of that size: nothing measured
    assert s["persons_per_tract"] == 3.0 and s["occupied_blocks_per_tract"] == 1.5
    assert s["empty_blocks_pct"] == pytest.approx(25.0)
    assert s["male_pct"] == pytest.approx(100 * 4 / 6) and s["age_under18_pct"] == pytest.approx(100 / 6)
    assert s["hispanic_pct"] == pytest.approx(100 * 2 / 6) and s["nh_white_pct"] == pytest.approx(100 * 2 / 6)
    assert s["nh_black_pct"] == pytest.approx(100 / 6) and s["nh_asian_pct"] == pytest.approx(100 / 6)
    assert s["diversity_index_pct"] == pytest.approx(100 * (1 - (4 + 4 + 1 + 1) / 36))


def test_block_size_distribution_is_2010s_by_construction():
    for lo, hi, _, mean in BLOCK_BINS_2010:
        hi = MAX_BLOCK if hi is None else hi
        p = _bin_pmf(lo, hi, mean)
        assert float(p @ np.arange(lo, hi + 1)) == pytest.approx(mean, rel=1e-6)
    pmf = block_size_pmf_2010()
    for (lo, hi, share, _), target in zip(BLOCK_BINS_2010, TARGETS_BY_BIN["blocks_pct"]):
        assert 100 * pmf[lo:(MAX_BLOCK if hi is None else hi) + 1].sum() == pytest.approx(target, abs=1e-6)
    age = single_year_age_2010()
    assert age.sum() == pytest.approx(1.0) and 100 * age[:18].sum() == pytest.approx(24.0, abs=0.2)
    with pytest.raises(CensusReconError, match="cannot have mean"):
        _bin_pmf(1, 9, 12.0)


@pytest.fixture(scope="module")
def stats2010():
    return describe(census2010_population(0, Census2010Spec(states=10, counties_per_state=4, tracts_per_county=5)))


def test_2010_shape_holds_every_statistic_within_its_tolerance(stats2010):
    measured = [s for s in stats2010 if s.target is not None]
    assert len(measured) == 7 * len(TARGETS_BY_BIN) + len(TARGETS)
    off = [(s.name, round(s.value, 2), s.target, s.tolerance) for s in measured if not s.within]
    assert not off, off
    by = {s.name: s.value for s in stats2010}
    assert by["persons"] > 600_000 and by["largest_block"] >= 1000  # every bin is populated
    # the clustering falls with block size as 2010's does (households in small blocks)
    modal = [by[f"modal_pct[{b}]"] for b in SIZE_LABELS]
    assert modal[0] > modal[1] > modal[2] > modal[3] > modal[4]


def test_compact_population_is_reported_outside_2010():
    from microdata.population import PopulationSpec, embedded_population

    s = {x.name: x for x in describe(embedded_population(0, PopulationSpec(states=2)))}
    assert s["empty_blocks_pct"].within is False and s["persons_per_tract"].within is False


def test_spec_and_config_refuse_bad_input(tmp_path):
    from experiments.config import ConfigError, load_config

    with pytest.raises(CensusReconError, match="occupied_blocks_per_tract"):
        Census2010Spec(occupied_blocks_per_tract=(0, 5))
    cfg = tmp_path / "c.yaml"
    cfg.write_text("name: c\ndata: {population: {shape: '2010', blocks_per_tract: [4, 8]}}\n"
                   "attributes: [AGE, SEX]\ntarget: {level: tract, units: 1}\n")
    with pytest.raises(ConfigError, match="shape 'compact' only"):
        load_config(cfg)


def test_same_seed_same_population_and_states_differ():
    spec = Census2010Spec(states=2, counties_per_state=1, tracts_per_county=1)
    a, b = census2010_population(5, spec), census2010_population(5, spec)
    assert np.array_equal(a.codes, b.codes) and np.array_equal(a.geography.units("block"), b.geography.units("block"))
    assert not np.array_equal(census2010_population(6, spec).codes[:100], a.codes[:100])


def test_describe_population_command(tmp_path, capsys):
    from experiments.cli import main

    cfg = tmp_path / "p.yaml"
    cfg.write_text("name: p\ndata: {population: {shape: '2010', states: 1, counties_per_state: 1, "
                   "tracts_per_county: 2}}\nattributes: [AGE, SEX, HISP, CENRACE]\ntarget: {level: tract, units: 1}\n")
    assert main(["describe-population", str(cfg), "--plot", str(tmp_path / "fig")]) == 0
    out = capsys.readouterr().out
    assert "modal_pct[1-9]" in out and "93.5" in out and "statistics outside their tolerance" in out
    assert (tmp_path / "fig.png").exists()
    tiny = tmp_path / "t.yaml"
    tiny.write_text("name: t\ndata: {population: {states: 1, counties_per_state: 1, tracts_per_county: 2}}\n"
                    "attributes: [AGE, SEX, HISP, CENRACE]\ntarget: {level: tract, units: 1}\n")
    assert main(["describe-population", str(tiny), "--check"]) == 2  # the compact shape is not 2010's
