"""Exact reconstruction by integer programming: solutions satisfy the tables, certificates are sound."""

import itertools
import time

import numpy as np
import pytest

from censusrecon.microdata.census import Cell, CensusWorkload
from censusrecon.microdata.dataset import Dataset
from censusrecon.microdata.domain import Attribute, Domain
from censusrecon.reconstruct.exact import build_count_model, certify_rows, reconstruct_exact

pytest.importorskip("highspy")

DOM = Domain((Attribute.range("BLOCK", 1), Attribute.range("A", 2), Attribute.range("B", 2)))


def _workload(dom, tables):
    cells = [Cell(t, i + 1, "c", tuple(sorted(sets.items())), "block") for t, cs in tables for i, sets in enumerate(cs)]
    return CensusWorkload.build(dom, cells)


def _consistent_datasets(w, counts, total):
    """Every dataset of ``total`` persons (as counts per row type) consistent with the published
    counts, by brute force."""
    types = list(itertools.product(*[range(s) for s in w.domain.sizes]))
    out = []
    for combo in itertools.combinations_with_replacement(range(len(types)), total):
        d = Dataset(w.domain, np.array([types[i] for i in combo]))
        if np.array_equal(w.counts(d), counts):
            out.append(np.bincount(d.keys(), minlength=w.domain.total_size))
    return out


def test_tables_that_admit_one_dataset_certify_it_whole():
    # the full A × B table of one block: the published counts are the dataset
    w = _workload(DOM, [("T", [{}]), ("AB", [{"A": {a}, "B": {b}} for a in range(2) for b in range(2)])])
    D = Dataset(DOM, np.array([[0, 0, 1], [0, 0, 1], [0, 1, 0]]))
    res, _ = reconstruct_exact(w, w.counts(D), time_limit=30)
    assert res.solved and res.certification_complete
    keys, counts = res.certified_rows()
    truth_keys, truth_counts = np.unique(D.keys(), return_counts=True)
    assert np.array_equal(np.sort(keys), truth_keys) and counts[np.argsort(keys)].tolist() == truth_counts.tolist()
    assert res.facts()["blocks_zero_variability"] == 1 and res.facts()["persons_in_zero_variability_blocks"] == 3
    # the LP relaxation's minimum of each cell is its count here: certified without an integer solve
    # (an LP screen that always read 0 needed one per cell)
    assert res.integer_solves == 1 and res.lp_solves >= 3  # the one integer solve is the solution itself


def test_two_consistent_datasets_certify_only_their_common_rows():
    # one-way margins of A and B only: {(0,0),(1,1)} and {(0,1),(1,0)} both fit; (1,1) x 2 is in every one
    w = _workload(DOM, [("T", [{}]), ("A", [{"A": {0}}, {"A": {1}}]), ("B", [{"B": {0}}, {"B": {1}}])])
    D = Dataset(DOM, np.array([[0, 0, 0], [0, 1, 1], [0, 1, 1], [0, 1, 1]]))  # A: 1, 3; B: 1, 3
    counts = w.counts(D)
    consistent = _consistent_datasets(w, counts, len(D))
    assert len(consistent) == 2
    always = np.min(np.stack(consistent), axis=0)  # what every consistent dataset contains
    res, solver = reconstruct_exact(w, counts, time_limit=30)
    assert res.solved and res.certification_complete
    got = np.zeros(DOM.total_size, dtype=np.int64)
    keys, levels = res.certified_rows()
    got[keys] = levels
    assert got.tolist() == always.tolist()  # (0,1,1) at least twice, nothing else
    assert res.facts()["blocks_zero_variability"] == 0
    # Generate-then-Verify on candidates: only rows in every consistent dataset are proven
    rows = DOM.encode(np.array([[0, 1, 1], [0, 0, 0], [0, 1, 0]]))
    cert = certify_rows(solver, res.model, rows)
    assert cert.proven.tolist() == [True, False, False] and cert.complete and cert.undecided == 0
    # with no time left nothing is decided, and the flag says so (a count of proven rows is then short)
    solver.deadline = time.perf_counter() - 1.0
    cert = certify_rows(solver, res.model, rows)
    assert not cert.proven.any() and not cert.complete and cert.undecided == 3


def test_a_certified_count_above_ds_own_count_stops_the_run():
    """The impossibility check compares counts, not presence: D holding a certified row once where
    the certificate says twice is impossible."""
    from censusrecon.experiments.exact_eval import check_certified_counts
    from censusrecon.microdata.errors import CensusReconError

    w = _workload(DOM, [("T", [{}]), ("A", [{"A": {0}}, {"A": {1}}]), ("B", [{"B": {0}}, {"B": {1}}])])
    D = Dataset(DOM, np.array([[0, 0, 0], [0, 1, 1], [0, 1, 1], [0, 1, 1]]))
    res, _ = reconstruct_exact(w, w.counts(D), time_limit=30)
    check_certified_counts(res, D.keys(), "u")  # (0,1,1) certified twice, D holds it three times
    fewer = np.array([k for k in D.keys().tolist()][:3])  # (0,0,0), (0,1,1), (0,1,1): still twice
    check_certified_counts(res, fewer, "u")
    once = np.array(D.keys().tolist()[:2])  # (0,1,1) present, but once
    with pytest.raises(CensusReconError, match="certified 2 times but D holds it 1 times"):
        check_certified_counts(res, once, "u")


def test_published_zeros_remove_variables_before_the_solver_sees_them():
    w = _workload(DOM, [("A", [{"A": {0}}, {"A": {1}}])])
    model = build_count_model(w, np.array([0, 2]))
    assert model.variables_before == 4 and model.num_variables == 2  # A = 0 rows are gone
    assert set(model.codes[:, 1].tolist()) == {1}


def test_a_unit_past_its_time_limit_is_unsolved_not_zero_certified():
    w = _workload(DOM, [("A", [{"A": {0}}, {"A": {1}}])])
    res, _ = reconstruct_exact(w, np.array([1, 2]), time_limit=0.0)
    assert not res.solved and res.status.startswith("not solved within") and res.certified is None
    assert "certified_rows" not in res.facts()


def test_inconsistent_tables_are_infeasible():
    w = _workload(DOM, [("T", [{}]), ("A", [{"A": {0}}, {"A": {1}}])])
    res, _ = reconstruct_exact(w, np.array([5, 1, 1]), time_limit=30)
    assert res.status == "infeasible"


@pytest.mark.parametrize("seed", range(6))
def test_certified_rows_are_in_every_brute_forced_consistent_dataset(seed):
    rng = np.random.default_rng(seed)
    dom = Domain((Attribute.range("BLOCK", 2), Attribute.range("A", 2), Attribute.range("B", 3)))
    tables = [("T", [{}]), ("A", [{"A": {0}}, {"A": {1}}]), ("B", [{"B": {b}} for b in range(3)])]
    if seed % 2:
        tables.append(("AB0", [{"A": {a}, "B": {0}} for a in range(2)]))
    w = _workload(dom, tables)
    D = Dataset(dom, np.stack([rng.integers(0, s, 5) for s in dom.sizes], axis=1))
    counts = w.counts(D)
    res, _ = reconstruct_exact(w, counts, time_limit=30)
    assert res.solved and np.array_equal(w.counts(Dataset(dom, dom.decode(np.repeat(*res.rows())))), counts)
    keys, levels = res.certified_rows()
    truth = np.bincount(D.keys(), minlength=dom.total_size)
    assert np.all(truth[keys] >= levels)  # certified rows are in D, at least as often as certified
    always = np.min(np.stack(_consistent_datasets(w, counts, len(D))), axis=0)
    got = np.zeros(dom.total_size, dtype=np.int64)
    got[keys] = levels
    assert np.all(got <= always)  # sound: never more than every consistent dataset has
    assert np.array_equal(got >= 1, always >= 1)  # and every row in all of them is found


def _solve_coarse(w, rng):
    """A random D of 3-5 persons over ``w``'s domain (BLOCK, A of 3 values, B of 2), its tables solved
    with A's values 0 and 1 one coarse group: (result, counts, persons, each type's coarse cell
    (block × 4 + group × 2 + B), the solution as counts per type)."""
    dom = w.domain
    n = int(rng.integers(3, 6))
    D = Dataset(dom, np.stack([rng.integers(0, s, n) for s in dom.sizes], axis=1))
    counts = w.counts(D)
    coarse = np.array([0, 0, 1])
    res, _ = reconstruct_exact(w, counts, time_limit=30, certify_support=False, coarsen={"A": coarse})
    assert res.solved
    codes = dom.decode(np.arange(dom.total_size))
    x = np.zeros(dom.total_size, np.int64)
    keys, c = res.rows()
    x[keys] = c
    return res, counts, n, codes[:, 0] * 4 + coarse[codes[:, 1]] * 2 + codes[:, 2], x


@pytest.mark.parametrize("seed", range(8))
def test_coarse_zero_variability_agrees_with_brute_force(seed):
    """A block has zero variability on the coarse schema (A's values 0 and 1 one group) exactly when
    every brute-forced consistent dataset has the same coarse counts in it."""
    rng = np.random.default_rng(100 + seed)
    dom = Domain((Attribute.range("BLOCK", 2), Attribute.range("A", 3), Attribute.range("B", 2)))
    tables = [("T", [{}]), ("A", [{"A": {a}} for a in range(3)])]
    if seed % 3 == 0:
        tables.append(("B", [{"B": {b}} for b in range(2)]))
    if seed % 2:
        tables.append(("AB", [{"A": {0, 1}, "B": {b}} for b in range(2)]))
    if seed % 4 >= 2:
        tables.append(("A2", [{"A": {2}, "B": {0}}]))
    w = _workload(dom, tables)
    res, counts, n, group, x = _solve_coarse(w, rng)
    assert res.coarse_complete
    codes = dom.decode(np.arange(dom.total_size))
    seen = {}
    for y in _consistent_datasets(w, counts, n):
        g = np.bincount(group, weights=y, minlength=8)
        for b in range(2):
            seen.setdefault(b, set()).add(tuple(g[4 * b:4 * b + 4]))
    for b, info in res.blocks_coarse.items():
        assert info["zero_variability"] is (len(seen[b]) == 1), (b, seen[b])
        assert info["persons"] == int(x[codes[:, 0] == b].sum())
    assert set(res.blocks_coarse) == {b for b in range(2) if (codes[:, 0][x > 0] == b).any()}
    # every table here is a block's own, so the Bureau's relaxation is exact: solvar is the most records
    # any consistent dataset changes in the block, found by brute force
    xg = np.bincount(group, weights=x, minlength=8)
    assert res.solvar_complete
    for b, info in res.blocks_coarse.items():
        most = max(np.maximum(xg[4 * b:4 * b + 4] - np.array(g), 0).sum() for g in seen[b])
        assert info["solvar_exact"] and info["solvar"] == pytest.approx(100 * most / info["persons"]), (b, seen[b])


def test_solution_variability_on_two_keys_differs_where_the_coarser_key_hides_which_child_has_which_race():
    """The Bureau's text keys solvar on 38 age bins (single years under 22); its released code on P12's
    23 groups (under 5 one group). Two children of ages 0 and 1, of two races, in a block that publishes
    its total, age in P12's groups and race: every consistent block has two under-5s of those races, so
    the P12 key gives solvar 0, but which child is which (or both 0, both 1) is open: single years give
    100% (x = {0: race 0, 1: race 1} against y = {1: race 0, 0: race 1} differs in both records)."""
    dom = Domain((Attribute.range("BLOCK", 1), Attribute.range("AGE", 4), Attribute.range("RACE", 2)))
    w = _workload(dom, [("T", [{}]), ("P12", [{"AGE": {0, 1}}, {"AGE": {2, 3}}]),
                        ("RACE", [{"RACE": {r}} for r in range(2)])])
    D = Dataset(dom, np.array([[0, 0, 0], [0, 1, 1]]))
    res, _ = reconstruct_exact(w, w.counts(D), time_limit=30, certify_support=False,
                               coarsen={"AGE": np.arange(4)}, solvar_keys={"p12": {"AGE": np.array([0, 0, 1, 1])}})
    [info] = res.blocks_coarse.values()
    assert info["solvar"] == pytest.approx(100.0) and info["solvar_p12"] == 0.0
    f = res.facts()
    assert (f["solvar_blocks_zero"], f["solvar_p12_blocks_zero"], f["cumsolvar_p12"]) == (0, 1, 0.0)
    assert f["solvar_p12_complete"] and f["cumsolvar"] == pytest.approx(100.0)


def test_the_bureaus_relaxation_keeps_a_tract_tables_row_an_upper_bound_where_zeros_leave_it_in_one_block():
    """Rows are classified by table, as the Bureau's code does: block 1 is empty, so the tract's one cell
    (B = 0: 2 persons) has all its surviving variables in block 0; as the block's own equality it would
    fix both persons' B (solvar 0), as the tract table's ≤ it lets both be B = 1 (solvar 100%)."""
    dom = Domain((Attribute.range("BLOCK", 2), Attribute.range("A", 2), Attribute.range("B", 2)))
    cells = [Cell("T", 1, "c", (), "block")] + [Cell("A", a + 1, "c", (("A", frozenset({a})),), "block")
                                                 for a in range(2)]
    cells += [Cell("TB", 1, "c", (("B", frozenset({0})),), "tract")]
    w = CensusWorkload.build(dom, cells)
    D = Dataset(dom, np.array([[0, 0, 0], [0, 1, 0]]))
    res, _ = reconstruct_exact(w, w.counts(D), time_limit=30, certify_support=False,
                               coarsen={"A": np.arange(2)})
    assert res.blocks_coarse[0]["solvar"] == pytest.approx(100.0)
    assert res.blocks_coarse[0]["zero_variability"] is True  # on all the tables: the tract's equality holds


@pytest.mark.parametrize("seed", range(6))
def test_the_bureaus_solution_variability_bounds_every_consistent_dataset_with_tract_tables(seed):
    """With tables over the whole unit (the tract's), solvar is computed on the Bureau's relaxation (the
    block's own tables, the tract's as upper bounds on the block alone): it bounds the records any
    brute-forced consistent dataset changes, and solvar 0 implies zero variability on all the tables."""
    rng = np.random.default_rng(200 + seed)
    dom = Domain((Attribute.range("BLOCK", 2), Attribute.range("A", 3), Attribute.range("B", 2)))
    cells = [Cell("T", 1, "c", (), "block")] + [Cell("A", a + 1, "c", (("A", frozenset({a})),), "block")
                                                 for a in range(3)]
    cells += [Cell("TB", b + 1, "c", (("B", frozenset({b})),), "tract") for b in range(2)]  # over the unit
    if seed % 2:
        cells += [Cell("TAB", b + 1, "c", (("A", frozenset({0, 1})), ("B", frozenset({b}))), "tract")
                  for b in range(2)]
    w = CensusWorkload.build(dom, cells)
    res, counts, n, group, x = _solve_coarse(w, rng)
    assert res.solvar_complete
    xg = np.bincount(group, weights=x, minlength=8)
    for y in _consistent_datasets(w, counts, n):
        yg = np.bincount(group, weights=y, minlength=8)
        for b, info in res.blocks_coarse.items():
            differ = np.maximum(xg[4 * b:4 * b + 4] - yg[4 * b:4 * b + 4], 0).sum()
            assert 100 * differ / info["persons"] <= info["solvar"] + 1e-9
    for info in res.blocks_coarse.values():
        if info["solvar"] == 0:
            assert info["zero_variability"] is True


def test_least_deviation_reaches_the_lp_optimum_over_the_whole_domain_and_fits_consistent_tables():
    from scipy.optimize import linprog

    from censusrecon.reconstruct.exact import query_matrix
    from censusrecon.reconstruct.least_deviation import reconstruct_least_deviation

    dom = Domain((Attribute.range("BLOCK", 2), Attribute.range("A", 4), Attribute.range("B", 3)))
    tables = [("T", [{}]), ("A", [{"A": {a}} for a in range(4)]), ("B", [{"B": {b}} for b in range(3)]),
              ("AB", [{"A": {a}, "B": {b}} for a in range(4) for b in range(3)])]
    w = _workload(dom, tables)
    rng = np.random.default_rng(0)
    D = Dataset(dom, np.stack([rng.integers(0, 2, 30), rng.integers(0, 4, 30), rng.integers(0, 3, 30)], axis=1))
    exact = w.counts(D)
    res = reconstruct_least_deviation(w, exact, 1.0, time_limit=60, total=len(D))
    assert res.solved and res.residual == pytest.approx(0) and res.counts.sum() == len(D)
    x = np.zeros(dom.total_size, np.int64)
    x[res.cells] = res.counts
    assert np.array_equal(query_matrix(w) @ x, exact)  # consistent tables are fitted exactly
    noisy = exact + rng.integers(-3, 4, len(exact))
    noisy[::5] = 0  # noisy zeros rule nothing out
    res = reconstruct_least_deviation(w, noisy, 2.0, time_limit=60, total=len(D), max_add=2)
    A = query_matrix(w).toarray()
    nq, nc = A.shape
    full = linprog(np.concatenate([np.zeros(nc), np.full(2 * nq, 0.5)]),
                   A_eq=np.vstack([np.hstack([A, -np.eye(nq), np.eye(nq)]),
                                   np.concatenate([np.ones(nc), np.zeros(2 * nq)])[None, :]]),
                   b_eq=np.append(noisy, len(D)), bounds=(0, None), method="highs")
    assert res.solved and res.lp_residual == pytest.approx(full.fun)  # column generation found the LP optimum
    assert res.residual >= full.fun - 1e-9 and res.counts.sum() == len(D) and res.rounds > 1



def test_a_count_model_not_built_within_the_time_limit_is_not_solved_and_says_so():
    """Tables with few zeros (noisy ones made consistent) leave nearly the whole domain as variables, and
    building the model can take far longer than the solve (on CENRACE with blocks it ran past 8 minutes
    under a 30 s limit). The build has the time limit too: past it the result is not solved and names what
    was not built, its variables counted; a limit that leaves time builds and solves as before."""
    w = _workload(DOM, [("T", [{}]), ("AB", [{"A": {a}, "B": {b}} for a in range(2) for b in range(2)])])
    D = Dataset(DOM, np.array([[0, 0, 1], [0, 0, 1], [0, 1, 0]]))
    res, solver = reconstruct_exact(w, w.counts(D), time_limit=0.0, certify_support=False)
    assert res.status.startswith("not solved within 0 s (the count model (2 variables") and not res.solved
    assert "not built in time: 0 of its 3 cells done" in res.status and solver is None
    assert res.facts()["variables"] == 2  # the cells no published zero rules out: (A, B) = (0, 1) and (1, 0)
    res, _ = reconstruct_exact(w, w.counts(D), time_limit=30.0, certify_support=False)
    assert res.solved
