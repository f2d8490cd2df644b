"""The cell key method: the perturbation table's laws, cell keys, and one perturbation per cell
whatever the table."""

import numpy as np
import pytest

from censusrecon.microdata.dataset import Dataset
from censusrecon.microdata.domain import Attribute, Domain
from censusrecon.microdata.marginals import Workload
from censusrecon.synth.cellkey import cell_key_tables, cell_keys, perturbation_table
from censusrecon.synth.mechanism import PrivacyError


@pytest.mark.parametrize("D, V, K", [(3, 1.0, 256), (5, 2.5, 4096), (2, 0.5, 64)])
def test_every_row_of_the_table_has_mean_zero_its_variance_and_no_negative_count(D, V, K):
    t = perturbation_table(D, V, K)
    assert t.table.shape == (D + 1, K) and np.all(t.table[0] == 0)  # zeros stay zero
    for c in range(1, D + 1):
        row = t.table[c]
        assert np.all(np.abs(row) <= D) and np.all(c + row >= 0)
        assert abs(row.mean()) <= 1.0 / K * D  # mean 0 up to one key's worth
        feasible = min(V, 0.98 * c * D)  # a count too small for V gets the most it can
        assert abs(row.var() - feasible) <= 2.0 * D * D / K
    # from D on the row is the symmetric one: a key and its mirror image perturb by opposite amounts
    assert sorted(t.table[D].tolist()) == sorted((-t.table[D]).tolist())
    with pytest.raises(PrivacyError, match="key range of at least"):
        perturbation_table(3, 1.0, 6)


def test_a_cell_key_is_the_sum_of_its_records_keys_modulo_the_range():
    dom = Domain((Attribute("A", ("x", "y")), Attribute("B", ("p", "q", "r"))))
    data = Dataset(dom, np.array([[0, 0], [0, 1], [1, 1], [0, 1]]))
    keys = np.array([200, 100, 7, 60])
    w = Workload.all_kway(dom, 1)  # A: x, y; B: p, q, r
    assert cell_keys(data, w, keys, 256).tolist() == [(200 + 100 + 60) % 256, 7, 200, (100 + 7 + 60) % 256, 0]


def test_a_cell_has_the_same_perturbation_in_every_table_it_appears_in():
    rng = np.random.default_rng(0)
    dom = Domain((Attribute("A", tuple("abc")), Attribute("B", tuple("pq")), Attribute("C", tuple("uvw"))))
    data = Dataset(dom, np.stack([rng.integers(0, n, 300) for n in dom.sizes], axis=1))
    t = perturbation_table(3, 2.0, 256)
    one = Workload(dom, (("A",),))
    two = Workload(dom, (("B",), ("A",), ("C",)))  # A's table again, beside others
    a1, facts = cell_key_tables(data, one, t, np.random.default_rng(5))
    a2, _ = cell_key_tables(data, two, t, np.random.default_rng(5))  # the same record keys
    assert np.array_equal(a1, a2[2:5]) and facts["max_perturbation"] == 3
    exact = np.bincount(data.column("A"), minlength=3)
    assert np.all(np.abs(a1 - exact) <= 3) and 0 < facts["cells_perturbed"] <= 1
