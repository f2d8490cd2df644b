"""No baseline reads D: change D, keep every public input (D_holdout, the persons outside the unit,
the block list) fixed, and every baseline's ranking stays the same."""

import numpy as np
import pytest

from censusrecon.baselines.holdout import holdout_split
from censusrecon.baselines.priors import ChancePrior
from censusrecon.experiments.config import load_config
from censusrecon.experiments.problem import stable_seed, load_population, resolve, select_units
from censusrecon.microdata.dataset import Dataset
from censusrecon.microdata.domain import Domain


def _private_rows(pop, cfg, unit):
    """Indices into ``pop`` of the persons prepare_unit puts in D (the same seeded split)."""
    rows = np.flatnonzero(pop.geography.mask(cfg.target.level, unit))
    index = Dataset(Domain.from_sizes({"I": len(rows)}), np.arange(len(rows))[:, None])
    private, _ = holdout_split(index, np.random.default_rng(stable_seed("split", cfg.seed, unit)), cfg.holdout_fraction)
    return rows[private.codes[:, 0]]


def _changed_by_d(root, with_block, build=None) -> list[str]:
    """The baselines whose ranking or support changes when D's persons get other attributes and
    every public input stays the same."""
    cfg = load_config(root / "configs" / "tiny.yaml", ["baselines=[holdout, county, state, national, chance]",
                                                      "attack.init=[random]"])
    pop = load_population(cfg)
    unit = select_units(pop, cfg)[0]
    d_rows = _private_rows(pop, cfg, unit)
    codes = pop.codes.copy()
    rng = np.random.default_rng(1)
    for j, size in enumerate(pop.domain.sizes):  # D's persons get other ages, sexes, races: a different D
        codes[d_rows, j] = rng.integers(0, size, len(d_rows))
    changed = Dataset(pop.domain, codes, pop.geography)
    before, after = resolve(cfg, pop).prepare(unit, with_block), resolve(cfg, changed).prepare(unit, with_block)
    assert not np.array_equal(before.private.codes, after.private.codes)  # D really changed
    assert np.array_equal(before.holdout.codes, after.holdout.codes)  # the public inputs did not
    build = build or (lambda people, cfg, prob: resolve(cfg, people).priors(prob))  # the priors the runs build
    p0, p1 = build(pop, cfg, before), build(changed, cfg, after)
    assert set(p0) == set(p1) == set(cfg.baselines.methods)
    out = []
    for name in p0:
        r0 = p0[name].ranking(rng=np.random.default_rng(0), limit=500)
        r1 = p1[name].ranking(rng=np.random.default_rng(0), limit=500)
        same = np.array_equal(r0.keys, r1.keys) and np.allclose(r0.scores, r1.scores)
        if not same or p0[name].support_size() != p1[name].support_size():
            out.append(name)
    return out


@pytest.mark.parametrize("with_block", [True, False])
def test_every_baseline_ranking_is_unchanged_when_only_d_changes(root, with_block):
    assert _changed_by_d(root, with_block) == []


def test_a_baseline_that_reads_d_is_caught(root):
    """The check above can fail: the old chance baseline (one-way margins of D) is caught."""
    def reading_d(pop, cfg, prob):
        return {**resolve(cfg, pop).priors(prob), "chance": ChancePrior.from_data(prob.private)}

    assert _changed_by_d(root, False, reading_d) == ["chance"]
