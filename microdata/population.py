"""The embedded census-style synthetic population: seeded, nested geography, clustered composition."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from censusrecon.microdata.dataset import Dataset
from censusrecon.microdata.domain import Attribute, Domain
from censusrecon.microdata.errors import CensusReconError
from censusrecon.microdata.geography import Geography, UnitCatalogue
from censusrecon.microdata.census import CENRACE_COMBOS, cenrace_label

#: The seven major census race groups (OMB's six races alone, and two or more races).
RACES: tuple[str, ...] = (
    "White alone",
    "Black or African American alone",
    "American Indian and Alaska Native alone",
    "Asian alone",
    "Native Hawaiian and Other Pacific Islander alone",
    "Some Other Race alone",
    "Two or More Races",
)
MAX_AGE = 115

#: National shares of the race groups (roughly the 2010 census).
_RACE_SHARES = np.array([0.724, 0.126, 0.009, 0.048, 0.002, 0.062, 0.029])
#: Log-odds of Hispanic origin given race group.
_HISP_LOGIT = np.array([-2.0, -3.2, -1.5, -3.5, -2.0, 2.5, 0.0])
#: National mix of the four age profiles (families, young adults, middle age, retirees).
_PROFILE_SHARES = np.array([0.40, 0.17, 0.30, 0.13])


def person_domain() -> Domain:
    """AGE (single year 0..115), SEX, HISP, RACE (7 groups) and CENRACE (the PPMF's 63 race
    combinations; RACE is CENRACE's major group)."""
    return Domain(
        (
            Attribute.range("AGE", MAX_AGE + 1),
            Attribute("SEX", ("male", "female")),
            Attribute("HISP", ("not Hispanic or Latino", "Hispanic or Latino")),
            Attribute("RACE", RACES),
            Attribute("CENRACE", tuple(cenrace_label(i) for i in range(len(CENRACE_COMBOS)))),
        )
    )


def race_group(cenrace: np.ndarray) -> np.ndarray:
    """The 7-group RACE of CENRACE codes (0..62): the single race, or 6 for two or more."""
    return np.where(np.asarray(cenrace) < 6, cenrace, 6)


def multirace_weights() -> np.ndarray:
    """Shares of the 57 multi-race CENRACE codes among persons of two or more races: pairs
    dominate (White with each other race most of all), each extra race is rarer."""
    w = []
    for combo in CENRACE_COMBOS[6:]:
        base = 10.0 ** -(len(combo) - 2)
        w.append(base * (4.0 if 0 in combo else 1.0) * (2.0 if 5 in combo else 1.0))
    w = np.array(w)
    return w / w.sum()


def _age_profiles() -> np.ndarray:
    """Four distributions over single-year age 0..115, each with a thin tail to 115."""
    age = np.arange(MAX_AGE + 1, dtype=np.float64)

    def bump(mu, sd):
        return np.exp(-0.5 * ((age - mu) / sd) ** 2)

    tail = np.exp(-np.maximum(age - 80, 0) / 6.0) * 1e-3
    profiles = np.stack(
        [
            np.where(age < 18, 1.0, 0.0) * 1.1 + bump(38, 8),  # families: children and parents
            bump(24, 4) + 0.15 * bump(45, 15),  # young adults
            bump(50, 10) + 0.2 * bump(20, 5),  # middle age
            bump(74, 9) + 0.1 * bump(55, 8),  # retirees
        ]
    )
    profiles = profiles + tail
    return profiles / profiles.sum(axis=1, keepdims=True)


def _dirichlet_children(rng, parent: np.ndarray, concentration: float, n: int) -> np.ndarray:
    """n composition vectors scattered around ``parent`` (rows sum to 1)."""
    alpha = np.maximum(concentration * parent, 1e-3)
    return rng.dirichlet(alpha, size=n)


def check_census_sizes(spec, *more: str) -> None:
    """A generated population's sizes: states, counties per state, tracts per county (and the
    fields ``more``) at least 1, and within the census GEOID widths."""
    for name in ("states", "counties_per_state", "tracts_per_county", *more):
        if int(getattr(spec, name)) < 1:
            raise CensusReconError(f"{type(spec).__name__}.{name} must be >= 1, got {getattr(spec, name)}")
    if spec.states > 99 or spec.counties_per_state > 999 or spec.tracts_per_county > 9999:
        raise CensusReconError("population too large for census GEOID widths")


@dataclass(frozen=True)
class PopulationSpec:
    """Sizes and clustering of the embedded population; every value is validated."""

    states: int = 4
    counties_per_state: int = 3
    tracts_per_county: int = 4
    blocks_per_tract: tuple[int, int] = (12, 36)
    block_size_median: float = 22.0
    block_size_sigma: float = 1.0
    max_block_size: int = 400
    #: Dirichlet concentrations: higher means a unit is closer to its parent.
    concentration: tuple[float, float, float, float] = (1.0, 1.5, 2.0, 3.0)
    #: Standard deviation (years) of the adult age shift of each state, county, tract, block.
    age_shift: tuple[float, float, float, float] = (9.0, 6.0, 8.0, 2.0)
    #: Blocks with nobody in them, per tract (real block lists have many: water, parks, roads).
    #: They are in the public block list, never among the persons.
    empty_blocks_per_tract: tuple[int, int] = (0, 3)

    def __post_init__(self) -> None:
        check_census_sizes(self, "max_block_size")
        lo, hi = self.blocks_per_tract
        if not 1 <= lo <= hi:
            raise CensusReconError(f"blocks_per_tract must be (lo, hi) with 1 <= lo <= hi, got {self.blocks_per_tract}")
        if hi > 9999:
            raise CensusReconError("population too large for census GEOID widths")
        if self.block_size_median <= 0 or self.block_size_sigma <= 0:
            raise CensusReconError("block_size_median and block_size_sigma must be positive")
        if any(a < 0 for a in self.age_shift):
            raise CensusReconError(f"age_shift values must be >= 0, got {self.age_shift}")
        if any(c <= 0 for c in self.concentration):
            raise CensusReconError(f"concentrations must be positive, got {self.concentration}")
        e_lo, e_hi = self.empty_blocks_per_tract
        if not 0 <= e_lo <= e_hi or hi + e_hi > 9999:
            raise CensusReconError(f"empty_blocks_per_tract must be (lo, hi) with 0 <= lo <= hi, got "
                                   f"{self.empty_blocks_per_tract}")


def embedded_population(seed: int = 0, spec: PopulationSpec | None = None) -> Dataset:
    """Generate the embedded census-style population (AGE, SEX, HISP, RACE with block geography).

    Composition is clustered down the hierarchy: each state's race mix, Hispanic log-odds and
    age-profile mix scatter around the nation's, each county's around its state's, and so on
    to blocks, so that finer geography is a more informative prior. Block sizes are
    log-normal (1 to ``max_block_size`` people). Fully determined by ``seed`` and ``spec``.

    >>> d = embedded_population(seed=1, spec=PopulationSpec(states=1, counties_per_state=1, tracts_per_county=2))
    >>> d.domain.names, len(d.geography.unit_ids("tract"))
    (('AGE', 'SEX', 'HISP', 'RACE', 'CENRACE'), 2)
    """
    spec = spec or PopulationSpec()
    rng = np.random.default_rng(seed)  # one stream: the places' draws, then the persons'
    pl = _compact_places(rng, spec)
    county_state, tract_county, blocks_in_tract = pl.county_state, pl.tract_county, pl.blocks_in_tract
    n_tract = len(tract_county)
    person_block, codes = _compact_persons(rng, spec, pl)
    # the public block list: every block above and, numbered after them, each tract's empty
    # blocks (their own random stream, so the persons do not depend on them)
    e_lo, e_hi = spec.empty_blocks_per_tract
    n_empty = np.random.default_rng([seed, 1]).integers(e_lo, e_hi + 1, size=n_tract)
    geo = census_geography(county_state, tract_county, blocks_in_tract, person_block, n_empty,
                           "the embedded population's geography: every block, empty ones included")
    return Dataset(person_domain(), codes, geo)


@dataclass(frozen=True)
class _Places:
    """The compact population's places: the geography tree (blocks per tract, block sizes) and each block's
    composition, nested down the hierarchy (race shares, age-profile shares, Hispanic log-odds shift)."""

    county_state: np.ndarray
    tract_county: np.ndarray
    blocks_in_tract: np.ndarray
    block_tract: np.ndarray
    block_size: np.ndarray
    race_p: np.ndarray
    profile_p: np.ndarray
    hisp_shift: np.ndarray


def _compact_places(rng: np.random.Generator, spec: PopulationSpec) -> _Places:
    """The geography tree, block sizes log-normal (1 to ``max_block_size`` people), and the composition of every
    block: each state's race mix, Hispanic log-odds and age-profile mix scattered around the nation's, each county's
    around its state's, and so on to blocks."""
    c_state, c_county, c_tract, c_block = spec.concentration
    n_state = spec.states
    n_county = n_state * spec.counties_per_state
    n_tract = n_county * spec.tracts_per_county
    county_state = np.repeat(np.arange(n_state), spec.counties_per_state)
    tract_county = np.repeat(np.arange(n_county), spec.tracts_per_county)
    lo, hi = spec.blocks_per_tract
    blocks_in_tract = rng.integers(lo, hi + 1, size=n_tract)
    block_tract = np.repeat(np.arange(n_tract), blocks_in_tract)
    n_block = block_tract.size
    block_size = np.clip(
        np.round(rng.lognormal(np.log(spec.block_size_median), spec.block_size_sigma, size=n_block)),
        1,
        spec.max_block_size,
    ).astype(np.int64)

    def nest(national: np.ndarray):
        s = _dirichlet_children(rng, national, c_state, n_state)
        c = np.stack([_dirichlet_children(rng, s[p], c_county, 1)[0] for p in county_state])
        t = np.stack([_dirichlet_children(rng, c[p], c_tract, 1)[0] for p in tract_county])
        b = np.stack([_dirichlet_children(rng, t[p], c_block, 1)[0] for p in block_tract])
        return b

    race_p = nest(_RACE_SHARES)
    profile_p = nest(_PROFILE_SHARES)
    hisp_shift = (
        rng.normal(0, 1.0, n_state)[county_state][tract_county][block_tract]
        + rng.normal(0, 0.7, n_county)[tract_county][block_tract]
        + rng.normal(0, 0.5, n_tract)[block_tract]
        + rng.normal(0, 0.4, n_block)
    )

    return _Places(county_state, tract_county, blocks_in_tract, block_tract, block_size, race_p, profile_p,
                   hisp_shift)


def _compact_persons(rng: np.random.Generator, spec: PopulationSpec, pl: _Places) -> tuple[np.ndarray, np.ndarray]:
    """Every person of every block: race, Hispanic origin, age (a profile, shifted per place), sex and the detailed
    race combination (drawn last, so that the attributes before it do not depend on it); their blocks and codes."""
    county_state, tract_county, block_tract = pl.county_state, pl.tract_county, pl.block_tract
    race_p, profile_p, hisp_shift = pl.race_p, pl.profile_p, pl.hisp_shift
    n_state, n_county, n_tract, n_block = spec.states, len(county_state), len(tract_county), len(block_tract)
    person_block = np.repeat(np.arange(n_block), pl.block_size)
    n = person_block.size

    def draw(p_rows: np.ndarray) -> np.ndarray:
        cum = np.cumsum(p_rows, axis=1)
        u = rng.random(p_rows.shape[0])[:, None] * cum[:, -1:]
        return np.minimum((u > cum).sum(axis=1), p_rows.shape[1] - 1)

    race = draw(race_p[person_block])
    logit = _HISP_LOGIT[race] + hisp_shift[person_block]
    hisp = (rng.random(n) < 1.0 / (1.0 + np.exp(-logit))).astype(np.int64)
    profile = draw(profile_p[person_block])
    profiles = _age_profiles()
    # Hispanic and Some-Other-Race persons skew younger, as in census data.
    young = (hisp == 1) & (rng.random(n) < 0.25)
    profile = np.where(young & (profile >= 2), 0, profile)
    age = draw(profiles[profile])
    # Places differ in age, not only in their mix of profiles: a shift in years per state,
    # county, tract and block (local housing stock, colleges, retirement communities).
    shift = (
        rng.normal(0, spec.age_shift[0], n_state)[county_state][tract_county][block_tract]
        + rng.normal(0, spec.age_shift[1], n_county)[tract_county][block_tract]
        + rng.normal(0, spec.age_shift[2], n_tract)[block_tract]
        + rng.normal(0, spec.age_shift[3], n_block)
    )
    age = np.clip(np.round(age + shift[person_block] * (age >= 18)), 0, MAX_AGE).astype(np.int64)
    p_female = np.where(age < 60, 0.49, np.minimum(0.49 + (age - 60) * 0.007, 0.85))
    sex = (rng.random(n) < p_female).astype(np.int64)

    # the detailed race combination of persons of two or more races (drawn last, so that the
    # attributes above do not depend on it)
    multi = rng.choice(57, size=n, p=multirace_weights()) + 6
    cenrace = np.where(race < 6, race, multi)
    codes = np.stack([age, sex, hisp, race, cenrace], axis=1).astype(np.int64)
    return person_block, codes


def census_geography(county_state: np.ndarray, tract_county: np.ndarray, blocks_in_tract: np.ndarray,
                     person_block: np.ndarray, n_empty: np.ndarray, source: str,
                     numbers: tuple[np.ndarray, np.ndarray] | None = None) -> Geography:
    """Census GEOIDs of a generated population (``county_state``: each county's state, ``tract_county``: each
    tract's county, both in order): odd state and county FIPS codes, tracts 000100, 000200, ... within each county,
    blocks 1001, 1002, ... within each tract (or ``numbers``' first array, one per occupied block, whose first digit
    is its block group); each person's (``person_block`` indexes the occupied blocks, tract by tract), with the public
    block list as its catalogue: the occupied blocks and ``n_empty`` empty blocks per tract, numbered after them (or
    ``numbers``' second array, tract by tract)."""
    block_number, empty_number = numbers if numbers is not None else (None, None)
    n_tract = len(tract_county)
    state_fips = np.arange(int(county_state.max()) + 1) * 2 + 1
    county_fips = _within(county_state) * 2 + 1
    tract_code = (_within(tract_county) + 1) * 100
    block_tract = np.repeat(np.arange(n_tract), blocks_in_tract)
    block_in_tract = (np.concatenate([np.arange(k) for k in blocks_in_tract]) + 1001 if block_number is None
                      else np.asarray(block_number, dtype=np.int64))
    c_of_b = tract_county[block_tract]
    geo = Geography.from_parts(state_fips[county_state[c_of_b]][person_block], county_fips[c_of_b][person_block],
                               tract_code[block_tract][person_block], block_in_tract[person_block])
    all_tract = np.concatenate([block_tract, np.repeat(np.arange(n_tract), n_empty)])
    empties = (np.concatenate([np.arange(k) + 1001 + b for k, b in zip(n_empty, blocks_in_tract)]).astype(np.int64)
               if empty_number is None else np.asarray(empty_number, dtype=np.int64))
    all_block = np.concatenate([block_in_tract, empties])
    listed = Geography.from_parts(state_fips[county_state[tract_county[all_tract]]],
                                  county_fips[tract_county[all_tract]], tract_code[all_tract], all_block)
    return geo.with_catalogue(UnitCatalogue({lv: listed.units(lv) for lv in listed.levels[1:]}, source))


def _within(parent: np.ndarray) -> np.ndarray:
    """Each child's position among its parent's children, ``parent`` (each child's parent) in order.

    >>> _within(np.array([0, 0, 0, 1, 1])).tolist()
    [0, 1, 2, 0, 1]
    """
    parent = np.asarray(parent)
    return np.arange(len(parent)) - np.searchsorted(parent, parent)
