"""A census-style population shaped like the 2010 Census where reconstruction attacks are sensitive.

The compact embedded population (:mod:`microdata.population`) has small, homogeneous blocks. This
generator reproduces, within the tolerances of :mod:`microdata.describe`, the published 2010
statistics the Census Bureau's reconstruction and reidentification figures depend on (sources in
``docs/pages/calibration.md``): the block-size distribution over the Bureau's seven bins
(SUPP Table 7), about 85.6 occupied blocks and 4,257 persons per tract, 44% of listed blocks
empty, national sex, age and race × ethnicity (C2010BR-02, -03), and how race × ethnicity and age
cluster within blocks by block size (SUPP Tables 7, 12-14).

Its clustering comes from mechanisms a demographer would recognise, not from per-person noise:

- **Tracts and density.** A tract's persons are drawn around the Bureau's optimum of 4,000 (design
  range 1,200-8,000) and its blocks are drawn until they hold them, so a dense tract has few big
  blocks and a sparse one many small ones. Block sizes come from the 2010 block-size distribution
  with a quantile that leans on the tract's density score; the scores are drawn tilted by the mean
  block size they give, so that over blocks the densities, and so the sizes, are 2010's.
- **Block groups.** Each tract is cut, in block order, into groups of about 1,500 persons (the
  Bureau's optimum); a block number's first digit is its group, as in the Bureau's GEOIDs.
- **Where groups live.** The nation's race × ethnicity mix leans towards minority groups in dense
  tracts and towards non-Hispanic White alone in sparse ones; each tract's mix scatters around its
  density's mix, each block group's around its tract's, each block's around its group's
  (segregation; Dirichlet draws). The blocks' mixes are then raked (iterative proportional
  fitting) so that the expected national mix is 2010's.
- **Households.** Blocks are filled with households whose householder's group comes from the
  block's mix and whose size from that group's 2010 household sizes (Hispanic households largest):
  couples of similar age and mostly one group, children 20-40 years younger than their parents,
  persons living alone, young adults sharing; a couple of different groups has children of two or
  more races half the time; a quarter of the other members are of another group (relatives by
  marriage, foster children, boarders). Blocks of 100+ persons may hold group quarters
  (dormitories, nursing homes, prisons) whose residents come from the whole tract.
- **Age.** Ages come from the household roles, a shift per tract, block and householder's group;
  one rank-preserving map then gives the nation 2010's single-year age distribution without undoing
  the clustering.

Which statistics each parameter was fitted to, and which the generator was never fitted to (the
validation statistics of :data:`microdata.describe.VALIDATION`), is in ``docs/pages/calibration.md``.
Fully determined by ``seed`` and the spec.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import ndtr

from censusrecon.microdata.dataset import Dataset
from censusrecon.microdata.errors import CensusReconError
from censusrecon.microdata.census import CENRACE_COMBOS
from censusrecon.microdata.population import (MAX_AGE, census_geography, check_census_sizes, multirace_weights,
                                             person_domain)

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


#: 2010's mean household size by the householder's group (8 groups: not Hispanic and White, Black, AIAN,
#: Asian, NHPI, some other race alone or two or more races; Hispanic of any race), relative to all
#: households: CPS 2004 Table AVG1 (Hispanic 3.34, Black alone 2.64, Asian alone 2.90, the remaining
#: races 2.84, all 2.57; non-Hispanic White 2.43, derived from White alone 2.54 less its Hispanic
#: householders).
HOUSEHOLD_SIZE_BY_GROUP = np.array([2.43, 2.64, 2.84, 2.90, 2.84, 2.84, 2.84, 3.34]) / 2.57


@dataclass(frozen=True)
class Census2010Spec:
    """Sizes and mechanisms of the 2010-shaped population; every default is the 2010 figure or the
    value that reproduces the 2010 statistics of :mod:`microdata.describe`."""

    states: int = 4
    counties_per_state: int = 2
    tracts_per_county: int = 3
    #: Each tract's persons: lognormal with this median and log-standard deviation (the Bureau's
    #: tract criteria: optimum 4,000, design range 1,200-8,000); its blocks are drawn until they hold
    #: that many, so occupied blocks per tract follow from its size and density.
    tract_persons: tuple[float, float] = (4000.0, 0.30)
    #: Persons per block group the tract is cut into (the Bureau's criteria: optimum 1,500).
    block_group_persons: float = 1500.0
    #: Share of the listed blocks with nobody in them (2010: 44.0%).
    empty_share: float = 0.44
    #: Correlation of a block's size quantile with its tract's density score.
    density_size_correlation: float = 0.75
    #: How strongly density shifts the race × ethnicity mix away from non-Hispanic White alone
    #: (log-odds per standard deviation of density).
    density_diversity: float = 0.8
    #: Concentrations of a state's, county's, tract's and block's mix around its parent's (higher:
    #: closer to the parent; :data:`RARITY_MIX`, :data:`DIRICHLET_MIX` the earlier default).
    concentration: tuple[float, float, float, float] = (40.0, 20.0, 2.0, 1.42)
    #: Concentration of a block group's mix around its tract's (a block's is then around its block
    #: group's).
    block_group_concentration: float = 8.1
    #: Probability that a couple's second adult is drawn from the block's mix rather than being of
    #: the householder's group (2010: about 10% of married couples differ in race or Hispanic origin).
    mixed_couple: float = 0.10
    #: Probability that a household member other than the householder and partner is of a group
    #: drawn from the tract's mix rather than the household's (fitted to the share of block cells of
    #: 1-2 persons, SUPP Table 18, which then moved from the validation statistics to the tuned ones).
    stray_member: float = 0.133
    #: Standard deviation (years) of the adults' age shift per tract and per block.
    age_shift: tuple[float, float] = (5.0, 3.0)
    #: Householders' age shift (years) by their group (the 8 groups of HOUSEHOLD_SIZE_BY_GROUP),
    #: with 2010's larger households of younger groups giving median ages by group.
    group_age_shift: tuple[float, ...] = (3.0, -3.0, -5.0, -1.0, -5.0, -5.0, -6.0, -5.0)
    #: Share of a 100+ block's persons in group quarters when it has one, and how often it has one
    #: (2010: 2.6% of persons in group quarters, C2010BR-14).
    group_quarters: tuple[float, float] = (0.35, 0.14)
    #: How a mix's dispersion around its parent's depends on a cell's rarity: each level's mix is
    #: independent gammas of shape concentration x (parent's share)^rarity_exponent and mean the
    #: parent's share, normalised. 1 is a Dirichlet (a rare group all but absent from most areas and
    #: numerous in a few); below 1 a rare group is spread more evenly than a common one, as 2010's
    #: are (:data:`RARITY_MIX`).
    rarity_exponent: float = 0.59
    #: The tract level's own exponent (None: ``rarity_exponent``): whether a rare group lives in a
    #: tract at all is decided there, and its block groups and blocks only share it out.
    tract_rarity_exponent: float | None = 0.27

    def __post_init__(self) -> None:
        check_census_sizes(self)
        median, spread = self.tract_persons
        if not 100 <= median <= 20_000 or not 0 <= spread <= 1.5:
            raise CensusReconError(f"tract_persons must be (median in 100..20000, log-sd in 0..1.5), "
                                   f"got {self.tract_persons}")
        if not 100 <= self.block_group_persons <= 20_000:
            raise CensusReconError(f"block_group_persons must be in 100..20000, got {self.block_group_persons}")
        if not 0.0 <= self.empty_share < 0.6:
            raise CensusReconError(f"empty_share must be in [0, 0.6), got {self.empty_share}")
        if not 0.0 <= self.density_size_correlation < 1.0:
            raise CensusReconError("density_size_correlation must be in [0, 1)")
        if any(c <= 0 for c in self.concentration) or self.block_group_concentration <= 0:
            raise CensusReconError(f"concentrations must be positive, got {self.concentration}, "
                                   f"{self.block_group_concentration}")
        if not 0.0 <= self.mixed_couple <= 1.0:
            raise CensusReconError(f"mixed_couple must be a probability, got {self.mixed_couple}")
        for name in ("rarity_exponent", "tract_rarity_exponent"):
            value = getattr(self, name)
            if value is not None and not 0.0 < value <= 2.0:  # a share of 0 to a power <= 0 is no shape
                raise CensusReconError(f"{name} must be in (0, 2], got {value}")
        if len(self.group_age_shift) != 8:
            raise CensusReconError(f"group_age_shift needs one shift per group (8), got {len(self.group_age_shift)}")


#: The most occupied blocks a tract may have (block numbers run to 9999 with empty blocks included).
MAX_BLOCKS_PER_TRACT = 5000


#: ``data.population.race_mix: rarity``: the race x ethnicity mixes' dispersion fitted (Nelder-Mead, 2026-12-03,
#: seeds 0 and 1 of the 200-tract population, the sum of squared distances in tolerances) to the tuned
#: statistics of :mod:`microdata.describe`, four block-group figures of SUPP Tables 18-19 among them
#: (``BLOCK_GROUP_TARGETS``, which nothing had been fitted to before); the validation statistics were not in
#: the objective. The tract level has an exponent of its own (a single one for every level, fitted first,
#: left the block groups' small groups outside on every seed).
#: They are :class:`Census2010Spec`'s defaults since 2026-12-03 (``race_mix: rarity``, the default).
RARITY_MIX = {"concentration": (40.0, 20.0, 2.0, 1.42), "block_group_concentration": 8.1,
              "rarity_exponent": 0.59, "tract_rarity_exponent": 0.27, "stray_member": 0.133}

#: ``data.population.race_mix: dirichlet``: the mixes every 2010-shape figure before 2026-12-03 was measured on
#: (Dirichlet draws: a rare group all but absent from most areas and numerous in a few; the tuned statistics held,
#: the validation ones missed on every seed of 8, docs/pages/calibration.md).
DIRICHLET_MIX = {"concentration": (40.0, 20.0, 3.0, 8.0), "block_group_concentration": 12.0,
                 "rarity_exponent": 1.0, "tract_rarity_exponent": None, "stray_member": 0.25}


def _dirichlet_rows(rng, parents: np.ndarray, concentration: float, rarity: float = 1.0) -> np.ndarray:
    """One draw around each row of ``parents``: a gamma per cell, normalised. With ``rarity`` 1 the
    gamma's shape is concentration x share (a Dirichlet); otherwise concentration x share^rarity,
    scaled to the share's mean (see ``Census2010Spec.rarity_exponent``)."""
    if rarity == 1.0:
        g = rng.gamma(np.maximum(concentration * parents, 1e-3))
    else:
        shape = np.maximum(concentration * parents ** rarity, 1e-3)
        g = rng.gamma(shape) * parents / shape
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


def _size_of_quantile(q: np.ndarray, cdf: np.ndarray) -> np.ndarray:
    return np.maximum(np.minimum(np.searchsorted(cdf, q * cdf[-1], side="right"), MAX_BLOCK), 1).astype(np.int64)


def tract_density_draws(rng, n: int, r: float, cdf: np.ndarray) -> np.ndarray:
    """``n`` tract density scores, stratified (one per 1/n quantile, in random order), from the
    standard normal tilted by m(d), the mean block size of a tract of density d. A tract's blocks
    are drawn until they hold its persons, so it has about persons / m(d) blocks; weighting the
    tracts by m(d) makes the blocks' densities standard normal again, and so the blocks' sizes
    2010's distribution, however block counts vary with density."""
    d = np.linspace(-5, 5, 1001)
    z, w = np.polynomial.hermite_e.hermegauss(48)  # E over z ~ N(0, 1)
    w = w / w.sum()
    sizes = _size_of_quantile(ndtr(r * d[:, None] + np.sqrt(1 - r * r) * z[None, :]), cdf)
    m = sizes @ w
    dens = m * np.exp(-0.5 * d * d)
    cum = np.concatenate([[0.0], np.cumsum(0.5 * (dens[1:] + dens[:-1]) * np.diff(d))])
    u = (rng.permutation(n) + rng.random(n)) / n
    return np.interp(u * cum[-1], cum, d)


def _household_size_pmfs(mean_ratio: np.ndarray, top: int = 20) -> np.ndarray:
    """Per group, a household-size distribution on 1..top: 2010's (7+ spread geometrically) tilted
    by exp(λ s) until its mean is ``mean_ratio`` × 2010's mean (bisection on λ)."""
    base = np.zeros(top)
    base[:6] = HOUSEHOLD_SIZES_2010[:6]
    base[6:] = HOUSEHOLD_SIZES_2010[6] * 0.5 ** np.arange(1, top - 5)
    base /= base.sum()
    s = np.arange(1, top + 1)
    out = np.empty((len(mean_ratio), top))
    for g, ratio in enumerate(mean_ratio):
        goal, lo, hi = ratio * float(base @ s), -5.0, 5.0
        for _ in range(80):
            lam = 0.5 * (lo + hi)
            p = base * np.exp(lam * (s - s.mean()))
            p /= p.sum()
            lo, hi = (lam, hi) if p @ s < goal else (lo, lam)
        out[g] = p
    return out


def census2010_population(seed: int = 0, spec: Census2010Spec | None = None,
                          group_quarters: bool = False) -> Dataset | tuple[Dataset, np.ndarray]:
    """Generate the 2010-shaped population (the embedded population's domain and geography ids);
    with ``group_quarters``, also each person's flag: living in group quarters.

    >>> d = census2010_population(seed=1, spec=Census2010Spec(states=1, counties_per_state=1, tracts_per_county=2))
    >>> d.domain.names, len(d.geography.unit_ids("tract"))
    (('AGE', 'SEX', 'HISP', 'RACE', 'CENRACE'), 2)
    """
    spec = spec or Census2010Spec()
    rng = np.random.default_rng([seed, 2010])  # one stream, drawn from in the order of the steps below
    g = _blocks_2010(rng, spec)
    tract_mix, block_mix = _mixes_2010(rng, spec, g)
    n_gq, gq_kind = _group_quarters_2010(rng, spec, g.block_size)
    combo_w = multirace_weights()
    p_block, age, sex, hisp, race, cenrace = _households_2010(rng, spec, g, tract_mix, block_mix,
                                                              g.block_size - n_gq, combo_w)
    g_block, g_age, g_sex, g_cell, g_race, g_cenrace = _gq_residents_2010(rng, g, tract_mix, n_gq, gq_kind, combo_w)
    person_block = np.concatenate([p_block, g_block])
    in_gq = np.concatenate([np.zeros(p_block.size, bool), np.ones(g_block.size, bool)])
    latent = np.concatenate([age, g_age])
    sex = np.concatenate([sex, g_sex])
    hisp = np.concatenate([hisp, g_cell // 7])
    race = np.concatenate([race, g_race])
    cenrace = np.concatenate([cenrace, g_cenrace])
    order = np.argsort(person_block, kind="stable")
    person_block, latent, sex, hisp, race, cenrace, in_gq = (a[order] for a in
                                                            (person_block, latent, sex, hisp, race, cenrace, in_gq))
    n = person_block.size

    # --- one rank-preserving map of the ages onto 2010's single-year distribution ----------
    target = np.cumsum(single_year_age_2010(MAX_AGE))
    ranks = np.empty(n)
    ranks[np.argsort(latent + rng.random(n) * 1e-6, kind="stable")] = (np.arange(n) + 0.5) / n
    age = np.minimum(np.searchsorted(target, ranks, side="right"), MAX_AGE).astype(np.int64)

    codes = np.stack([age, sex, hisp, race, cenrace], axis=1).astype(np.int64)
    # the public block list: the occupied blocks and their tracts' empty ones, each in a block group
    # (a block number's first digit, as the Census Bureau numbers them); within a group the occupied
    # blocks first, then the empty ones
    share = spec.empty_share
    county_state, tract_county, blocks_in_tract, bg_offset, n_bg, bg_tract, block_bg, n_tract, n_block = (
        g.county_state, g.tract_county, g.blocks_in_tract, g.bg_offset, g.n_bg, g.bg_tract, g.block_bg, g.n_tract,
        g.n_block)
    erng = np.random.default_rng([seed, 2010, 1])
    empty_bg = bg_offset[np.repeat(np.arange(n_tract), erng.poisson(blocks_in_tract * share / (1 - share)))]
    empty_bg = np.sort(empty_bg + (erng.random(empty_bg.size) * n_bg[bg_tract[empty_bg]]).astype(np.int64))
    occupied_in_bg = np.bincount(block_bg, minlength=bg_tract.size)
    rank = np.arange(empty_bg.size) - np.searchsorted(empty_bg, empty_bg)  # position within its group
    fits = occupied_in_bg[empty_bg] + rank < 999
    empty_bg, rank = empty_bg[fits], rank[fits]
    digit = np.arange(bg_tract.size) - bg_offset[bg_tract] + 1
    first = np.concatenate([[0], np.cumsum(occupied_in_bg)[:-1]])
    block_number = digit[block_bg] * 1000 + np.arange(n_block) - first[block_bg] + 1
    empty_number = digit[empty_bg] * 1000 + occupied_in_bg[empty_bg] + rank + 1
    geo = census_geography(county_state, tract_county, blocks_in_tract, person_block,
                           np.bincount(bg_tract[empty_bg], minlength=n_tract),
                           "the 2010-shaped population's geography: every block, empty ones included",
                           (block_number, empty_number))
    data = Dataset(person_domain(), codes, geo)
    return (data, in_gq) if group_quarters else data


@dataclass(frozen=True)
class _Blocks2010:
    """The 2010-shaped geography drawn: counties per state, tracts per county, each tract's density and blocks (with
    their sizes and block groups)."""

    county_state: np.ndarray
    tract_county: np.ndarray
    density: np.ndarray
    blocks_in_tract: np.ndarray
    block_size: np.ndarray
    block_tract: np.ndarray
    n_bg: np.ndarray
    bg_offset: np.ndarray
    block_bg: np.ndarray
    bg_tract: np.ndarray

    @property
    def n_tract(self) -> int:
        return len(self.tract_county)

    @property
    def n_block(self) -> int:
        return len(self.block_size)


def _blocks_2010(rng: np.random.Generator, spec: Census2010Spec) -> _Blocks2010:
    """Geography: tract sizes, densities, and blocks drawn until they hold the tract's persons; block groups cut in
    block order."""
    n_state = spec.states
    n_county = n_state * spec.counties_per_state
    n_tract = n_county * spec.tracts_per_county
    county_state = np.repeat(np.arange(n_state), spec.counties_per_state)
    tract_county = np.repeat(np.arange(n_county), spec.tracts_per_county)
    cdf = np.cumsum(block_size_pmf_2010())
    r = spec.density_size_correlation
    density = tract_density_draws(rng, n_tract, r, cdf)
    median, spread = spec.tract_persons
    goal = median * np.exp(spread * rng.standard_normal(n_tract))
    sizes_of_tract = []
    for t in range(n_tract):
        got, total = [], 0
        while total < goal[t] and sum(len(x) for x in got) < MAX_BLOCKS_PER_TRACT:
            q = ndtr(r * density[t] + np.sqrt(1 - r * r) * rng.standard_normal(64))
            b = _size_of_quantile(q, cdf)
            stop = int(np.searchsorted(np.cumsum(b), goal[t] - total, side="left")) + 1
            got.append(b[:stop])
            total += int(b[:stop].sum())
        sizes_of_tract.append(np.concatenate(got)[:MAX_BLOCKS_PER_TRACT])
    blocks_in_tract = np.array([len(x) for x in sizes_of_tract])
    block_size = np.concatenate(sizes_of_tract)
    block_tract = np.repeat(np.arange(n_tract), blocks_in_tract)
    n_block = block_size.size
    # block groups: each tract cut, in block order, into groups of about block_group_persons
    tract_pop = np.bincount(block_tract, weights=block_size, minlength=n_tract)
    n_bg = np.clip(np.round(tract_pop / spec.block_group_persons), 1, 9).astype(np.int64)
    before = np.cumsum(block_size) - block_size - np.concatenate([[0], np.cumsum(tract_pop)[:-1]])[block_tract]
    bg_in_tract = np.minimum((before / tract_pop[block_tract] * n_bg[block_tract]).astype(np.int64),
                             n_bg[block_tract] - 1)
    # a sparse tract whose group would hold more blocks than four-digit block numbers allow is cut
    # by block count instead
    idx_in_tract = np.arange(n_block) - np.concatenate([[0], np.cumsum(blocks_in_tract)[:-1]])[block_tract]
    crowded = np.bincount(block_tract * 9 + bg_in_tract, minlength=9 * n_tract).reshape(n_tract, 9).max(axis=1) > 900
    if crowded.any():
        n_bg = np.where(crowded, np.minimum(np.maximum(n_bg, -(-blocks_in_tract // 900)), 9), n_bg)
        by_count = idx_in_tract * n_bg[block_tract] // blocks_in_tract[block_tract]
        bg_in_tract = np.where(crowded[block_tract], by_count, bg_in_tract)
    bg_offset = np.concatenate([[0], np.cumsum(n_bg)[:-1]])
    block_bg = bg_offset[block_tract] + bg_in_tract
    bg_tract = np.repeat(np.arange(n_tract), n_bg)

    return _Blocks2010(county_state, tract_county, density, blocks_in_tract, block_size, block_tract, n_bg, bg_offset,
                       block_bg, bg_tract)


def _mixes_2010(rng: np.random.Generator, spec: Census2010Spec, g: _Blocks2010) -> tuple[np.ndarray, np.ndarray]:
    """Race × ethnicity mixes on 14 cells (Hispanic × RACE group), nested state > county > tract (leaned by its
    density) > block group > block, the blocks raked to the national mix: the tracts' and the blocks'."""
    c_state, c_county, c_tract, c_block = spec.concentration
    n_state, county_state, tract_county, density = spec.states, g.county_state, g.tract_county, g.density
    bg_tract, block_bg, block_size = g.bg_tract, g.block_bg, g.block_size
    nat = (RACE_ETH_2010 / RACE_ETH_2010.sum()).ravel()
    minority = np.ones(14)
    minority[0] = 0.0  # not Hispanic, White alone
    tilt = np.exp(spec.density_diversity * density[:, None] * minority[None, :])
    rarity = spec.rarity_exponent
    state_mix = _dirichlet_rows(rng, np.tile(nat, (n_state, 1)), c_state, rarity)
    county_mix = _dirichlet_rows(rng, state_mix[county_state], c_county, rarity)
    # a tract's mix: its county's, leaned by its density
    t_par = county_mix[tract_county] * tilt
    t_par /= t_par.sum(axis=1, keepdims=True)
    tract_rarity = rarity if spec.tract_rarity_exponent is None else spec.tract_rarity_exponent
    tract_mix = _dirichlet_rows(rng, t_par, c_tract, tract_rarity)
    bg_mix = _dirichlet_rows(rng, tract_mix[bg_tract], spec.block_group_concentration, rarity)
    block_mix = _dirichlet_rows(rng, bg_mix[block_bg], c_block, rarity)
    block_mix = _rake(block_mix, block_size.astype(np.float64), nat)

    return tract_mix, block_mix


def _group_quarters_2010(rng: np.random.Generator, spec: Census2010Spec, block_size: np.ndarray
                         ) -> tuple[np.ndarray, np.ndarray]:
    """Group quarters: in some blocks of 100+ persons, part of the block; each block's residents in them and the
    facility's kind (dormitory, nursing home, prison)."""
    n_block = block_size.size
    gq_share, gq_rate = spec.group_quarters
    has_gq = (block_size >= 100) & (rng.random(n_block) < gq_rate)
    gq_kind = rng.choice(3, size=n_block, p=[0.45, 0.3, 0.25])  # dormitory, nursing home, prison
    n_gq = np.where(has_gq, np.round(block_size * gq_share * rng.uniform(0.5, 1.5, n_block)), 0)
    n_gq = np.minimum(n_gq, block_size - 1).astype(np.int64)

    return n_gq, gq_kind


def _households_2010(rng: np.random.Generator, spec: Census2010Spec, g: _Blocks2010, tract_mix: np.ndarray,
                     block_mix: np.ndarray, n_hh: np.ndarray, combo_w: np.ndarray) -> tuple:
    """The household population: each block filled with households until it is full (``n_hh`` persons), then every
    member's age, sex and race × ethnicity. Returns each member's block, latent age, sex, HISP, RACE and CENRACE."""
    h = _household_sizes_2010(rng, g, block_mix, n_hh)
    age, sex, who = _members_2010(rng, spec, g, h)
    hisp, race, cenrace = _member_races_2010(rng, spec, g, h, (tract_mix, block_mix), who, combo_w)
    return h.p_block, age, sex, hisp, race, cenrace


@dataclass(frozen=True)
class _Households2010:
    """Households drawn: each one's block, householder's race × ethnicity cell and size; each member's household,
    block and role (0 the householder)."""

    hh_block: np.ndarray
    head_cell: np.ndarray
    size_h: np.ndarray
    hh: np.ndarray
    p_block: np.ndarray
    role: np.ndarray
    group_of_cell: np.ndarray


def _household_sizes_2010(rng: np.random.Generator, g: _Blocks2010, block_mix: np.ndarray, n_hh: np.ndarray
                          ) -> _Households2010:
    """A householder's group drawn from the block's mix weighted by 1 / the group's mean household size (so persons
    keep the block's mix), the household's size from the group's distribution, households added until the block is
    full (the last one cut)."""
    n_block = g.n_block
    group_of_cell = np.where(np.arange(14) >= 7, 7, np.arange(14) % 7)
    size_pmf = _household_size_pmfs(HOUSEHOLD_SIZE_BY_GROUP)
    mean_size = size_pmf @ np.arange(1, size_pmf.shape[1] + 1)
    cand_block = np.repeat(np.arange(n_block), n_hh)  # at most one household per person
    head_w = block_mix / mean_size[group_of_cell][None, :]
    cand_cell = _draw_rows(rng, (head_w / head_w.sum(axis=1, keepdims=True))[cand_block])
    cand_size = _draw_rows(rng, size_pmf[group_of_cell[cand_cell]]) + 1
    block_start = np.concatenate([[0], np.cumsum(n_hh)[:-1]])
    cs = np.cumsum(cand_size)
    start = cs - cand_size - np.concatenate([[0], cs])[block_start][cand_block]
    keep = start < n_hh[cand_block]
    hh_block = cand_block[keep]
    head_cell = cand_cell[keep]
    size_h = np.minimum(cand_size[keep], n_hh[hh_block] - start[keep])  # the last household is cut
    n_households = hh_block.size
    hh = np.repeat(np.arange(n_households), size_h)
    n_house = hh.size
    p_block = hh_block[hh]
    role = np.arange(n_house) - np.repeat(np.cumsum(size_h) - size_h, size_h)  # 0 householder, ...

    return _Households2010(hh_block, head_cell, size_h, hh, p_block, role, group_of_cell)


def _members_2010(rng: np.random.Generator, spec: Census2010Spec, g: _Blocks2010, h: _Households2010) -> tuple:
    """Each member's latent age and sex by household type and role; with who is a child, who a second adult, and each
    member's household type (0 alone, 1 couple, 2 single parent, 3 sharing adults)."""
    n_tract, block_tract = g.n_tract, g.block_tract
    hh_block, head_cell, size_h, hh, role, group_of_cell = h.hh_block, h.head_cell, h.size_h, h.hh, h.role, h.group_of_cell
    n_households, n_house = hh_block.size, hh.size
    n_block = g.n_block
    # household type: 0 alone, 1 couple (with any children), 2 single parent, 3 sharing adults
    u = rng.random(n_households)
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
    g_shift = np.asarray(spec.group_age_shift, dtype=np.float64)[group_of_cell[head_cell]]
    head = np.clip(head + t_shift[block_tract[hh_block]] + b_shift[hh_block] + g_shift, 18, 100)
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

    return age, sex, (child, second_adult, k)


def _member_races_2010(rng: np.random.Generator, spec: Census2010Spec, g: _Blocks2010, h: _Households2010,
                       mixes: tuple, who: tuple, combo_w: np.ndarray) -> tuple:
    """Each member's race × ethnicity: the householder's, a partner's or a sharing adult's of the block's mix,
    children of a mixed couple of either parent's or both, a stray member of the tract's mix; HISP, RACE, CENRACE."""
    child, second_adult, k = who
    tract_mix, block_mix = mixes
    block_tract, hh, p_block, head_cell, role = g.block_tract, h.hh, h.p_block, h.head_cell, h.role
    n_house = hh.size
    n_households = h.hh_block.size
    # race × ethnicity (14 cells) per household member
    other = _draw_rows(rng, block_mix[p_block])
    cell = head_cell[hh].copy()
    partner_differs = second_adult & (k == 1) & (rng.random(n_house) < spec.mixed_couple)
    cell = np.where(partner_differs | ((k == 3) & (role >= 1) & (rng.random(n_house) < 0.35)), other, cell)
    # a member other than the householder and partner who is of another group (a relative by
    # marriage, a foster child, a boarder): of the tract's mix
    stray = (role >= 1) & ~second_adult & (rng.random(n_house) < spec.stray_member)
    cell = np.where(stray, _draw_rows(rng, tract_mix[block_tract[p_block]]), cell)
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
    cenrace = np.where(race < 6, race, rng.choice(57, size=n_house, p=combo_w) + 6)
    index_of = {c: i for i, c in enumerate(CENRACE_COMBOS)}
    union = child_mixed & ~pick_other & (rng.random(n_house) < 0.5)
    r1, r2 = head_cell[hh] % 7, np.where(mixed_hh, partner_cell[hh] % 7, 0)
    for i in np.flatnonzero(union & (r1 < 6) & (r2 < 6) & (r1 != r2)):
        cenrace[i] = index_of[tuple(sorted((int(r1[i]), int(r2[i]))))]
        race[i] = 6

    return hisp, race, cenrace


def _gq_residents_2010(rng: np.random.Generator, g: _Blocks2010, tract_mix: np.ndarray, n_gq: np.ndarray,
                       gq_kind: np.ndarray, combo_w: np.ndarray) -> tuple:
    """Group-quarters residents: from the whole tract, ages and sexes by facility. Returns each resident's block,
    latent age, sex, race × ethnicity cell, RACE and CENRACE."""
    n_block, block_tract = g.n_block, g.block_tract
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

    return g_block, g_age, g_sex, g_cell, g_race, g_cenrace
