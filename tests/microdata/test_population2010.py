"""The 2010-shaped population and the statistics that hold it to 2010 (microdata.describe)."""

import numpy as np
import pytest

from censusrecon.microdata.dataset import Dataset
from censusrecon.microdata.describe import (BLOCK_GROUP_TARGETS, SIZE_LABELS, TARGETS, TARGETS_BY_BIN, VALIDATION, describe,
                                format_table)
from censusrecon.microdata.errors import CensusReconError
from censusrecon.microdata.geography import Geography, UnitCatalogue
from censusrecon.microdata.population import person_domain
from censusrecon.microdata.population2010 import (BLOCK_BINS_2010, DIRICHLET_MIX, MAX_BLOCK, RARITY_MIX, Census2010Spec,
                                      _bin_pmf, block_size_pmf_2010, census2010_population, single_year_age_2010)


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
    data, gq = census2010_population(0, Census2010Spec(states=10, counties_per_state=4, tracts_per_county=5),
                                     group_quarters=True)
    return describe(data, group_quarters=gq)


def test_2010_shape_holds_every_statistic_within_its_tolerance(stats2010):
    """The default (rarity) mixes on the 200-tract population, seed 0: every statistic with a 2010 figure, the
    tuned ones (fitted) and the validation ones (never in the fit's objective), within its tolerance."""
    measured = [s for s in stats2010 if s.target is not None and s.tuned]
    assert len(measured) == 7 * len(TARGETS_BY_BIN) + len(TARGETS) + len(BLOCK_GROUP_TARGETS)
    off = [(s.name, round(s.value, 2), s.target, s.tolerance, s.tuned) for s in stats2010 if s.within is False]
    assert not off, off
    assert sum(not s.tuned for s in stats2010 if s.within) == len(VALIDATION)
    by = {s.name: s.value for s in stats2010}
    assert by["persons"] > 600_000 and by["largest_block"] >= 1000  # every bin is populated
    # the clustering falls with block size as 2010's does (households in small blocks)
    modal = [by[f"modal_pct[{b}]"] for b in SIZE_LABELS]
    assert modal[0] > modal[1] > modal[2] > modal[3] > modal[4]


def test_dirichlet_mixes_miss_what_the_rarity_mixes_mend():
    """race_mix: dirichlet (the earlier default, kept so its figures reproduce) holds every tuned statistic but
    the block groups' small groups, which it was never fitted to; it misses those and the tracts' small adult
    groups (a validation statistic): a rare group all but absent from most areas (calibration page)."""
    assert all(getattr(Census2010Spec(), k) == v for k, v in RARITY_MIX.items())
    spec = Census2010Spec(states=10, counties_per_state=4, tracts_per_county=5, **DIRICHLET_MIX)
    data, gq = census2010_population(0, spec, group_quarters=True)
    stats = describe(data, group_quarters=gq)
    off = [(s.name, round(s.value, 2), s.target, s.tolerance) for s in stats
           if s.tuned and s.within is False and s.name not in BLOCK_GROUP_TARGETS]
    assert not off, off
    missed = {s.name for s in stats if s.within is False}
    assert missed >= {"bgs_small_adult_race7_pct", "bgs_small_adult_hisp14_pct", "tracts_small_adult_race7_pct"}


def test_config_race_mix_selects_the_mixes():
    from censusrecon.microdata.sources import embedded_2010

    spec = {"shape": "2010", "states": 1, "counties_per_state": 1, "tracts_per_county": 2}
    small = {k: v for k, v in spec.items() if k != "shape"}
    rarity = census2010_population(4, Census2010Spec(**small))
    dirichlet = census2010_population(4, Census2010Spec(**small, **DIRICHLET_MIX))
    assert not np.array_equal(rarity.codes, dirichlet.codes)
    for mix, want in ((None, rarity), ("rarity", rarity), ("dirichlet", dirichlet)):
        got, _ = embedded_2010({"seed": 4, "population": {**spec, "race_mix": mix}})
        assert np.array_equal(got.codes, want.codes), mix


def test_compact_population_is_reported_outside_2010():
    from censusrecon.microdata.population import PopulationSpec, embedded_population

    s = {x.name: x for x in describe(embedded_population(0, PopulationSpec(states=2)))}
    assert s["empty_blocks_pct"].within is False and s["persons_per_tract"].within is False


def test_spec_and_config_refuse_bad_input(tmp_path):
    from censusrecon.experiments.config import ConfigError, load_config

    with pytest.raises(CensusReconError, match="tract_persons"):
        Census2010Spec(tract_persons=(50.0, 0.3))
    with pytest.raises(CensusReconError, match="group_age_shift"):
        Census2010Spec(group_age_shift=(1.0, 2.0))
    with pytest.raises(CensusReconError, match="rarity_exponent"):
        Census2010Spec(rarity_exponent=3.0)
    with pytest.raises(CensusReconError, match="tract_rarity_exponent"):
        Census2010Spec(tract_rarity_exponent=-2.0)
    compact = tmp_path / "k.yaml"
    compact.write_text("name: k\ndata: {population: {race_mix: rarity}}\nattributes: [AGE, SEX]\n"
                       "target: {level: tract, units: 1}\n")
    with pytest.raises(ConfigError, match="race_mix applies to shape '2010' only"):
        load_config(compact)
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
    from censusrecon.experiments.cli import main

    cfg = tmp_path / "p.yaml"
    cfg.write_text("name: p\ndata: {population: {shape: '2010', states: 1, counties_per_state: 1, "
                   "tracts_per_county: 2}}\nattributes: [AGE, SEX, HISP, CENRACE]\ntarget: {level: tract, units: 1}\n")
    assert main(["describe-population", str(cfg), "--plot", str(tmp_path / "fig")]) == 0
    out = capsys.readouterr().out
    assert "modal_pct[1-9]" in out and "93.5" in out and "statistics outside their tolerance" in out
    assert (tmp_path / "fig.png").exists() and (tmp_path / "fig_validation.png").exists()
    tiny = tmp_path / "t.yaml"
    tiny.write_text("name: t\ndata: {population: {states: 1, counties_per_state: 1, tracts_per_county: 2}}\n"
                    "attributes: [AGE, SEX, HISP, CENRACE]\ntarget: {level: tract, units: 1}\n")
    assert main(["describe-population", str(tiny), "--check"]) == 2  # the compact shape is not 2010's


def test_validation_statistics_on_hand_made_populations():
    data = _hand_made()
    gq = np.array([True, False, False, False, False, False])
    s = {x.name: x for x in describe(data, group_quarters=gq)}
    v = {k: x.value for k, x in s.items()}
    assert not s["small_cells_tract_race7_pct"].tuned and s["small_cells_block_race7_pct"].tuned
    # blocks: {W 3}, {B 1, Asian 1}, {SOR 1}: 3 of 3 x 7 cells hold 1-2 persons; tracts {W 3, B 1, A 1}, {SOR 1}
    assert v["small_cells_block_race7_pct"] == pytest.approx(100 * 3 / 21)
    assert v["small_cells_tract_race7_pct"] == pytest.approx(100 * 3 / 14)
    # Hispanic x race: block 1 is {NH White 2, Hispanic White 1}: both cells small
    assert v["small_cells_block_hisp14_pct"] == pytest.approx(100 * 5 / 42)
    assert v["small_cells_tract_hisp14_pct"] == pytest.approx(100 * 5 / 28)
    assert v["blocks_small_adult_race7_pct"] == 100.0 and v["tracts_small_adult_race7_pct"] == 100.0
    # each tract's blocks lie in its block group 1, so the block groups' figures are the tracts' here
    assert v["small_cells_bg_race7_pct"] == pytest.approx(100 * 3 / 14) and s["small_cells_bg_race7_pct"].tuned
    assert v["small_cells_bg_hisp14_pct"] == pytest.approx(100 * 5 / 28)
    assert v["bgs_small_adult_race7_pct"] == 100.0 and v["bgs_small_adult_hisp14_pct"] == 100.0
    # only block 1's mode (NH White, 2 persons) is unique and held by two or more
    assert v["unique_modal_blocks_pct"] == pytest.approx(100 / 3)
    assert v["cef_self_linkage_pct"] == pytest.approx(100.0)  # every {block, sex, age} cell holds one person
    assert v["median_age_hispanic"] == 47.5 and v["median_age_nh_white"] == 30.0
    assert v["age_under18_hispanic_pct"] == 50.0 and v["age_under18_nh_white_pct"] == 0.0
    assert v["median_persons_per_tract"] == 3.0 and v["tracts_in_design_range_pct"] == 0.0
    assert v["persons_per_block_group"] == 3.0  # blocks 1001, 1002: block group 1 of each tract
    assert v["group_quarters_pct"] == pytest.approx(100 / 6)
    assert np.isnan({x.name: x.value for x in describe(data)}["group_quarters_pct"])
    # two persons of one {block, sex, age} cell and different races: each linked right half the time
    two = Dataset(person_domain(), np.array([[30, 0, 0, 0, 0], [30, 0, 0, 1, 1]]),
                  Geography.from_parts(np.ones(2, int), np.ones(2, int), np.full(2, 100), np.array([1001, 1001])))
    assert {x.name: x.value for x in describe(two)}["cef_self_linkage_pct"] == pytest.approx(50.0)
    # blocks 1001 and 2001 lie in block groups 1 and 2 of one tract
    bgs = Dataset(person_domain(), np.array([[30, 0, 0, 0, 0]] * 3),
                  Geography.from_parts(np.ones(3, int), np.ones(3, int), np.full(3, 100), np.array([1001, 1002, 2001])))
    by = {x.name: x.value for x in describe(bgs)}
    assert by["persons_per_block_group"] == 1.5
    # White 2 in block group 1 and 1 in block group 2: both small; the tract's White 3 is not
    assert by["small_cells_bg_race7_pct"] == pytest.approx(100 * 2 / 14)
    assert by["small_cells_tract_race7_pct"] == pytest.approx(0.0)
    table = format_table(describe(data))
    assert table.index("modal_pct") < table.index("validation statistics") < table.index("small_cells_tract_race7")


def test_tracts_are_cut_into_block_groups_numbered_as_the_bureau_does():
    data, gq = census2010_population(3, Census2010Spec(states=1, counties_per_state=2, tracts_per_county=3),
                                     group_quarters=True)
    geo = data.geography
    listed = geo.catalogue.ids["block"]
    assert all(len(b) == 15 for b in listed)
    number = np.array([int(b[-4:]) for b in listed])
    assert (number >= 1001).all() and (number <= 9999).all() and (number % 1000 != 0).all()
    persons = np.unique(geo.units("tract"), return_counts=True)
    for tract, n in zip(*persons):
        groups = {b[:12] for b in listed if b.startswith(tract)}
        occupied = {b[:12] for b in geo.units("block")[geo.units("tract") == tract]}
        assert occupied <= groups and len(groups) <= 9  # empty blocks lie in block groups of their tract
        assert len(occupied) >= (2 if n >= 3000 else 1)  # about 1,500 persons a group
    assert gq.dtype == bool and len(gq) == len(data) and 0 < gq.mean() < 0.1


def test_blocks_per_tract_follow_its_persons_and_density():
    from censusrecon.microdata.population2010 import block_size_pmf_2010, tract_density_draws

    data = census2010_population(1, Census2010Spec(states=1, counties_per_state=4, tracts_per_county=5))
    geo = data.geography
    tracts, persons = np.unique(geo.units("tract"), return_counts=True)
    blocks = np.array([len(np.unique(geo.units("block")[geo.units("tract") == t])) for t in tracts])
    mean_size = persons / blocks
    # a tract's blocks hold its persons: its block count is its persons over its blocks' mean size
    assert np.all(np.abs(blocks * mean_size - persons) < 1e-6) and blocks.min() < blocks.max()
    assert (persons >= 1200).mean() > 0.9  # the Bureau's design range, almost always
    # the density draw, weighted by blocks, leaves the blocks' densities standard normal
    rng = np.random.default_rng(0)
    cdf = np.cumsum(block_size_pmf_2010())
    d = tract_density_draws(rng, 4000, 0.75, cdf)
    z = rng.standard_normal((4000, 200))
    from scipy.special import ndtr

    from censusrecon.microdata.population2010 import _size_of_quantile

    m = _size_of_quantile(ndtr(0.75 * d[:, None] + np.sqrt(1 - 0.75 ** 2) * z), cdf).mean(axis=1)
    w = 1.0 / m  # blocks per person of each tract
    assert np.average(d, weights=w) == pytest.approx(0.0, abs=0.05)
    assert np.average(d * d, weights=w) == pytest.approx(1.0, abs=0.08)
    assert d.mean() > 0.2  # tracts themselves lean dense: dense tracts have few, big blocks


def test_the_modal_rule_falls_back_to_the_block_group():
    from censusrecon.microdata.describe import block_modes

    # block 0 ties (White, Black); its group (blocks 0 and 1) is mostly Black, the tract mostly White
    block = np.array([0, 0, 1, 1, 2, 2, 2, 2, 2])
    cell = np.array([0, 1, 1, 1, 0, 0, 0, 0, 0])
    by_group = block_modes(block, np.array([0, 0, 0, 0, 1, 1, 1, 1, 1]), cell, fallback=9)
    by_tract = block_modes(block, np.zeros(9, np.int64), cell, fallback=9)
    assert by_group[0] == 1 and by_tract[0] == 0
