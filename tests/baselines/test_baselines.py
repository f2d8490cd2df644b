import numpy as np
import pytest

from censusrecon.baselines.holdout import holdout_split
from censusrecon.baselines.priors import BlockStrengthenedPrior, ChancePrior, EmpiricalPrior, geographic_priors
from censusrecon.experiments.metrics import effective_u, k_grid, match_rate_curve
from censusrecon.microdata.dataset import Dataset
from censusrecon.microdata.domain import Attribute, Domain
from censusrecon.microdata.errors import CensusReconError
from censusrecon.microdata.population import PopulationSpec, embedded_population


def test_split_is_disjoint_complete_and_seeded(small_data):
    tagged = small_data.with_column(Attribute.range("ROW", len(small_data)), np.arange(len(small_data)), 0)
    D, H = holdout_split(tagged, np.random.default_rng(5), 0.5)
    ids_d, ids_h = set(D.column("ROW").tolist()), set(H.column("ROW").tolist())
    assert not ids_d & ids_h
    assert ids_d | ids_h == set(range(len(small_data)))
    assert len(H) == len(small_data) // 2
    D2, H2 = holdout_split(tagged, np.random.default_rng(5), 0.5)
    assert np.array_equal(D.codes, D2.codes) and np.array_equal(H.codes, H2.codes)
    D3, _ = holdout_split(tagged, np.random.default_rng(6), 0.5)
    assert not np.array_equal(D.codes, D3.codes)
    with pytest.raises(CensusReconError, match="fraction"):
        holdout_split(tagged, np.random.default_rng(0), 1.0)


def test_empirical_prior_ranks_by_frequency():
    dom = Domain.from_sizes({"A": 4})
    prior = EmpiricalPrior(dom, np.array([[2], [2], [2], [0], [0], [3]]))
    r = prior.ranking()
    assert r.keys.tolist() == [2, 0, 3] and r.scores.tolist() == [3, 2, 1]


def test_block_strengthened_prior_ranks_by_the_product_distribution():
    inner = EmpiricalPrior(Domain.from_sizes({"A": 3}), np.array([[0], [0], [0], [1]]))  # p(A)= .75,.25
    dom = Domain((Attribute.range("BLOCK", 2), Attribute.range("A", 3)))
    prior = BlockStrengthenedPrior(dom, np.array([1.0, 4.0]), inner)  # p(B) = .2, .8
    r = prior.ranking()
    # (1,0): .6, (1,1): .2, (0,0): .15, (0,1): .05
    assert dom.decode(r.keys).tolist() == [[1, 0], [1, 1], [0, 0], [0, 1]]
    np.testing.assert_allclose(r.scores, [0.6, 0.2, 0.15, 0.05])
    assert prior.ranking(limit=2).keys.tolist() == r.keys[:2].tolist()
    s = prior.sample(4000, np.random.default_rng(0))
    assert abs(np.mean(s[:, 0] == 1) - 0.8) < 0.03


def test_geographic_priors_exclude_the_target_unit():
    pop = embedded_population(0, PopulationSpec(states=2, counties_per_state=1, tracts_per_county=2))
    tract = pop.geography.unit_ids("tract")[0]
    priors = geographic_priors(pop, "tract", tract, ["AGE", "SEX"])
    assert set(priors) == {"county", "state", "national"}
    n_tract = pop.geography.mask("tract", tract).sum()
    assert len(priors["national"].codes) == len(pop) - n_tract
    with pytest.raises(CensusReconError, match="not coarser"):
        geographic_priors(pop, "tract", tract, ["AGE"], levels=["block"])
    # the paper's pools include the target unit
    paper = geographic_priors(pop, "tract", tract, ["AGE", "SEX"], include_target=True)
    assert len(paper["national"].codes) == len(pop)


def test_support_sizes_count_every_row_a_ranking_can_hold():
    dom = Domain.from_sizes({"A": 4})
    prior = EmpiricalPrior(dom, np.array([[2], [2], [0], [3]]))
    assert prior.support_size() == 3 == len(prior.ranking())
    bdom = Domain((Attribute.range("BLOCK", 3), Attribute.range("A", 4)))
    strong = BlockStrengthenedPrior(bdom, np.array([1.0, 0.0, 2.0]), prior)
    assert strong.support_size() == 6 == len(strong.ranking())
    chance = ChancePrior(Domain.from_sizes({"A": 3, "B": 4}), (np.array([0.5, 0.5, 0]), np.array([0.25] * 4)))
    assert chance.support_size() == 8 == len(chance.ranking())


def _mean_match_rate(prior, D, H, rng):
    u = effective_u(D.distinct(), H.distinct())
    return match_rate_curve(prior.ranking(rng=rng), D.keys(), k_grid(u, 20), u).match_rate.mean()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_finer_geography_is_a_more_informative_prior(seed):
    """On the embedded population the baselines order tract > county > state > national:
    for tract targets the tract-level prior is the holdout half of the tract itself; for
    block targets it is the rest of the enclosing tract. Averaged over many units."""
    pop = embedded_population(seed)
    attrs = ["AGE", "SEX", "HISP", "RACE"]
    rng = np.random.default_rng(0)
    for level, min_rows, finest in (("tract", 300, "holdout"), ("block", 20, "tract")):
        ids, counts = np.unique(pop.geography.units(level), return_counts=True)
        ids = rng.choice(ids[counts >= min_rows], size=min(60, int((counts >= min_rows).sum())), replace=False)
        scores: dict[str, list[float]] = {}
        for unit in ids:
            data = pop.take(np.flatnonzero(pop.geography.mask(level, unit))).project(attrs)
            D, H = holdout_split(data, np.random.default_rng(1))
            priors = geographic_priors(pop, level, unit, attrs)
            if level == "tract":
                priors["holdout"] = EmpiricalPrior(D.domain, H.codes)
            for name, prior in priors.items():
                scores.setdefault(name, []).append(_mean_match_rate(prior, D, H, rng))
        mean = {k: float(np.mean(v)) for k, v in scores.items()}
        order = [finest, "county", "state", "national"]
        assert all(mean[a] > mean[b] for a, b in zip(order, order[1:])), (level, mean)


def test_chance_prior_ranks_the_product_of_one_way_margins_exactly():
    from censusrecon.baselines.priors import ChancePrior

    rng = np.random.default_rng(3)
    dom = Domain.from_sizes({"A": 5, "B": 4, "C": 3})
    data = Dataset(dom, np.stack([rng.integers(0, s, 60) for s in dom.sizes], axis=1))
    prior = ChancePrior.from_data(data)
    full = prior.ranking()
    # brute force: every cell's product probability
    grid = np.stack(np.meshgrid(*[np.arange(s) for s in dom.sizes], indexing="ij"), -1).reshape(-1, 3)
    p = np.prod([prior.margins[j][grid[:, j]] for j in range(3)], axis=0)
    assert np.allclose(np.sort(full.scores)[::-1], np.sort(p[p > 0])[::-1])
    top = prior.ranking(limit=7)
    assert np.allclose(top.scores, full.scores[:7])
