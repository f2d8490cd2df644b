"""The audit's yardstick: sensitivities by brute force from the tables' definitions (hand-made cases with known
answers, and the exhaustive pairwise maximum on a small domain), the zCDP budget and its check by OpenDP's map,
and the yardstick's independence of the code that publishes."""

import ast
import itertools
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from censusrecon.synth.audit.yardstick import (cells_of, detailed_sensitivity, node_table_sensitivity, opendp_epsilon,
                                           table_sensitivity, zcdp_rho)
from censusrecon.microdata.census import Cell, CensusWorkload
from censusrecon.microdata.domain import Domain

ROOT = Path(__file__).resolve().parents[2]


def _small():
    """4 blocks in 2 areas (blocks 0-1, 2-3); S (2 values) and A (3). Per block: its total and S (2 cells a
    person is in: the total and their S); per area: S × A (1); per unit: its total and A (2). Every person is
    in 5 cells; two persons of different areas share only the unit's total, and its A cell if theirs agree."""
    dom = Domain.from_sizes({"BLOCK": 4, "S": 2, "A": 3})
    everyone = ()
    cells = [Cell("T", 1, "total", everyone, "block")]
    cells += [Cell("S", i, f"S={s}", (("S", frozenset({s})),), "block") for i, s in enumerate(range(2))]
    cells += [Cell("SA", 3 * s + a, f"S={s},A={a}", (("S", frozenset({s})), ("A", frozenset({a}))), "area")
              for s in range(2) for a in range(3)]
    cells += [Cell("U", 1, "total", everyone, "unit")]
    cells += [Cell("A", a, f"A={a}", (("A", frozenset({a})),), "unit") for a in range(3)]
    w = CensusWorkload.build(dom, cells, areas={"area": [("a0", [0, 1]), ("a1", [2, 3])]})
    return dom, w


def _pairwise(w, dom, persons, relation):
    """The maximum by enumeration: every person of ``persons`` against every row of the domain."""
    every = np.array(list(itertools.product(*[range(s) for s in dom.sizes])), dtype=np.int64)
    cx, cy = cells_of(w, persons).astype(int), cells_of(w, every).astype(int)
    if relation == "add_remove":
        return int(cy.sum(axis=1).max())
    return int(max(np.abs(cx[i][None, :] - cy).sum(axis=1).max() for i in range(len(cx))))


def test_the_hand_made_census_tables_have_the_sensitivities_counted_by_hand():
    dom, w = _small()
    D = np.array([[0, 0, 0], [1, 1, 2], [3, 0, 1]])
    assert cells_of(w, D).sum(axis=1).tolist() == [5, 5, 5]
    assert table_sensitivity(w, D, "add_remove").l1 == 5
    s = table_sensitivity(w, D, "replace_one")
    assert s.l1 == 8  # 5 + 5 - 2: a person moved to the other area shares only the unit's total
    x, y = s.pair
    assert np.abs(cells_of(w, x).astype(int) - cells_of(w, y).astype(int)).sum() == 8  # the pair attains it
    assert s.exhaustive and "block" in s.worst


def test_the_brute_force_equals_the_exhaustive_pairwise_maximum():
    """Random tables over a small domain with blocks in areas, and random units: every pair enumerated."""
    for trial in range(6):
        r = np.random.default_rng(trial)
        dom = Domain.from_sizes({"BLOCK": 5, "S": 2, "A": 4, "R": 3})
        cells = []
        for i in range(12):
            attrs = [a for a in ("S", "A", "R") if r.random() < 0.6]
            sets = tuple((a, frozenset(r.choice(dom.size(a), r.integers(1, dom.size(a) + 1), replace=False).tolist()))
                         for a in attrs)
            cells.append(Cell(f"t{i}", i, f"c{i}", sets, str(r.choice(["block", "area", "unit"]))))
        w = CensusWorkload.build(dom, cells, areas={"area": [("a0", [0, 1]), ("a1", [2, 3, 4])]})
        D = np.stack([r.integers(0, s, 7) for s in dom.sizes], axis=1)
        for relation in ("add_remove", "replace_one"):
            assert table_sensitivity(w, D, relation).l1 == _pairwise(w, dom, D, relation), (trial, relation)


def test_marginals_follow_their_definition():
    from censusrecon.microdata.marginals import Workload

    dom = Domain.from_sizes({"A": 2, "B": 3, "C": 1})
    w = Workload(dom, [("A",), ("A", "B"), ("C",)])
    every = np.array(list(itertools.product(*[range(s) for s in dom.sizes])), dtype=np.int64)
    for relation in ("add_remove", "replace_one"):
        assert table_sensitivity(w, None, relation).l1 == _pairwise(w, dom, every, relation)
    assert table_sensitivity(w, None, "replace_one").l1 == 4  # C has one value: its marginal cannot change


def test_a_tree_level_of_several_nodes_lets_a_person_leave_for_another_node():
    dom, w = _small()
    person = Domain.from_sizes({"S": 2, "A": 3})
    pw = CensusWorkload.build(person, [c for c in [Cell("U", 1, "total", (), "unit")] +
                                       [Cell("A", a, f"A={a}", (("A", frozenset({a})),), "unit") for a in range(3)]])
    present = np.array([[0, 0], [1, 2]])
    assert node_table_sensitivity(pw, present, "replace_one", nodes=1).l1 == 2  # the total is shared in a node
    assert node_table_sensitivity(pw, present, "replace_one", nodes=3).l1 == 4  # 2 + 2 across nodes
    assert node_table_sensitivity(pw, present, "add_remove", nodes=3).l1 == 2
    assert detailed_sensitivity("replace_one") == 2 and detailed_sensitivity("add_remove") == 1


def test_the_zcdp_budget_is_bun_and_steinkes_and_opendps_map_confirms_it():
    for eps in (0.5, 2.0, 8.0):
        rho = zcdp_rho(eps, 1e-10)
        assert rho + 2 * np.sqrt(rho * np.log(1e10)) == pytest.approx(eps, rel=1e-12)
        assert opendp_epsilon(rho, 1e-10) <= eps  # OpenDP's tighter conversion: the declared one holds
        assert opendp_epsilon(1.5 * rho, 1e-10) > eps  # and the check can fail: 50% more ρ is over ε


def test_the_yardstick_imports_nothing_of_the_code_that_publishes():
    """It lives in the audit's room (synth/audit/), whose package files import nothing: loading it loads no
    module of the code that publishes (synth's mechanisms, noise, releases), of the attack or of experiments."""
    def imports(path):
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module != "__future__":
                found.add(node.module)
        return found

    ours = imports(ROOT / "synth" / "audit" / "yardstick.py")
    assert {m for m in ours if m.removeprefix("censusrecon.").split(".")[0] in {"synth", "experiments", "reconstruct",
                                                                                  "baselines"}} == set()
    assert not imports(ROOT / "synth" / "__init__.py") and not imports(ROOT / "synth" / "audit" / "__init__.py")
    room = ["censusrecon.synth", "censusrecon.synth.audit", "censusrecon.synth.audit.yardstick"]
    code = ("import sys, censusrecon.synth.audit.yardstick as y; y.opendp_epsilon(0.1, 1e-10); "
            f"bad = sorted(m for m in sys.modules if m not in {room!r} and m.split('.')[:2] in (['censusrecon', "
            "'synth'], ['censusrecon', 'reconstruct'], ['censusrecon', 'baselines'], ['censusrecon', 'experiments'])); "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
