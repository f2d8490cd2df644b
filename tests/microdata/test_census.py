
import jax.numpy as jnp
import numpy as np
import pytest

from censusrecon.microdata.census import (CENRACE_COMBOS, CensusWorkload, TABLE_SETS, reference_cells, sf1_tables)
from censusrecon.microdata.dataset import Dataset
from censusrecon.microdata.domain import Attribute
from censusrecon.microdata.population import person_domain
from censusrecon.microdata.errors import CensusReconError
from censusrecon.microdata.population import PopulationSpec, embedded_population
from censusrecon.reconstruct.product_plan import ProductPlan
from censusrecon.reconstruct.relaxed import logits_from_codes, probabilities

EXPECTED_CELLS = {"P1": 1, "P6": 6, "P7": 12, "P8": 71, "P9": 73, "P10": 71, "P11": 73, "P12": 49, "P14": 43,
                  "PCT12": 209, **{f"P12{x}": 49 for x in "ABCDEFGHI"}, **{f"PCT12{x}": 209 for x in "ABCDEFGHIJKLMNO"}}


@pytest.fixture(scope="module")
def tract():
    pop = embedded_population(2, PopulationSpec(states=1, counties_per_state=1, tracts_per_county=1))
    d = pop.project(["AGE", "SEX", "HISP", "CENRACE"])
    blocks, code = np.unique(d.geography.units("block"), return_inverse=True)
    return d.with_column(Attribute.range("BLOCK", len(blocks)), code, 0)


def test_every_table_has_every_cell():
    t = sf1_tables()
    assert {k: len(v) for k, v in t.items()} == EXPECTED_CELLS
    assert len(CENRACE_COMBOS) == 63
    for name, cells in t.items():
        assert [c.number for c in cells] == sorted(c.number for c in cells)
        assert len({c.number for c in cells}) == len(cells)


def _answers(data, cells):
    w = CensusWorkload.build(data.domain, cells, block_attr=None)
    counts = np.rint(w.answer(data) * len(data)).astype(int)
    by_label = dict(zip(w.labels, counts))
    return {c.name: by_label.get(c.name) for c in cells}, w


def test_cells_add_up_to_their_totals(tract):
    d = tract.project(["AGE", "SEX", "HISP", "CENRACE"])
    t = sf1_tables()
    cells = [c for name, cs in t.items() for c in cs]
    w = CensusWorkload.build(d.domain, cells, block_attr=None)
    keyed = {}
    for c in cells:  # every cell's count, duplicates included
        single = CensusWorkload.build(d.domain, [c], block_attr=None)
        keyed[c.name] = int(round(single.answer(d)[0] * len(d)))
    n = len(d)
    assert keyed["P1_001"] == n
    # P12: the two sexes and their age groups add up to P1
    assert keyed["P12_002"] + keyed["P12_026"] == n
    assert sum(keyed[f"P12_{i:03d}"] for i in range(3, 26)) == keyed["P12_002"]
    assert sum(keyed[f"P12_{i:03d}"] for i in range(27, 50)) == keyed["P12_026"]
    # P8: one race + two or more = total; the 6 singles = one race; k-race subtotals = their combinations
    assert keyed["P8_002"] + keyed["P8_009"] == n
    assert sum(keyed[f"P8_{i:03d}"] for i in range(3, 9)) == keyed["P8_002"]
    assert keyed["P8_010"] == sum(keyed[f"P8_{i:03d}"] for i in range(11, 26))
    # P9: Hispanic + not Hispanic = total; P12A–G partition P1 by race group
    assert keyed["P9_002"] + keyed["P9_003"] == n
    assert sum(keyed[f"P12{x}_001"] for x in "ABCDEFG") == n
    # PCT12 single years add up; PCT12I–O partition the not-Hispanic persons
    assert sum(keyed[f"PCT12_{i:03d}"] for i in range(3, 106)) == keyed["PCT12_002"]
    assert sum(keyed[f"PCT12{x}_001"] for x in "IJKLMNO") == keyed["P9_003"]
    # P14 is the population under 20
    assert keyed["P14_001"] == int((d.column("AGE") < 20).sum())
    assert w.num_queries < len(cells)  # duplicates (P8_001 = P1_001, ...) are kept once


def test_reference_set_counts():
    ref = reference_cells()
    block = [c for c in ref if c.level == "block"]
    tract = [c for c in ref if c.level == "tract"]
    assert len(block) == 421 and len(tract) == 208
    from censusrecon.microdata.population import person_domain

    dom = person_domain().project(["AGE", "SEX", "HISP", "CENRACE"])
    with_block = dom.drop([]).__class__((Attribute.range("BLOCK", 7),) + dom.attributes)
    assert CensusWorkload.build(with_block, block).num_queries == 417 * 7
    assert CensusWorkload.build(with_block, ref).num_queries == 417 * 7 + 208
    # without BLOCK, four more queries coincide: the sex totals and males aged 20 and 21
    assert CensusWorkload.build(dom, ref).num_queries == 417 + 208 - 4
    # the kept defects: no female-by-age cells in P12, no P11 cell 48, no P8/P10/P14/PCT12A-O
    p12 = [c for c in ref if c.table == "P12"]
    assert [c.number for c in p12] == list(range(1, 27))
    assert 48 not in [c.number for c in ref if c.table == "P11"]
    assert not {c.table for c in ref} & {"P8", "P10", "P14", "PCT12A"}


def test_product_plan_matches_exact_answers_on_one_hot_rows(tract):
    cells = [c for name in TABLE_SETS["sf1"] for c in sf1_tables()[name]]
    w = CensusWorkload.build(tract.domain, cells)
    plan = ProductPlan.build(w)
    logits = logits_from_codes(jnp.asarray(tract.codes, dtype=jnp.int32), plan.layout, 1.0)
    got = np.asarray(plan.answers(probabilities(logits, plan.layout)))
    np.testing.assert_allclose(got, w.answer(tract), atol=1e-6)
    # the matmul counter gives the census cells' exact integer counts too
    from censusrecon.reconstruct.queries import exact_counts

    assert np.array_equal(exact_counts(plan, tract.codes), np.rint(w.answer(tract) * len(tract)).astype(np.int64))


def test_tables_needing_missing_attributes_are_named():
    from censusrecon.microdata.domain import Domain

    dom = Domain((Attribute.range("HISP", 2), Attribute.range("CENRACE", 63)))
    with pytest.raises(CensusReconError, match=r"tables \['P12'\] need attributes \['AGE', 'SEX'\]"):
        CensusWorkload.build(dom, sf1_tables()["P12"])
    assert CensusWorkload.build(dom, [c for n in TABLE_SETS["race_hispanic"] for c in sf1_tables()[n]]).num_queries > 0


def _brute_force_cells_per_person(w) -> int:
    """The most released queries any single person (every type, every block) is counted in."""
    import itertools

    best = 0
    for codes in itertools.product(*[range(s) for s in w.domain.sizes]):
        best = max(best, int(w.counts(Dataset(w.domain, np.array([codes]))).sum()))
    return best


@pytest.mark.parametrize("seed", range(12))
def test_census_sensitivity_is_the_brute_force_maximum_on_small_domains(seed):
    from censusrecon.microdata.census import Cell
    from censusrecon.microdata.domain import Attribute, Domain

    rng = np.random.default_rng(seed)
    attrs = [Attribute.range(f"X{i}", int(rng.integers(2, 4))) for i in range(int(rng.integers(2, 4)))]
    with_block = bool(seed % 2)
    dom = Domain(((Attribute.range("BLOCK", int(rng.integers(2, 4))),) if with_block else ()) + tuple(attrs))
    cells = []
    for t in range(int(rng.integers(2, 5))):  # tables of random product cells, block or tract level
        level = "tract" if rng.random() < 0.3 else "block"
        for number in range(int(rng.integers(1, 6))):
            sets = {}
            for a in attrs:
                if rng.random() < 0.6:
                    vals = rng.choice(a.size, size=int(rng.integers(1, a.size + 1)), replace=False)
                    sets[a.name] = frozenset(int(v) for v in vals)
            cells.append(Cell(f"T{t}", number + 1, "cell", tuple(sorted(sets.items())), level))
    w = CensusWorkload.build(dom, cells)
    assert w.max_cells_per_person() == _brute_force_cells_per_person(w)


def test_census_sensitivity_of_the_sf1_set_is_the_maximum_over_persons_not_the_sum_of_table_maxima():
    from censusrecon.microdata.domain import Attribute, Domain

    base = person_domain().project(["AGE", "SEX", "HISP", "CENRACE"])
    dom = Domain((Attribute.range("BLOCK", 3),) + tuple(base.attributes))
    t = sf1_tables()
    w = CensusWorkload.build(dom, [c for name in TABLE_SETS["sf1"] for c in t[name]])
    assert w.max_cells_per_person() == 42  # 99 when each table's own maximum was summed
    assert CensusWorkload.build(dom, reference_cells()).max_cells_per_person() == 26  # was 51


def _area_workload():
    """Three blocks in two tracts (blocks 0 and 1 in T1, block 2 alone in T2): a total per block, a
    total and a SEX table per tract, and the unit's total."""
    from censusrecon.microdata.domain import Domain
    from censusrecon.microdata.tables import build_table_cells

    domain = Domain((Attribute.range("BLOCK", 3), Attribute("SEX", ("1", "2"))))
    specs = [{"name": "BT", "level": "block", "by": []}, {"name": "TT", "level": "tract", "by": []},
             {"name": "TS", "level": "tract", "by": ["SEX"]}, {"name": "UT", "level": "county", "by": []}]
    cells = build_table_cells(specs, domain, "county", coarser=["state"], finer=["tract"])
    return CensusWorkload.build(domain, cells, areas={"tract": [("T1", [0, 1]), ("T2", [2])]}), domain


def test_tables_per_tract_inside_a_county_are_one_query_per_tract_and_count_its_blocks():
    w, domain = _area_workload()
    data = Dataset(domain, np.array([[0, 0], [1, 1], [1, 0], [2, 1]]))
    got = dict(zip(w.labels, w.counts(data).tolist()))
    assert got == {"BT_001@0": 1, "BT_001@1": 2, "BT_001@2": 1, "TT_001@T1": 3,  # T2's total is block 2's total
                   "TS_001@T1": 2, "TS_002@T1": 1, "TS_001@T2": 0, "TS_002@T2": 1, "UT_001": 4}
    assert dict(w.cells_per_table) == {"BT": 3, "TT": 2, "TS": 4, "UT": 1}
    assert w.level_order() == ["block", "tract", "unit"]
    assert dict(zip(w.labels, w.levels()))["TT_001@T1"] == "tract"


def test_cells_per_person_takes_the_block_whose_person_lies_in_the_most_queries():
    """A person of block 0 or 1 lies in their block's total, T1's total, T1's SEX cell and the unit's
    total (4); one of block 2 in 3, as T2's total is the same query as block 2's total. Taking any
    one block for all (block 2 here, say) would undercount the sensitivity."""
    w, _ = _area_workload()
    assert w.cells_per_person().tolist() == [4, 4]
    assert w.max_cells_per_person() == 4
    # blocks 0 and 2 lie in queries of the same person parts (0 and 1), block 1 in another multiset
    assert CensusWorkload._block_classes(np.array([[1, 0, 1], [0, 1, 0], [0, 1, 1]], dtype=bool),
                                         np.array([[0], [0], [1]])) == [0, 1]


def test_units_of_one_shape_share_the_workloads_template_and_get_their_own_labels(tract):
    """The tables' workload of a unit is the one every cell placed and deduplicated gives (CensusWorkload._build),
    whether it was built for the first time or relabelled from another unit of the same shape (blocks named
    otherwise): with BLOCK, with areas, and without BLOCK."""
    from censusrecon.microdata.census import _workload_template

    cells = [c for name in TABLE_SETS["sf1"] for c in sf1_tables()[name]]
    n = tract.domain.size("BLOCK")
    from censusrecon.microdata.domain import Domain

    other = Domain((Attribute("BLOCK", tuple(f"b{n - i}" for i in range(n))),) + tuple(tract.domain.attributes[1:]))
    _workload_template.cache_clear()
    first = CensusWorkload.build(tract.domain, cells)
    second = CensusWorkload.build(other, cells)  # from the first's template
    assert _workload_template.cache_info().hits == 1
    assert first == CensusWorkload._build(tract.domain, cells)
    assert second == CensusWorkload._build(other, cells)
    assert second.labels != first.labels and second.queries is first.queries
    assert f"P1_001@b{n}" in second.labels and "P1_001@b" not in "".join(first.labels[:3])
    w, domain = _area_workload()  # areas: their names stay as they are, the blocks' are the domain's
    assert w == CensusWorkload._build(domain, w_cells := _area_cells(domain), areas={"tract": [("T1", [0, 1]), ("T2", [2])]})
    assert CensusWorkload.build(domain, w_cells, areas={"tract": [("T1", [0]), ("T2", [1, 2])]}) == CensusWorkload._build(
        domain, w_cells, areas={"tract": [("T1", [0]), ("T2", [1, 2])]})  # other areas: another template
    persons = tract.project(["AGE", "SEX", "HISP", "CENRACE"]).domain
    assert CensusWorkload.build(persons, cells) == CensusWorkload._build(persons, cells)


def _area_cells(domain):
    from censusrecon.microdata.tables import build_table_cells

    specs = [{"name": "BT", "level": "block", "by": []}, {"name": "TT", "level": "tract", "by": []},
             {"name": "TS", "level": "tract", "by": ["SEX"]}, {"name": "UT", "level": "county", "by": []}]
    return build_table_cells(specs, domain, "county", coarser=["state"], finer=["tract"])
