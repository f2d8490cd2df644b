
import numpy as np
import pytest

from censusrecon.microdata.errors import DomainError
from censusrecon.microdata.marginals import Workload, answer, marginal_counts


def _loop_counts(data, marg):
    shape = [data.domain.size(a) for a in marg]
    out = np.zeros(shape, dtype=np.int64)
    for row in data.codes:
        out[tuple(row[data.domain.index(a)] for a in marg)] += 1
    return out.reshape(-1)


def test_answers_match_a_row_loop(small_data):
    w = Workload.all_kway(small_data.domain, 2, lower=True)
    assert len(w.marginals) == 3 + 3
    got = answer(small_data, w)
    want = np.concatenate([_loop_counts(small_data, m) for m in w.marginals]) / len(small_data)
    np.testing.assert_allclose(got, want)
    for m, s in zip(w.marginals, np.split(got, w.offsets()[1:-1])):
        assert s.sum() == pytest.approx(1.0)  # each marginal's cells partition the rows


def test_marginal_order_is_respected(small_data):
    c_ab = marginal_counts(small_data, ("A", "B")).reshape(2, 3)
    c_ba = marginal_counts(small_data, ("B", "A")).reshape(3, 2)
    assert np.array_equal(c_ab, c_ba.T)


def test_workload_validation(small_data):
    dom = small_data.domain
    assert Workload.all_kway(dom, 3).marginals == (("A", "B", "C"),)
    assert Workload.all_kway(dom, 2).num_queries == 6 + 8 + 12
    with pytest.raises(DomainError, match="appears twice"):
        Workload(dom, (("A", "B"), ("B", "A")))
    with pytest.raises(DomainError, match="k must be between 1 and"):
        Workload.all_kway(dom, 4)
    with pytest.raises(DomainError, match="unknown attribute 'Q'"):
        Workload(dom, (("Q",),))
