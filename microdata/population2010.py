"""A census-style population shaped like the 2010 Census where reconstruction attacks are sensitive.

The compact embedded population (:mod:`microdata.population`) has small, homogeneous blocks. This
generator reproduces, within the tolerances of :mod:`microdata.describe`, the published 2010
statistics the Census Bureau's reconstruction and reidentification figures depend on (sources in
``docs/pages/calibration.md``): the block-size distribution over the Bureau's seven bins
(SUPP Table 7), about 85.6 occupied blocks and 4,257 persons per tract, 44% of listed blocks
empty, national sex, age and race × ethnicity (C2010BR-02, -03), and how race × ethnicity and age
cluster within blocks by block size (SUPP Tables 7, 12-14).

Its clustering comes from mechanisms a demographer would recognise, not from per-person noise:

- **Density.** Every tract has a density score. Its blocks' sizes are drawn from the 2010 block-size
  distribution with a quantile that leans on that score (denser tracts have bigger blocks), so the
  distribution over blocks is 2010's whatever the correlation.
- **Where groups live.** The nation's race × ethnicity mix leans towards minority groups in dense
  tracts and towards non-Hispanic White alone in sparse ones; each tract's mix scatters around its
  density's mix, each block's around its tract's (segregation between blocks; Dirichlet draws).
  The blocks' mixes are then raked (iterative proportional fitting) so that the expected national
  mix is 2010's.
- **Households.** Blocks are filled with households of 2010's size distribution: couples of
  similar age and mostly one race, children 20-40 years younger than their parents, persons living
  alone, young adults sharing; a couple of different groups has children of two or more races
  half the time. Big blocks hold group quarters (dormitories, nursing homes, prisons) whose
  residents come from the whole tract.
- **Age.** Ages come from the household roles and a shift per tract and block; one rank-preserving
  map then gives the nation 2010's single-year age distribution without undoing the clustering.

Fully determined by ``seed`` and the spec.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import ndtr, ndtri

from microdata.dataset import Dataset
from microdata.errors import CensusReconError

#: The Bureau's block-size bins (SUPP Table 7) with 2010's share of occupied blocks in each and the
#: mean size of a block in it (persons / blocks); the last bin is closed at ``MAX_BLOCK``.
BLOCK_BINS_2010 = ((1, 9, 29.38, 4.4), (10, 49, 43.04, 25.3), (50, 99, 16.02, 69.5), (100, 249, 8.71, 148.1),
                   (250, 499, 2.04, 339.6), (500, 999, 0.65, 667.5), (1000, None, 0.16, 1432.0))
MAX_BLOCK = 3000

#: 2010 persons by Hispanic origin and race group (C2010BR-02 Tables 1-2): rows not Hispanic /
#: Hispanic, columns the seven RACE groups of :data:`microdata.population.RACES`.
RACE_ETH_2010 = np.array([
    [196_817_552, 37_685_848, 2_247_098, 14_465_124, 481_576, 604_265, 5_966_481],
    [26_735_713, 1_243_471, 685_150, 209_128, 58_437, 18_503_103, 3_042_592],
], dtype=np.float64)

#: 2010 persons by five-year age group 0-4 ... 80-84, 85+ (C2010BR-03 Table 1; they sum to the
#: census count 308,745,538).
AGE5_2010 = np.array([20_201_362, 20_348_657, 20_677_194, 22_040_343, 21_585_999, 21_101_849, 19_962_099,
                      20_179_642, 20_890_964, 22_708_591, 22_298_125, 19_664_805, 16_817_924, 12_435_263,
                      9_278_166, 7_317_795, 5_743_327, 5_493_433], dtype=np.float64)

#: 2010 households by size 1..7+ (C2010BR-14; mean 2.58 with the 7+ households' persons).
HOUSEHOLD_SIZES_2010 = np.array([26.7, 33.6, 15.8, 13.5, 6.2, 2.5, 1.7]) / 100.0


def single_year_age_2010(max_age: int = 115) -> np.ndarray:
    """2010's share of persons at each single year 0..max_age: each five-year group spread evenly,
    85+ spread over 85..max_age with a tail falling by a third every five years."""
    p = np.zeros(max_age + 1)
    for g, n in enumerate(AGE5_2010[:-1]):
        p[5 * g:5 * g + 5] = n / 5.0
    tail = np.exp(-np.arange(max_age - 84) * np.log(1.5) / 5.0)
    p[85:] = AGE5_2010[-1] * tail / tail.sum()
    return p / p.sum()


def _bin_pmf(lo: int, hi: int, mean: float) -> np.ndarray:
    """A power law over the integers lo..hi (p(s) ∝ s^-a) whose mean is ``mean`` (bisection on a)."""
    s = np.arange(lo, hi + 1, dtype=np.float64)

    def m(a):
        w = np.exp(-a * np.log(s) - np.max(-a * np.log(s)))
        return float((w * s).sum() / w.sum()), w

    if not lo < mean < hi:
        raise CensusReconError(f"block-size bin {lo}-{hi} cannot have mean {mean}")
    a_lo, a_hi = -10.0, 10.0
    for _ in range(100):
        a = 0.5 * (a_lo + a_hi)
        mu, w = m(a)
        a_lo, a_hi = (a, a_hi) if mu > mean else (a_lo, a)
    return w / w.sum()


def block_size_pmf_2010(max_block: int = MAX_BLOCK) -> np.ndarray:
    """P(block size = s) for s = 0..max_block (entry 0 is 0): 2010's share of blocks in each
    Bureau bin, and within a bin a power law with the bin's 2010 mean size."""
    p = np.zeros(max_block + 1)
    for lo, hi, share, mean in BLOCK_BINS_2010:
        hi = max_block if hi is None else hi
        p[lo:hi + 1] = share / 100.0 * _bin_pmf(lo, hi, mean)
    return p / p.sum()


@dataclass(frozen=True)
class Census2010Spec:
    """Sizes and mechanisms of the 2010-shaped population; every default is the 2010 figure or the
    value that reproduces the 2010 statistics of :mod:`microdata.describe`."""

    states: int = 4
    counties_per_state: int = 2
    tracts_per_county: int = 3
    #: Occupied blocks per tract, uniform on this range (2010: 85.6 on average).
    occupied_blocks_per_tract: tuple[int, int] = (60, 111)
    #: Share of the listed blocks with nobody in them (2010: 44.0%).
    empty_share: float = 0.44
    #: Correlation of a block's size quantile with its tract's density score.
    density_size_correlation: float = 0.75
    #: How strongly density shifts the race × ethnicity mix away from non-Hispanic White alone
    #: (log-odds per standard deviation of density).
    density_diversity: float = 0.8
    #: Dirichlet concentrations of a state's, county's, tract's and block's mix around its parent's
    #: (higher: closer to the parent).
    concentration: tuple[float, float, float, float] = (40.0, 20.0, 3.0, 8.0)
    #: Probability that a couple's second adult is drawn from the block's mix rather than being of
    #: the householder's group (2010: about 10% of married couples differ in race or Hispanic origin).
    mixed_couple: float = 0.10
    #: Standard deviation (years) of the adults' age shift per tract and per block.
    age_shift: tuple[float, float] = (5.0, 3.0)
    #: Share of a 250+ block's persons in group quarters when it has one, and how often it has one.
    group_quarters: tuple[float, float] = (0.5, 0.35)

    def __post_init__(self) -> None:
        from microdata.population import check_census_sizes

        check_census_sizes(self)
        lo, hi = self.occupied_blocks_per_tract
        if not 1 <= lo <= hi or hi > 4000:
            raise CensusReconError(f"occupied_blocks_per_tract must be (lo, hi) with 1 <= lo <= hi <= 4000, "
                                   f"got {self.occupied_blocks_per_tract}")
        if not 0.0 <= self.empty_share < 0.6:
            raise CensusReconError(f"empty_share must be in [0, 0.6), got {self.empty_share}")
        if not 0.0 <= self.density_size_correlation < 1.0:
            raise CensusReconError("density_size_correlation must be in [0, 1)")
        if any(c <= 0 for c in self.concentration):
            raise CensusReconError(f"concentrations must be positive, got {self.concentration}")
        if not 0.0 <= self.mixed_couple <= 1.0:
            raise CensusReconError(f"mixed_couple must be a probability, got {self.mixed_couple}")


def _dirichlet_rows(rng, parents: np.ndarray, concentration: float) -> np.ndarray:
    """One Dirichlet draw around each row of ``parents`` (a gamma per cell, normalised)."""
    g = rng.gamma(np.maximum(concentration * parents, 1e-3))
    return g / g.sum(axis=1, keepdims=True)


def _rake(mix: np.ndarray, weight: np.ndarray, target: np.ndarray, rounds: int = 30) -> np.ndarray:
    """Rows of ``mix`` (sum 1) rescaled by one factor per cell until their ``weight``-weighted sum
    has the shares ``target`` (iterative proportional fitting over rows and cells)."""
    for _ in range(rounds):
        total = weight @ mix
        mix = mix * (target / np.maximum(total / total.sum(), 1e-300))
        mix = mix / mix.sum(axis=1, keepdims=True)
    return mix


def _draw_rows(rng, p_rows: np.ndarray) -> np.ndarray:
    cum = np.cumsum(p_rows, axis=1)
    u = rng.random(p_rows.shape[0])[:, None] * cum[:, -1:]
    return np.minimum((u > cum).sum(axis=1), p_rows.shape[1] - 1)


def census2010_population(seed: int = 0, spec: Census2010Spec | None = None) -> Dataset:
    """Generate the 2010-shaped population (the embedded population's domain and geography ids).

    >>> d = census2010_population(seed=1, spec=Census2010Spec(states=1, counties_per_state=1, tracts_per_county=2))
    >>> d.domain.names, len(d.geography.unit_ids("tract"))
    (('AGE', 'SEX', 'HISP', 'RACE', 'CENRACE'), 2)
    """
    from microdata.census import CENRACE_COMBOS
    from microdata.population import MAX_AGE, _multirace_weights, census_geography, person_domain

    spec = spec or Census2010Spec()
    rng = np.random.default_rng([seed, 2010])
    c_state, c_county, c_tract, c_block = spec.concentration

    # --- geography and block sizes -------------------------------------------------------
    n_state = spec.states
    n_county = n_state * spec.counties_per_state
    n_tract = n_county * spec.tracts_per_county
    county_state = np.repeat(np.arange(n_state), spec.counties_per_state)
    tract_county = np.repeat(np.arange(n_county), spec.tracts_per_county)
    lo, hi = spec.occupied_blocks_per_tract
    blocks_in_tract = rng.integers(lo, hi + 1, size=n_tract)
    block_tract = np.repeat(np.arange(n_tract), blocks_in_tract)
    n_block = block_tract.size
    # tract densities: standard normal, stratified over the tracts (one per 1/n_tract quantile, in
    # random order) so that a population of few tracts still spans sparse to dense
    density = ndtri((rng.permutation(n_tract) + rng.random(n_tract)) / n_tract)
    r = spec.density_size_correlation
    q = ndtr(r * density[block_tract] + np.sqrt(1 - r * r) * rng.standard_normal(n_block))
    cdf = np.cumsum(block_size_pmf_2010())
    block_size = np.minimum(np.searchsorted(cdf, q * cdf[-1], side="right"), MAX_BLOCK).astype(np.int64)
    block_size = np.maximum(block_size, 1)

    # --- race × ethnicity mixes on 14 cells (Hispanic × RACE group), nested ----------------
    nat = (RACE_ETH_2010 / RACE_ETH_2010.sum()).ravel()
    minority = np.ones(14)
    minority[0] = 0.0  # not Hispanic, White alone
    tilt = np.exp(spec.density_diversity * density[:, None] * minority[None, :])
    state_mix = _dirichlet_rows(rng, np.tile(nat, (n_state, 1)), c_state)
    county_mix = _dirichlet_rows(rng, state_mix[county_state], c_county)
    # a tract's mix: its county's, leaned by its density
    t_par = county_mix[tract_county] * tilt
    t_par /= t_par.sum(axis=1, keepdims=True)
    tract_mix = _dirichlet_rows(rng, t_par, c_tract)
    block_mix = _dirichlet_rows(rng, tract_mix[block_tract], c_block)
    block_mix = _rake(block_mix, block_size.astype(np.float64), nat)

    # --- group quarters: in some blocks of 250+ persons, part of the block ------------------
    gq_share, gq_rate = spec.group_quarters
    has_gq = (block_size >= 250) & (rng.random(n_block) < gq_rate)
    gq_kind = rng.choice(3, size=n_block, p=[0.45, 0.3, 0.25])  # dormitory, nursing home, prison
    n_gq = np.where(has_gq, np.round(block_size * gq_share * rng.uniform(0.5, 1.5, n_block)), 0)
    n_gq = np.minimum(n_gq, block_size - 1).astype(np.int64)
    n_hh = block_size - n_gq

    # --- households: a long stream of household sizes cut at block boundaries ---------------
    n_house = int(n_hh.sum())
    def household_sizes(k: int) -> np.ndarray:  # 2010's sizes, 7+ spread geometrically above 7
        h = rng.choice(np.arange(1, 8), size=k, p=HOUSEHOLD_SIZES_2010)
        return np.where(h == 7, 7 + rng.geometric(0.5, k) - 1, h)

    sizes = household_sizes(n_house // 2 + 64)
    while sizes.sum() < n_house:
        sizes = np.concatenate([sizes, household_sizes(n_house // 2 + 64)])
    ends = np.cumsum(sizes)
    p_idx = np.arange(n_house)
    stream_hh = np.searchsorted(ends, p_idx, side="right")
    p_block = np.repeat(np.arange(n_block), n_hh)
    # a household cut by a block boundary continues as a new household in the next block
    new = np.ones(n_house, bool)
    new[1:] = (stream_hh[1:] != stream_hh[:-1]) | (p_block[1:] != p_block[:-1])
    hh = np.cumsum(new) - 1
    n_households = int(hh[-1]) + 1 if n_house else 0
    hh_start = np.flatnonzero(new)
    role = p_idx - hh_start[hh]  # 0 householder, 1 second adult or first child, ...
    hh_block = p_block[hh_start]

    # household type: 0 alone, 1 couple (with any children), 2 single parent, 3 sharing adults
    u = rng.random(n_households)
    size_h = np.bincount(hh, minlength=n_households)
    kind = np.where(size_h == 1, 0, np.where(u < 0.72, 1, np.where(u < 0.88, 2, 3)))
    kids = (size_h >= 3) | ((size_h == 2) & (kind == 2))
    # householder's age by type
    head = np.where(
        kind == 0,
        np.where(rng.random(n_households) < 0.45, rng.uniform(20, 42, n_households),
                 rng.normal(64, 14, n_households)),
        np.where(kind == 3, rng.uniform(18, 34, n_households),
                 np.where(kids, rng.normal(38, 8, n_households), rng.normal(54, 16, n_households))))
    head = np.clip(head, 18, 100)
    t_shift = rng.normal(0, spec.age_shift[0], n_tract)
    b_shift = rng.normal(0, spec.age_shift[1], n_block)
    head = np.clip(head + t_shift[block_tract[hh_block]] + b_shift[hh_block], 18, 100)
    k = kind[hh]
    age = head[hh].copy()
    second_adult = (role == 1) & ((k == 1) | (k == 3))
    age = np.where((role == 1) & (k == 1), age + rng.normal(-1.5, 4.0, n_house), age)
    age = np.where((role >= 1) & (k == 3), rng.uniform(18, 34, n_house), age)
    child = (role >= 1) & ~second_adult & (k != 3)
    child_age = age - rng.uniform(19, 40, n_house)
    child_age = np.where(child_age < 0, rng.uniform(0, 6, n_house), child_age)
    age = np.where(child, child_age, age)
    # a grandparent in some large family households
    elder = (role >= 4) & (k == 1) & (rng.random(n_house) < 0.25)
    age = np.where(elder, head[hh] + rng.uniform(22, 32, n_house), age)
    age = np.clip(age, 0, 104)
    sex_head = (rng.random(n_households) < 0.5).astype(np.int64)
    sex = np.where(role == 0, sex_head[hh], (rng.random(n_house) < 0.49).astype(np.int64))
    sex = np.where((role == 1) & (k == 1), 1 - sex_head[hh], sex)
    # persons living alone: more often women, most of all at older ages
    alone_female = rng.random(n_house) < np.where(age >= 65, 0.72, 0.52)
    sex = np.where((role == 0) & (k == 0), alone_female.astype(np.int64), sex)

    # race × ethnicity (14 cells) per household member
    head_cell = _draw_rows(rng, block_mix[hh_block])
    other = _draw_rows(rng, block_mix[p_block])
    cell = head_cell[hh].copy()
    partner_differs = second_adult & (k == 1) & (rng.random(n_house) < spec.mixed_couple)
    cell = np.where(partner_differs | ((k == 3) & (role >= 1) & (rng.random(n_house) < 0.35)), other, cell)
    partner_cell = np.full(n_households, -1)
    pd_idx = np.flatnonzero(partner_differs)
    partner_cell[hh[pd_idx]] = cell[pd_idx]
    # children of a couple of two groups: of both parents' races half the time, else either's
    mixed_hh = partner_cell[hh] >= 0
    child_mixed = child & mixed_hh
    pick_other = child_mixed & (rng.random(n_house) < 0.5)
    cell = np.where(pick_other, partner_cell[hh], cell)
    hisp = cell // 7
    race = cell % 7
    # persons of two or more races get their detailed combination; children of a mixed couple,
    # half of them, take the union of their parents' single races (when both are single races)
    combo_w = _multirace_weights()
    cenrace = np.where(race < 6, race, rng.choice(57, size=n_house, p=combo_w) + 6)
    index_of = {c: i for i, c in enumerate(CENRACE_COMBOS)}
    union = child_mixed & ~pick_other & (rng.random(n_house) < 0.5)
    r1, r2 = head_cell[hh] % 7, np.where(mixed_hh, partner_cell[hh] % 7, 0)
    for i in np.flatnonzero(union & (r1 < 6) & (r2 < 6) & (r1 != r2)):
        cenrace[i] = index_of[tuple(sorted((int(r1[i]), int(r2[i]))))]
        race[i] = 6

    # --- group-quarters residents: from the whole tract, ages and sexes by facility ---------
    g_block = np.repeat(np.arange(n_block), n_gq)
    n_g = g_block.size
    kind_g = gq_kind[g_block]
    g_age = np.select([kind_g == 0, kind_g == 1],
                      [rng.uniform(18, 23, n_g), rng.uniform(70, 102, n_g)], rng.uniform(18, 56, n_g))
    g_sex = np.select([kind_g == 0, kind_g == 1],
                      [(rng.random(n_g) < 0.55), (rng.random(n_g) < 0.68)], rng.random(n_g) < 0.09).astype(np.int64)
    g_cell = _draw_rows(rng, tract_mix[block_tract[g_block]])
    g_race = g_cell % 7
    g_cenrace = np.where(g_race < 6, g_race, rng.choice(57, size=n_g, p=combo_w) + 6)

    person_block = np.concatenate([p_block, g_block])
    latent = np.concatenate([age, g_age])
    sex = np.concatenate([sex, g_sex])
    hisp = np.concatenate([hisp, g_cell // 7])
    race = np.concatenate([race, g_race])
    cenrace = np.concatenate([cenrace, g_cenrace])
    order = np.argsort(person_block, kind="stable")
    person_block, latent, sex, hisp, race, cenrace = (a[order] for a in
                                                     (person_block, latent, sex, hisp, race, cenrace))
    n = person_block.size

    # --- one rank-preserving map of the ages onto 2010's single-year distribution ----------
    target = np.cumsum(single_year_age_2010(MAX_AGE))
    ranks = np.empty(n)
    ranks[np.argsort(latent + rng.random(n) * 1e-6, kind="stable")] = (np.arange(n) + 0.5) / n
    age = np.minimum(np.searchsorted(target, ranks, side="right"), MAX_AGE).astype(np.int64)

    codes = np.stack([age, sex, hisp, race, cenrace], axis=1).astype(np.int64)
    # the public block list: the occupied blocks and each tract's empty ones, numbered after them
    share = spec.empty_share
    n_empty = np.random.default_rng([seed, 2010, 1]).poisson(blocks_in_tract * share / (1 - share))
    n_empty = np.minimum(n_empty, 9999 - 1000 - blocks_in_tract)
    geo = census_geography(spec.counties_per_state, spec.tracts_per_county, county_state, tract_county,
                           blocks_in_tract, person_block, n_empty,
                           "the 2010-shaped population's geography: every block, empty ones included")
    return Dataset(person_domain(), codes, geo)
