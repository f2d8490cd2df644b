"""TopDown as 2020 ran it: the tree from the public unit list, one MDF whose tabulations are every
published table, and the same shape for neighbours that empty a block or a whole unit."""


import numpy as np
import pytest

from censusrecon.experiments.config import load_config
from censusrecon.experiments.problem import build_workload, load_population, resolve
from censusrecon.synth.topdown_release import publish_topdown, topdown_mdf, topdown_root, topdown_unit
from censusrecon.experiments.release.audit import StudySource
from censusrecon.synth.audit.tree_audit import _topdown_structure
from censusrecon.microdata.dataset import Dataset
from censusrecon.microdata.geography import Geography
from censusrecon.synth.noise import SimulationNoise
from censusrecon.synth.release import workload_counts
from censusrecon.synth.topdown import check_consistent

UNIT = "01001000100"


@pytest.fixture(scope="module")
def agency(compact_agency):
    cfg = load_config(compact_agency, ["release.epsilons=[1.0]", "release.mechanisms=[topdown]"])
    return cfg, load_population(cfg)


def test_the_mdf_tabulates_to_every_published_table_at_every_level(agency):
    cfg, pop = agency
    td = topdown_root(resolve(cfg, pop), UNIT, True)
    rel = publish_topdown(cfg, td, 1.0, SimulationNoise(5))
    est = rel.estimates
    check_consistent(td.shape, est)  # children add up to their parent in every cell, at every level
    assert all(e.dtype == np.int64 and (e >= 0).all() for e in est)
    assert est[0].sum() == td.tree.hist[0].sum()  # the root_total invariant, exact
    mdf = topdown_mdf(td, est)
    assert len(mdf) == est[0].sum() and set(mdf["UNIT"]) <= set(td.nodes)
    # every node's tables are the tabulation of its persons in the MDF: consistent across geography
    # and across tables, whichever table or level one reads
    for lv, e in enumerate(est):
        counts = td.strategy.tabulate(e)
        assert (counts >= 0).all()
        if lv:
            agg = np.zeros_like(td.strategy.tabulate(est[lv - 1]))
            np.add.at(agg, td.shape.parent[lv], counts)
            assert np.array_equal(agg, td.strategy.tabulate(est[lv - 1]))
    for unit in td.nodes:  # each target unit's published tables are its MDF rows' exact tables
        D = resolve(cfg, pop).prepare(unit, True, pad_blocks=False).private
        w = build_workload(cfg, cfg.queries[0], D.domain)
        pub = topdown_unit(td, est, unit, w, rel.record, False, "")
        assert np.array_equal(pub.counts, workload_counts(pub.rows, w)) and len(pub.rows) == (mdf["UNIT"] == unit).sum()
        by_block = mdf[mdf["UNIT"] == unit].groupby("BLOCK_ID").size()
        names = D.domain.attribute("BLOCK").values
        got = np.bincount(pub.rows.column("BLOCK"), minlength=len(names))
        ids = td.shape.ids[-1][td.nodes[unit][2]]
        assert got.tolist() == [int(by_block.get(i, 0)) for i in ids]


def test_the_tree_comes_from_the_public_list_whoever_lives_there(agency):
    cfg, pop = agency
    geo = pop.geography
    td = topdown_root(resolve(cfg, pop), UNIT, True)
    assert [len(i) for i in td.shape.ids] == [1, 4, 112]  # every listed block, empty ones included
    # one tract down to a single resident, then to none: the same tree
    other = np.flatnonzero(geo.units("tract") == "01001000200")
    shapes = []
    for drop in (other[1:], other):
        sub = pop.take(np.setdiff1d(np.arange(len(pop)), drop))
        people = Dataset(sub.domain, sub.codes, Geography(sub.geography.levels, sub.geography.ids,
                                                          catalogue=geo.catalogue))
        shapes.append(topdown_root(resolve(cfg, people), UNIT, True).shape.key())
    assert shapes[0] == shapes[1] == td.shape.key()
    assert _topdown_structure(StudySource(resolve(cfg, pop)), UNIT, True, td.nodes) == "pass"


def test_a_county_target_keeps_its_tracts_in_the_tree_and_publishes_tract_tables_per_tract(compact_agency):
    """Attacking whole counties with SF1's tract table PCT12: the tree keeps the tract level between
    the county and its blocks (as 2020's did), the county's blocks are its leaves in the order of its
    BLOCK values, and PCT12 is published per tract, each over its listed blocks."""
    from censusrecon.synth.topdown_release import topdown_shape

    cfg = load_config(compact_agency,
                      ["target.level=county", "target.unit_ids=['01001']", "release.topdown.root=state",
                       "release.mechanisms=[topdown]", "baselines=[holdout, state, chance]"])
    pop = load_population(cfg)
    _, shape, nodes, _ = topdown_shape(resolve(cfg, pop), "01001", True)
    assert shape.levels == ["state", "county", "tract", "block"]
    blocks, _ = resolve(cfg, pop).blocks("01001")
    assert shape.ids[-1][nodes["01001"][2]].tolist() == blocks
    prob = resolve(cfg, pop).prepare("01001", True, pad_blocks=False)
    w = build_workload(cfg, cfg.queries[0], prob.private.domain, prob.areas)
    tracts = pop.geography.units_within("county", "01001", "tract")[0]
    assert len(tracts) == 4 and dict(w.cells_per_table)["PCT12"] == 209 * 4
    totals = dict(zip(w.labels, workload_counts(prob.private, w).tolist()))
    D_tracts = pop.geography.enclosing("block", [blocks[b] for b in prob.private.column("BLOCK")], "tract")
    assert [totals[f"PCT12_001@{t}"] for t in tracts] == [D_tracts.count(t) for t in tracts]
    with pytest.raises(ValueError, match="need the unit's areas"):
        build_workload(cfg, cfg.queries[0], prob.private.domain)
    # the auditor's two blocks lie in different tracts: a person moving between them changes both tracts' tables
    from censusrecon.synth.audit.neighbours import audit_frame
    frame, areas = audit_frame(resolve(cfg, pop), "01001", True)
    assert frame.size("BLOCK") == 2 and [m for _, m in areas["tract"]] == [[0], [1]]


def test_block_groups_are_a_level_of_the_tree_where_tracts_have_several(compact_agency):
    """On the 2010-shaped population (block numbers whose first digit is the block group), the tree has
    the block groups between the tracts and their blocks, as 2020's production tree; its release is
    consistent level by level. The compact population's tracts have one each, and no such level."""
    cfg = load_config(compact_agency,
                      ["data.population={shape: '2010', states: 1, counties_per_state: 1, tracts_per_county: 2}",
                       "attributes=[SEX, HISP]", "queries.tables=[P1]", "target.units=2",
                       "target.unit_ids=['01001000100', '01001000200']", "release.epsilons=[1.0]",
                       "release.mechanisms=[topdown]"])
    study = resolve(cfg)
    td = topdown_root(study, "01001000100", True)
    assert td.shape.levels == ["county", "tract", "block_group", "block"]
    groups, blocks = td.shape.ids[2], td.shape.ids[3]
    assert len(groups) > 2  # more block groups than tracts
    assert all(b.startswith(groups[p]) for b, p in zip(blocks, td.shape.parent[3]))
    assert all(g.startswith(td.shape.ids[1][p]) for g, p in zip(groups, td.shape.parent[2]))
    for unit in td.nodes:  # each tract's leaves are its listed blocks, in its BLOCK order
        assert td.shape.ids[-1][td.nodes[unit][2]].tolist() == study.blocks(unit)[0]
    rel = publish_topdown(cfg, td, 1.0, SimulationNoise(5))
    check_consistent(td.shape, rel.estimates)
    assert rel.estimates[0].sum() == td.tree.hist[0].sum()  # the root total, exact
    compact = load_config(compact_agency, ["release.epsilons=[1.0]", "release.mechanisms=[topdown]"])
    assert "block_group" not in topdown_root(resolve(compact), UNIT, True).shape.levels
