import numpy as np
import pandas as pd
import pytest

from experiments.metrics import average_curves, effective_u, k_grid, match_rate_curve
from microdata.errors import CensusReconError
from microdata.ranking import Ranking, rank_by_frequency


def test_hand_computed_match_rate():
    # R = (10, 20, 30, 40, 50); D holds 10, 30, 50, 60 (60 never guessed)
    r = Ranking(np.array([10, 20, 30, 40, 50]), np.array([5.0, 4, 3, 2, 1]))
    c = match_rate_curve(r, np.array([10, 30, 50, 60, 30]), np.array([1, 2, 3, 4, 5, 8]), u=4)
    assert c.num_matched.tolist() == [1, 1, 2, 2, 3, 3]
    assert c.num_candidates.tolist() == [1, 2, 3, 4, 5, 5]  # only 5 candidates exist
    np.testing.assert_allclose(c.match_rate, [1, 1 / 2, 2 / 3, 2 / 4, 3 / 5, 3 / 5])
    np.testing.assert_allclose(c.k_over_u, [0.25, 0.5, 0.75, 1.0, 1.25, 2.0])
    assert list(c.columns[:6]) == ["threshold", "k", "k_over_u", "num_candidates", "num_matched", "match_rate"]


def test_match_rate_bookkeeping_is_monotone():
    rng = np.random.default_rng(0)
    r = rank_by_frequency(rng.integers(0, 50, 400), rng=rng)
    c = match_rate_curve(r, rng.integers(0, 50, 30), np.arange(1, 60), u=30)
    assert (np.diff(c.num_matched) >= 0).all() and (np.diff(c.num_matched) <= 1).all()
    assert (np.diff(c.num_candidates) >= 0).all()
    assert (c.num_matched <= c.num_candidates).all()


def test_empty_ranking_has_undefined_match_rate():
    c = match_rate_curve(Ranking(np.zeros(0, np.int64), np.zeros(0)), np.array([1]), np.array([1]), u=1)
    assert np.isnan(c.match_rate[0]) and c.num_candidates[0] == 0


def test_u_is_capped_at_the_holdouts_distinct_rows():
    assert effective_u(100, 80) == 80
    assert effective_u(50, 80) == 50
    with pytest.raises(CensusReconError):
        effective_u(0, 3)
    assert k_grid(10, 4).tolist() == [3, 5, 8, 10]
    assert k_grid(2, 10).tolist() == [1, 2]


def test_average_curves_reads_each_unit_on_a_common_k_over_u_axis():
    rows = []
    for unit, u, rates in (("a", 2, [1.0, 0.5]), ("b", 4, [1.0, 1.0, 0.0, 0.0])):
        for k, mr in enumerate(rates, start=1):
            rows.append(dict(variant=False, method="m", unit=unit, u=u, k=k, match_rate=mr))
    avg = average_curves(pd.DataFrame(rows), 2, by=["variant", "method"])
    # x=0.5: a at k=1 (1.0), b at k=2 (1.0); x=1: a at k=2 (.5), b at k=4 (0)
    assert avg.match_rate.tolist() == [1.0, 0.25]
    assert avg.units.tolist() == [2, 2]
