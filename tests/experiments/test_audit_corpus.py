"""The audit's power, measured: a corpus of privacy bugs injected into the publishing code (one at a time,
by monkeypatching what publishes), each of which breaks ε; the audit of the real instance must fail on each,
on the check that sees it, while the unmodified code passes. Settings are the shipped configs' mechanisms
on a smaller instance (a few whole releases, fewer runs): the slow tier runs them at the shipped settings."""

import dataclasses
import math
from fractions import Fraction

import numpy as np
import pytest

import censusrecon.synth.topdown_release
import censusrecon.synth.histogram
import censusrecon.synth.keyed
import censusrecon.synth.publishing
import censusrecon.synth.release
import censusrecon.synth.topdown
from censusrecon import synth
from censusrecon.experiments.config import load_config
from censusrecon.experiments.problem import load_population, resolve
from censusrecon.experiments.release.audit import audit_release
from censusrecon.synth.release_path import ReleaseSpec, publish
from censusrecon.synth.keyed import KeyedNoise
from censusrecon.synth.publishing import Draw

FAST = ["release.epsilons=[1.0]", "release.audit.runs=20000", "release.audit.whole_releases=40",
        "release.audit.replay_pairs=12", "release.audit.replay_draws=2", "release.audit.seed=11", "target.units=1"]
#: TopDown on a county root: every TopDown bug below is caught at these settings with audit seed 11 and with 12
TD = FAST + ["release.mechanisms=[topdown]", "target.with_block=[true]", "release.topdown.root=county",
             "release.audit.runs=5000", "release.audit.whole_releases=20", "release.audit.replay_pairs=25",
             "queries={kind: tables, tables: [P1, P12]}"]


def _cfg(root, *over):
    return load_config(root / "configs" / "release_tiny.yaml", FAST + list(over))


def _failures(results):
    """Each failed mechanism's failed checks over all its results (every ε): one ε's failures never hide another's."""
    bad: dict = {}
    for r in results:
        if not r.passed:
            bad.setdefault(r.mechanism, {}).update(
                {k: v for k, v in r.checks.items() if str(v).startswith("fail")}
                | ({"bound": r.epsilon_lower_bound} if r.epsilon_lower_bound > r.declared_epsilon else {}))
    return bad


# ---- the bugs -----------------------------------------------------------------------------------------------------

_noisy, _laplace, _gaussian, _dlap = synth.keyed.noisy, KeyedNoise.laplace, KeyedNoise.gaussian, synth.keyed._dlap
_scale, _budgets, _delta = synth.release.noise_scale, synth.topdown.budgets, synth.histogram.smoothed_delta
_rho_for = synth.topdown.rho_for
#: census tables with BLOCK: the path whose sensitivity the audit once read from the publishing code
CENSUS = ["target.with_block=[true]", "queries={kind: tables, tables: [P1, P12]}"]


def _tables_noisy(change):
    """synth.release's noisy() with ``change(counts, scale, kw) -> scale`` deciding the scale."""
    def fake(backend, counts, scale, **kw):
        return _noisy(backend, counts, change(np.asarray(counts), scale, kw), **kw)
    return fake


def _topdown_noisy(change):
    def fake(backend, counts, scale, **kw):
        return _noisy(backend, counts, change(np.asarray(counts), scale, kw), **kw)
    return fake


def _broadcast_block_detailed(backend, counts, scale, **kw):
    """The block level's detailed noise drawn once and reused for every block (ε = ∞: block0 − block1 is exact)."""
    out = _noisy(backend, counts, scale, **kw)
    if kw.get("stream") == 4 and kw.get("cells") is None:  # level 2 (block), detailed, a whole release
        width = _broadcast_block_detailed.width
        noise = (out - counts[None, :]).reshape(out.shape[0], -1, width)
        noise[:] = noise[:, :1]
        return counts[None, :] + noise.reshape(out.shape[0], -1)
    return out


def _uniform(u, t):
    """Bounded uniform noise with about the mean |x| of discrete Laplace at scale t (ε = ∞)."""
    r = math.exp(-1 / t)
    a = max(1, round(4 * r / (1 - r * r)))
    return np.floor(u[..., 0] * (2 * a + 1)).astype(np.int64) - a


def _clipped(u, t):
    return np.clip(_dlap(u, t), -math.ceil(4 * t), math.ceil(4 * t))


def _clipped_10(u, t):
    return np.clip(_dlap(u, t), -math.ceil(10 * t), math.ceil(10 * t))


def _truncated_gaussian(self, releases, stream, cells, sigma):
    return np.clip(_gaussian(self, releases, stream, cells, sigma), -math.floor(3 * sigma), math.floor(3 * sigma))


def _same_noise_every_release(self, releases, stream, cells, scale):
    return _laplace(self, [0] * len(releases), stream, cells, scale)


def _tables_noise_shared(backend, counts, scale, **kw):
    """The second table's first cells get the first table's noise (correlated across tables)."""
    out = _noisy(backend, counts, scale, **kw)
    if kw.get("cells") is None and out.shape[1] > 40:
        noise = out - counts[None, :]
        noise[:, 20:40] = noise[:, :20]
        return counts[None, :] + noise
    return out


_TRUE: dict = {}


def _leaky_rounding(what):
    """TopDown whose rounding of each parent's children leans on the children's true totals: their fractional
    parts raised by up to 0.3 for the blocks with the most true persons (``totals``), or fractions equal to a
    tenth broken by the true totals (``ties``). The estimation is the real one with only that step changed."""
    def rounding(z, total, truth):
        if what == "totals":
            return synth.topdown.round_keeping_sums(z + 0.3 * (truth / max(truth.max(), 1))[:, None] * (z > 0), total)
        fl = np.floor(z + 1e-9)
        rem = (np.asarray(total) - fl.sum(axis=0)).round().astype(np.int64)
        frac = np.round(z - fl, 1)  # fractions equal to a tenth count as ties
        order = np.lexsort((np.broadcast_to(-truth[:, None], z.shape), -frac), axis=0)  # ties: by the truth
        rank = np.empty_like(order)
        np.put_along_axis(rank, order, np.arange(z.shape[0])[:, None].repeat(z.shape[1], axis=1), axis=0)
        return (fl + (rank < rem[None, :])).astype(np.int64)

    def estimate(shape, meas, strategy, solver="clarabel"):
        """:func:`synth.topdown.estimate`, its children's rounding given their true totals."""
        truth, T = _TRUE["hist"], synth.topdown
        wd, wt = T._weights(meas, shape.levels[0])
        x = T.solve_children((meas.detailed[0].astype(np.float64), wd), (meas.tables[0].astype(np.float64), wt),
                             strategy.tables, None, meas.root_total, solver)[0]
        total = meas.root_total if meas.root_total is not None else int(round(x.sum()))
        est = [T._total_rounding(x, max(total, 0))[None, :]]
        for lv in range(1, len(shape.levels)):
            out = np.zeros((len(shape.ids[lv]), strategy.types), dtype=np.int64)
            wd, wt = T._weights(meas, shape.levels[lv])
            for p in range(len(shape.ids[lv - 1])):
                kids = np.flatnonzero(shape.parent[lv] == p)
                support = np.flatnonzero(est[lv - 1][p] > 0)
                if kids.size == 0 or support.size == 0:
                    continue
                a = strategy.tables[:, support]
                used = np.flatnonzero(a.getnnz(axis=1) > 0)
                x = T.solve_children((meas.detailed[lv][kids][:, support].astype(np.float64), wd),
                                     (meas.tables[lv][kids][:, used].astype(np.float64), wt), a[used],
                                     est[lv - 1][p, support], None, solver)
                z = T.project_simplex(x, est[lv - 1][p, support].astype(np.float64))
                out[np.ix_(kids, support)] = rounding(z, est[lv - 1][p, support], truth[lv][kids].sum(axis=1))
            est.append(out)
        return est

    def publish_topdown(cfg, td, eps, backend, runs=None, cells=None, estimate=True):
        _TRUE["hist"] = [h.astype(np.float64) for h in td.tree.hist]
        return real_publish(cfg, td, eps, backend, runs, cells, estimate)
    real_publish = synth.topdown_release.publish_topdown
    return publish_topdown, estimate


def _leaky_estimate(real_publish):
    """Publish as usual, then re-estimate with the root's true histogram in place of its noisy one."""
    def publish_topdown(cfg, td, eps, backend, runs=None, cells=None, estimate=True):
        rel = real_publish(cfg, td, eps, backend, runs, cells, estimate)
        if runs is None and rel.estimates is not None:
            meas = dataclasses.replace(rel.measurements, detailed=[td.tree.hist[0]] + rel.measurements.detailed[1:])
            rel.estimates = synth.topdown.estimate(td.shape, meas, td.strategy)
        return rel
    return publish_topdown


def _single_branch_half(real_laplace_tables):
    """The single-release call (the one that publishes) noised at half the scale; batches untouched."""
    def laplace_tables(data, workload, epsilon, backend, relation="replace_one", levels=1, declared_total=False,
                       runs=None, cells=None):
        eps = 2 * epsilon if runs is None else epsilon
        tables, rec = real_laplace_tables(data, workload, eps, backend, relation, levels, declared_total, runs, cells)
        return tables, dataclasses.replace(rec, epsilon=epsilon)
    return laplace_tables


def _halved_when_big(counts, scale, kw):
    return scale / 2 if counts.size and counts.max() > 20 and kw.get("cells") is None else scale


# name: (config overrides, patches {(owner, attribute): fake}, {mechanism: check that must fail})
TABLE_BUGS = {
    "noise 25% too small": ([], {(synth.release, "noise_scale"): lambda d, e, b: (0.75 * _scale(d, e, b)[0], None)},
                            {"laplace_tables": "noise_scale"}),
    "the replace-one factor 2 forgotten": ([], {(synth.release, "marginal_sensitivity"):
                                                lambda dom, m, rel, lv=1: len(m) * lv}, {"laplace_tables": "noise_scale"}),
    "the sensitivity of one table of all": ([], {(synth.release, "marginal_sensitivity"):
                                                 lambda dom, m, rel, lv=1: 2 * lv}, {"laplace_tables": "noise_scale"}),
    "half the scale when the largest true cell exceeds 20": (
        [], {(synth.release, "noisy"): _tables_noisy(_halved_when_big)}, {"laplace_tables": "noise_scale"}),
    "half the scale in cells of 10 or more persons": (
        [], {(synth.release, "noisy"): lambda b, c, s, **kw: _noisy(b, c, s, **kw) if kw.get("cells") is not None or
             not np.any(np.asarray(c) >= 10) else np.where(np.asarray(c)[None, :] >= 10,
                                                           _noisy(b, c, s / 2, **kw), _noisy(b, c, s, **kw))},
        {"laplace_tables": "noise_scale"}),
    "the single-release branch at half the scale": (
        [], {(synth.release, "laplace_tables"): None}, {"laplace_tables": "noise_scale"}),
    "uniform noise of the same mean |x|": ([], {(synth.keyed, "_dlap"): _uniform}, {"laplace_tables": "noise_shape"}),
    "Laplace noise clipped at 4 scales": ([], {(synth.keyed, "_dlap"): _clipped}, {"laplace_tables": "noise_tail"}),
    # 100 whole releases of the tiny config hold about 6 draws beyond 10 scales; the pairs' draws, millions
    "Laplace noise clipped at 10 scales": ([], {(synth.keyed, "_dlap"): _clipped_10}, {"laplace_tables": "noise_tail"}),
    "the same noise in every release": ([], {(KeyedNoise, "laplace"): _same_noise_every_release},
                                        {"laplace_tables": "noise_independence"}),
    "one table's noise reused in another": ([], {(synth.release, "noisy"): _tables_noise_shared},
                                            {"laplace_tables": "noise_independence"}),
    "the perturbed histogram's noise 25% too small": (
        ["release.mechanisms=[perturbed_histogram]"],
        {(synth.histogram, "noise_scale"): lambda d, e, b: (0.75 * _scale(d, e, b)[0], None)},
        {"perturbed_histogram": "noise_scale"}),
    "the smoothed histogram's δ for 10ε": (
        ["release.mechanisms=[smoothed_histogram]"],
        {(synth.histogram, "smoothed_delta"): lambda e, n, c, r: _delta(10 * e, n, c, r)}, {"smoothed_histogram": "bound"}),
    "the perturbed histogram's noise uniform": (
        ["release.mechanisms=[perturbed_histogram]", "release.audit.runs=100000"], {(synth.keyed, "_dlap"): _uniform},
        {"perturbed_histogram": "noise_shape"}),
    # the yardstick once came from the code under audit: these passed while the audit read the same function
    "the census tables' replace-one factor 2 forgotten": (
        CENSUS, {(synth.release, "_census_sensitivity"): lambda per_person, relation, levels: per_person * levels},
        {"laplace_tables": "noise_scale"}),
    "n read from the data under add/remove": (
        ["release.relation=add_remove", "target.with_block=[true]"],
        {(synth.release, "estimate_total"): None}, {"laplace_tables": "post_processing"}),
}

TOPDOWN_BUGS = {
    "half the noise at levels of more than 10 nodes": (
        [], {(synth.topdown, "noisy"): _topdown_noisy(lambda c, s, kw: s / 2 if c.size > 10 * 500 else s)},
        "noise_scale"),
    "one level with 25% too little noise": (  # a 4% overspend: OpenDP's maps see it, the noise alone barely
        [], {(synth.topdown, "budgets"): lambda *a, **k: [dataclasses.replace(b, scale=0.75 * b.scale)
                                                         if b.level == "block" else b for b in _budgets(*a, **k)]},
        "accounting"),
    "the replace-one factor 2 forgotten": (
        [], {(synth.topdown, "budgets"): lambda lv, e, strategy, privacy, *a, **k: _budgets(
            lv, e, strategy, dataclasses.replace(privacy, relation="add_remove"), *a, **k)},
        "noise_scale"),
    "shares not renormalised, the composition check skipped": (
        [], {(synth.topdown, "level_shares"): None, (synth.topdown, "check_spent"): lambda b, e: None}, "accounting"),
    "block-level detailed noise drawn once for every block": (
        [], {(synth.topdown, "noisy"): _broadcast_block_detailed}, "noise_independence"),
    "the discrete Gaussian truncated at 3σ": (
        ["release.topdown.accounting=zcdp"], {(KeyedNoise, "gaussian"): _truncated_gaussian}, "noise_tail"),
    "a ρ conversion that overspends by 4.3%": (  # the audit once took its ρ from the same rho_for
        ["release.topdown.accounting=zcdp"],
        {(synth.topdown, "rho_for"): lambda e, d: _rho_for(e, d) * Fraction(1043, 1000)}, "accounting"),
    "the estimation reading the true counts": (
        [], {(synth.topdown_release, "publish_topdown"): None}, "post_processing"),
    "Laplace noise clipped at 4 scales": ([], {(synth.keyed, "_dlap"): _clipped}, "noise_tail"),
    # post-processing reading the truth only where it rounds: caught by replaying data far from the real one
    "leaf rounding steered by the children's true totals": ([], "totals", "post_processing"),
    "rounding ties broken by the children's true totals": ([], "ties", "post_processing"),
}


def _set_everywhere(monkeypatch, owner, attr, fake):
    """Replace ``owner.attr`` and every project module's binding of the same object (a module that imported
    it by name at its top holds its own reference), so the code that publishes and the audit both get the bug."""
    import sys

    real = getattr(owner, attr)
    for mod in [m for name, m in list(sys.modules.items()) if name.split(".")[:2] in (["censusrecon", "experiments"], ["censusrecon", "synth"])]:
        if mod is not owner and getattr(mod, attr, None) is real:
            monkeypatch.setattr(mod, attr, fake)
    monkeypatch.setattr(owner, attr, fake)


def _patch(monkeypatch, patches, name):
    if isinstance(patches, str):  # the rounding bugs
        pub, est = _leaky_rounding(patches)
        _set_everywhere(monkeypatch, synth.topdown_release, "publish_topdown", pub)
        monkeypatch.setattr(synth.topdown_release, "topdown_estimate", est)
        return
    for (owner, attr), fake in patches.items():
        if fake is None:  # bugs that wrap what they replace
            real = getattr(owner, attr)
            fake = {"laplace_tables": lambda: _single_branch_half(real),
                    "estimate_total": lambda: lambda workload, noisy: int(round(_TRUE["n"])),
                    "publish_topdown": lambda: _leaky_estimate(real),
                    "level_shares": lambda: lambda lv, sh=None: {k: v * 3 / 2 for k, v in real(lv, sh).items()}}[attr]()
            if attr == "estimate_total":  # n taken from the data the release was made from
                real_lt = synth.release.laplace_tables

                def lt(data, *a, **k):
                    _TRUE["n"] = len(data)
                    return real_lt(data, *a, **k)
                monkeypatch.setattr(synth.release, "laplace_tables", lt)
                monkeypatch.setattr(synth.publishing, "laplace_tables", lt)
        if (owner, attr) == (synth.topdown_release, "publish_topdown"):
            _set_everywhere(monkeypatch, owner, attr, fake)
        monkeypatch.setattr(owner, attr, fake)
        if (owner, attr) == (synth.release, "laplace_tables"):
            monkeypatch.setattr(synth.publishing, "laplace_tables", fake)


@pytest.fixture(scope="module")
def tiny_pop():
    from pathlib import Path
    ROOT = Path(__file__).resolve().parents[2]

    return load_population(_cfg(ROOT))


def test_the_unmodified_code_passes_the_corpus_settings(root, tiny_pop):
    """Laplace tables, and TopDown with both accountings (pure: discrete Laplace; zCDP: discrete Gaussian, as 2020
    ran it): what the production tree's slow test checks at the shipped settings, on a county root."""
    for cfg in (_cfg(root, "release.mechanisms=[laplace_tables]"), load_config(root / "configs" / "release_tiny.yaml", TD),
                load_config(root / "configs" / "release_tiny.yaml", TD + ["release.topdown.accounting=zcdp"])):
        bad = _failures(audit_release(resolve(cfg, tiny_pop)))
        assert not bad, bad


@pytest.mark.parametrize("bug", list(TABLE_BUGS))
def test_each_tables_bug_of_the_corpus_fails_the_audit(bug, root, tiny_pop, monkeypatch):
    over, patches, caught = TABLE_BUGS[bug]
    cfg = _cfg(root, *(["release.mechanisms=[laplace_tables]"] + list(over)))
    _patch(monkeypatch, patches, bug)
    bad = _failures(audit_release(resolve(cfg, tiny_pop)))
    for mech, check in caught.items():
        assert mech in bad and check in bad[mech], (bug, bad)


@pytest.mark.parametrize("bug", list(TOPDOWN_BUGS))
def test_each_topdown_bug_of_the_corpus_fails_the_audit(bug, root, tiny_pop, monkeypatch):
    over, patches, check = TOPDOWN_BUGS[bug]
    cfg = load_config(root / "configs" / "release_tiny.yaml", TD + over)
    if bug.startswith("block-level"):
        from censusrecon.synth.topdown_release import topdown_root

        study = resolve(cfg, tiny_pop)
        _broadcast_block_detailed.width = topdown_root(study, study.units[0], True).strategy.types
    _patch(monkeypatch, patches, bug)
    bad = _failures(audit_release(resolve(cfg, tiny_pop)))
    assert "topdown" in bad and check in bad["topdown"], (bug, bad)


AGENCY = ["release.epsilons=[2.0]", "release.mechanisms=[topdown]", "release.audit.runs=5000",
          "release.audit.whole_releases=20", "release.audit.replay_pairs=50", "release.audit.replay_draws=2",
          "release.audit.seed=3", 'target.unit_ids=["01001000100"]']


def test_the_corpus_has_twenty_bugs_across_every_class():
    assert len(TABLE_BUGS) + len(TOPDOWN_BUGS) >= 20


def test_a_single_release_equals_the_batch_element_drawn_with_the_same_key(root, tiny_pop):
    """One path: the release that is published and the releases the audit draws are one function; cell by
    cell, the cells a pair touches equal the whole release's."""
    from censusrecon.experiments.problem import build_workload, select_units
    from censusrecon.synth.topdown_release import publish_topdown, topdown_root

    cfg = _cfg(root, "target.with_block=[true]")
    unit = select_units(tiny_pop, cfg)[0]
    D = resolve(cfg, tiny_pop).prepare(unit, True, pad_blocks=False).private
    w = build_workload(cfg, cfg.queries[0], D.domain)
    rng = np.random.default_rng(0)
    for mech in ("laplace_tables", "perturbed_histogram"):
        one = publish(ReleaseSpec.of(cfg), mech, 1.0, D, w, Draw(KeyedNoise(5, release=3), rng)).output
        batch = publish(ReleaseSpec.of(cfg), mech, 1.0, D, w, Draw(KeyedNoise(5), rng, runs=[7, 3, 2])).output
        if mech == "laplace_tables":
            assert np.array_equal(one.counts, batch.counts[1])
            cells = np.array([4, 0, w.num_queries - 1])
            part = publish(ReleaseSpec.of(cfg), mech, 1.0, D, w, Draw(KeyedNoise(5), rng, runs=[3], cells=cells)).output.counts
            assert np.array_equal(part[0], one.counts[cells])
        else:
            full = np.zeros(one.domain_size, dtype=np.int64)
            full[one.keys] = one.counts
            assert np.array_equal(full, batch[1])
    for accounting in ("pure", "zcdp"):
        c = load_config(root / "configs" / "release_tiny.yaml", TD + [f"release.topdown.accounting={accounting}"])
        td = topdown_root(resolve(c, tiny_pop), unit, True)
        one = publish_topdown(c, td, 1.0, KeyedNoise(9, release=4)).measurements
        batch = publish_topdown(c, td, 1.0, KeyedNoise(9), runs=[1, 4]).measurements
        for x, y in zip(one.detailed + one.tables, batch.detailed + batch.tables):
            assert np.array_equal(x, y[1])
        cells = {(2, "detailed"): np.array([3, 17]), (0, "tables"): np.array([0, 5])}
        part = publish_topdown(c, td, 1.0, KeyedNoise(9), runs=[4], cells=cells).measurements
        assert np.array_equal(part.detailed[2][0], one.detailed[2].ravel()[[3, 17]])
        assert np.array_equal(part.tables[0][0], one.tables[0].ravel()[[0, 5]])


def test_audit_seeds_are_fresh_and_recorded(root, tiny_pop):
    cfg = load_config(root / "configs" / "release_tiny.yaml",
                      [x for x in FAST if not x.startswith("release.audit.seed")] + ["release.mechanisms=[smoothed_histogram]"])
    a, b = audit_release(resolve(cfg, tiny_pop)), audit_release(resolve(cfg, tiny_pop))
    assert a[0].details["audit_seed_source"] == "fresh" and a[0].details["audit_seed"] != b[0].details["audit_seed"]
    given = audit_release(resolve(cfg, tiny_pop), seed=123)
    assert given[0].details["audit_seed"] == 123 and given[0].details["audit_seed_source"] == "given"


@pytest.mark.slow(seconds=120)
@pytest.mark.parametrize("bug", list(TABLE_BUGS))
def test_each_tables_bug_fails_the_audit_at_the_shipped_settings(bug, root, monkeypatch):
    """Slow: ``censusrecon audit configs/release_tiny.yaml`` as shipped (every ε, its runs, every unit)."""
    over, patches, caught = TABLE_BUGS[bug]
    mechs = [o for o in over if o.startswith("release.mechanisms")] or ["release.mechanisms=[laplace_tables]"]
    rest = [o for o in over if not o.startswith("release.mechanisms") and not o.startswith("release.audit.runs")]
    cfg = load_config(root / "configs" / "release_tiny.yaml", mechs + rest)
    pop = load_population(cfg)
    _patch(monkeypatch, patches, bug)
    bad = _failures(audit_release(resolve(cfg, pop)))
    for mech, check in caught.items():
        assert mech in bad and check in bad[mech], (bug, bad)


@pytest.mark.slow(seconds=2000)  # 11 to 34 min each, measured on 2026-12-02
@pytest.mark.parametrize("bug", list(TOPDOWN_BUGS))
def test_each_topdown_bug_fails_the_audit_at_the_shipped_settings(bug, monkeypatch, compact_agency):
    """Slow (minutes each): ``censusrecon audit`` of the compact agency config at its settings, TopDown alone."""
    over, patches, check = TOPDOWN_BUGS[bug]
    cfg = load_config(compact_agency, ["release.mechanisms=[topdown]"] + over)
    pop = load_population(cfg)
    if bug.startswith("block-level"):
        from censusrecon.synth.topdown_release import topdown_root

        _broadcast_block_detailed.width = topdown_root(resolve(cfg, pop), "01001000100", True).strategy.types
    _patch(monkeypatch, patches, bug)
    bad = _failures(audit_release(resolve(cfg, pop)))
    assert "topdown" in bad and check in bad["topdown"], (bug, bad)


def _truncated_at_5_sigma(self, releases, stream, cells, sigma):
    return np.clip(_gaussian(self, releases, stream, cells, sigma), -math.floor(5 * sigma), math.floor(5 * sigma))


@pytest.mark.slow(seconds=1800)
def test_the_discrete_gaussian_truncated_at_5_sigma_fails_on_the_production_tree(monkeypatch, compact_agency):
    """Slow (minutes): the reviewers' truncation, which passed the earlier audit even at 50,000 runs: beyond 5σ
    the discrete Gaussian puts 6 draws in 10 million, so it shows only over whole production releases (100
    of them hold 330 million block-level draws, 190 of them beyond 5σ)."""
    cfg = load_config(compact_agency,
                      AGENCY + ["release.topdown.accounting=zcdp", "release.audit.whole_releases=100",
                                "release.audit.replay_pairs=2", "release.audit.replay_draws=1"])
    pop = load_population(cfg)
    monkeypatch.setattr(KeyedNoise, "gaussian", _truncated_at_5_sigma)
    bad = _failures(audit_release(resolve(cfg, pop)))
    assert "topdown" in bad and "noise_tail" in bad["topdown"], bad


def test_a_rerun_under_another_seed_is_recorded_beside_a_failed_audit_never_in_its_place(tmp_path):
    from censusrecon.synth.audit.timing import record_audit
    from censusrecon.synth.audit.statistics import AuditResult

    def result(passed_bound, seed):
        return [AuditResult("laplace_tables", 1.0, passed_bound, 100, 0.95, "e", {"noise_scale": "pass"},
                            {"audit_seed": seed, "audit_seed_source": "fresh"})]

    history = tmp_path / "audit_history.jsonl"
    assert record_audit(history, result(1.5, 1), "code-a") == []  # a failure (bound over ε), nothing earlier
    earlier = record_audit(history, result(0.2, 2), "code-a")  # re-run under another seed: passes
    assert len(earlier) == 1 and earlier[0]["seed"] == 1 and "laplace_tables ε=1: bound" in earlier[0]["failed"]
    assert record_audit(history, result(0.2, 3), "code-b") == []  # other code: its own history
    assert len(history.read_text().splitlines()) == 3


# ---- PUBLISH only for what was checked: the review's classes (issue 62) -------------------------------------------


def _laplace_at_twice(name):
    """A mechanism publishing Laplace tables at twice its ε (ε = ∞ for half of what it says), under ``name``."""
    def publish(x):
        pub = synth.publishing.publish_laplace_tables(dataclasses.replace(x, setting=2 * x.setting))
        return dataclasses.replace(pub, mechanism=name)
    return publish


@pytest.fixture
def registered():
    """Register test mechanisms for one test, removed after it."""
    names = []

    def register(kind):
        synth.registry.register(kind, replace=True)
        names.append(kind.name)
        return kind

    yield register
    for n in names:
        synth.registry.unregister(n)


@pytest.mark.parametrize("family", ["histogram", "smoothed", "tree"])
def test_a_mechanism_registered_with_a_weaker_family_than_what_it_publishes_fails(family, root, tiny_pop, registered):
    """Tables at 2ε registered as a histogram (a 4-cell one would pass), draws or TopDown's tree: the audit publishes
    through the mechanism on the real workload, sees what it publishes does not fit the family, and fails."""
    kind = registered(synth.registry.MechanismKind("weak", "Weak", _laplace_at_twice("weak"), audit=family,
                                                   relations=("replace_one",)))
    cfg = _cfg(root, f"release.mechanisms=[{kind.name}]")
    [res] = audit_release(resolve(cfg, tiny_pop))
    assert res.outcome == "failed" and res.checks["family_contract"].startswith("fail"), res.checks_summary()
    assert family in res.checks["family_contract"]


def test_two_mechanisms_of_one_family_are_each_audited_through_their_own_publishing(root, tiny_pop, registered):
    """laplace_tables and a copy at 2ε, both in the tables family: once the copy was filed under the first one's
    audit; each is now drawn through its own function, the copy fails and Laplace's passes."""
    registered(synth.registry.MechanismKind("copy", "Copy", _laplace_at_twice("copy"), audit="tables",
                                            uses=frozenset({"unit_total"})))
    cfg = _cfg(root, "release.mechanisms=[laplace_tables, copy]")
    results = {r.mechanism: r for r in audit_release(resolve(cfg, tiny_pop))}
    assert results["laplace_tables"].passed, results["laplace_tables"].checks_summary()
    assert results["copy"].outcome == "failed" and "noise_scale" in _failures([results["copy"]])["copy"]
    assert {r.details["published_through"] for r in results.values()} == {"laplace_tables", "copy"}


def test_a_dp_mechanism_without_an_audit_family_is_refused_when_built_or_registered():
    with pytest.raises(ValueError, match="is DP: name the audit family"):
        synth.registry.MechanismKind("x", "X", _laplace_at_twice("x"))
    with pytest.raises(ValueError, match="'x' is DP: no audit family is named 'tabels'"):  # a family is a value
        synth.registry.register(synth.registry.MechanismKind("x", "X", _laplace_at_twice("x"), audit="tabels"))


def test_the_synthetic_file_as_published_must_fit_the_tables_the_audit_drew(root, tiny_pop, monkeypatch):
    """A synthetic release whose call that publishes (one release, the fit) noises its tables at half the scale, its
    batch branch (the audit's draws) honest: the single release's tables differ from the batch's with the same key."""
    real = synth.publishing._laplace

    def halved_when_fitted(x):
        return real(dataclasses.replace(x, setting=2 * x.setting) if x.runs is None else x)

    monkeypatch.setattr(synth.publishing, "_laplace", halved_when_fitted)
    cfg = _cfg(root, "release.mechanisms=[synthetic]")
    [res] = audit_release(resolve(cfg, tiny_pop))
    assert res.outcome == "failed" and res.checks["single_release"].startswith("fail"), res.checks_summary()


def test_an_epsilon_the_audit_skipped_is_never_named_by_publish(root, tiny_pop, monkeypatch):
    """The grid 0.1, 1, 10 audited at its extremes, Laplace tables at half their noise at ε = 1 alone: the audit
    passes (it never drew ε = 1); a verdict showing ε ≤ 1 safe gives PUBLISH at ε ≤ 0.1 at most, never ε = 1."""
    from censusrecon.experiments.release.decision import PUBLISH, Evidence, decide
    from tests.experiments.test_inference import inference_figures

    real = synth.release.noise_scale
    monkeypatch.setattr(synth.release, "noise_scale", lambda d, e, b: (real(d, e, b)[0] / (2 if e == 1.0 else 1), None))
    cfg = _cfg(root, "release.mechanisms=[laplace_tables]", "release.epsilons=[0.1, 1.0, 10.0]",
               "release.audit.epsilons=extremes")
    study = resolve(cfg, tiny_pop)
    audits = audit_release(study)
    assert all(r.passed for r in audits) and {r.declared_epsilon for r in audits} == {0.1, 10.0}
    row = {"mechanism": "laplace_tables", "status": "safe", "setting": 1.0, "x": {"setting": 1.0, "units": 1},
           "next": None, "plan": "", "text": ""}
    entry = {"mechanism": "laplace_tables", "for_publication": True}
    games = inference_figures({"laplace_tables": [0.1, 1.0, 10.0]})  # the inference attacks within tolerance
    d = decide(cfg, Evidence({False: [row]}, audits, [entry], released=tuple(study.units), **games))
    (m,) = d.mechanisms
    assert m.action == PUBLISH and m.setting == 0.1 and m.covered == [0.1], d.lines()
    assert any("ε = 1" in c and "release.audit.epsilons" in c for c in m.caveats)
    d = decide(cfg, Evidence({False: [row]}, [r for r in audits if r.declared_epsilon == 10.0], [entry],
                             released=tuple(study.units), **games))
    assert d.mechanisms[0].action != PUBLISH


# ---- SmartNoise Synth's MST and AIM with a bug injected into the library (tests/experiments/smartnoise_bugs.py) ---
# The default tier runs each bug's ledger at the fewest fits that fail it (test_smartnoise_adapter.py); here the
# whole audit of configs/agency/own_release.yaml's program, at its shipped settings, on the example's six tracts.

#: (bug, program, the ledger check that must fail it, the other checks that may see it too: half the noise on the
#: one-way marginals is also more ρ than their share, which the first measurements' check sees at ε = 8)
SMARTNOISE_BUGS = [("mst_half_noise", "smartnoise_mst", "measurement_noise", {"measurements_scale"}),
                   ("mst_free_selection", "smartnoise_mst", "selection_law", set()),
                   ("aim_forgets_a_round", "smartnoise_aim", "spending", set()),
                   (None, "smartnoise_mst", None, set()), (None, "smartnoise_aim", None, set())]


@pytest.mark.slow(seconds=900)
@pytest.mark.parametrize("bug, program, check, also", SMARTNOISE_BUGS)
def test_each_smartnoise_bug_fails_the_shipped_audit_and_the_honest_synthesizers_pass(program_agency, root, bug,
                                                                                        program, check, also):
    from tests.conftest import environment

    python = root / ".venv-smartnoise" / "bin" / "python"
    environment(python.parents[1] / ".installed", "make smartnoise-env", required=True)
    d, over = program_agency
    cfg = load_config(root / "configs" / "agency" / "own_release.yaml",
                      over[:2] + ["release.mechanisms=[]", "release.files=[]", "release.audit.seed=3"])
    [spec] = [p for p in cfg.release.programs if p.name == program]
    if bug:
        spec = spec.model_copy(update={"command": [str(python), str(root / "tests/experiments/smartnoise_bugs.py")],
                                       "params": {**spec.params, "bug": bug}})
    cfg = cfg.model_copy(update={"release": cfg.release.model_copy(update={"programs": [spec]})})
    results = audit_release(resolve(cfg, load_population(cfg)), backend="local")  # Ray's results are the same
    failed = {k for r in results for k, v in r.checks.items() if str(v).startswith("fail")}
    if bug is None:
        assert all(r.outcome == "passed" for r in results), [(r.declared_epsilon, r.checks_summary()) for r in results]
    else:
        assert check in failed and failed <= {check} | also, [(r.declared_epsilon, r.failed_checks()) for r in results]
