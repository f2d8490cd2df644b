"""The tree family: TopDown's production tree, every level and node, on the real data under a root."""

from __future__ import annotations

import dataclasses

import numpy as np

from censusrecon.microdata.dataset import Dataset
from censusrecon.microdata.errors import ConfigError
from censusrecon.microdata.geography import Geography
from censusrecon.microdata.seeds import stable_seed
from censusrecon.synth import registry
from censusrecon.synth.audit.checks import (
    WholeNoise,
    band_groups,
    bound_noise,
    combine_units,
    keyed_release,
    opendp_accounting,
    publication_noise,
    release_tail_stats,
    shape_subsample,
    tail_from_stats,
    whole_checks,
)
from censusrecon.synth.audit.families import AuditFamily, FamilyCall, register_family
from censusrecon.synth.audit.measured import gaussian_white_box, laplace_white_box
from censusrecon.synth.audit.neighbours import add_row, drop_row, far_datasets, types_of, with_type
from censusrecon.synth.audit.source import AuditSource
from censusrecon.synth.audit.statistics import (
    AuditResult,
    NoiseGroups,
    ReplaySequence,
    audit_outputs,
    gaussian_shape_pvalue,
    laplace_shape_pvalue,
)
from censusrecon.synth.audit.yardstick import detailed_sensitivity, node_table_sensitivity, opendp_epsilon, zcdp_rho
from censusrecon.synth.mechanism import PrivacyError, Relation, parse_relation
from censusrecon.synth.publishing import publish_shared
from censusrecon.synth.topdown import QUERIES


def _topdown_structure(src: AuditSource, unit: str, wb: bool, nodes: dict) -> str:
    """Neighbours that empty a block (its last resident removed) and a whole unit of the target level
    (likewise) must publish trees of the same shape and measurements of the same shapes, through
    the production functions from the population on. ``nodes``: the units of the target level in the
    real tree (:func:`topdown_root`'s)."""
    spec, pop = src.spec, src.pop
    geo = pop.geography
    level = spec.level
    inside = np.flatnonzero(np.isin(geo.units(level), list(nodes)))
    if not len(inside):
        return "not applicable: nobody lives under the root"
    cases = []
    other = [u for u in nodes if u != unit and (geo.units(level) == u).any()]
    if other:  # a whole unit down to one resident, and then none
        rows = np.flatnonzero(geo.units(level) == other[0])
        keep = np.setdiff1d(np.arange(len(pop)), rows[1:])
        cases.append(("a unit", keep, rows[0]))
    if wb:  # a block of the audited unit down to one resident, and then none
        rows = np.flatnonzero(geo.units(level) == unit)
        blocks = geo.units("block")[rows]
        first = rows[blocks == blocks[0]]
        keep = np.setdiff1d(np.arange(len(pop)), first[1:])
        cases.append(("a block", keep, first[0]))
    for what, keep, last in cases:
        shapes = []
        for rows in (keep, np.setdiff1d(keep, [last])):
            sub = pop.take(rows)
            g = Geography(sub.geography.levels, sub.geography.ids, catalogue=geo.catalogue)
            people = Dataset(sub.domain, sub.codes, g)
            try:
                t = src.with_people(people).topdown_root(unit, wb)
                meas = src.publish_topdown(t, min(spec.epsilons), publication_noise(spec, 0, "structure", what),
                                       runs=1).measurements
            except (PrivacyError, ConfigError) as e:
                return f"fail: the neighbour that empties {what} could not be released ({e})"
            shapes.append((t.shape.key(), tuple(x.shape for x in meas.detailed + meas.tables)))
        if shapes[0] != shapes[1]:
            return f"fail: emptying {what} changes the shape of the tree or of its measurements"
    return "pass"


def _roots(src: AuditSource, units: list[str], wb: bool) -> list[list[str]]:
    """The audited units grouped by the root of their TopDown release (one production tree each)."""
    by_root: dict = {}
    for u in units:
        by_root.setdefault(src.topdown_shape(u, wb)[0], []).append(u)
    return list(by_root.values())


def _tree_change(halves: dict, unit: str, change) -> dict:
    out = dict(halves)
    out[unit] = change(halves[unit])
    return out


def _topdown_pairs(td, real: dict, unit: str, relation: Relation, wb: bool) -> list[tuple[str, dict]]:
    """Neighbours of the real tree's halves: replace-one moves a person of ``unit`` (of its commonest type)
    to the last block of another unit, changes a person of the commonest type to the tree's rarest type
    and one of the rarest present type to the commonest, and replaces a person by the type whose table
    cells differ most from the type in most cells; add/remove adds the type in most cells and removes a
    person of the commonest type."""
    dom = td.person_domain
    a_mat = td.strategy.tables.tocsc()
    per_type = np.diff(a_mat.indptr)
    most = int(np.argmax(per_type))
    counts = td.tree.hist[0][0]
    D = real[unit]
    _, types = types_of(D)
    pairs = []
    if relation is Relation.ADD_REMOVE:
        pairs.append((f"a person of the type in most cells ({int(per_type[most])}) added to {unit}",
                      _tree_change(real, unit, lambda d: add_row(d, dom, most, 0 if wb else None))))
        if len(D):
            row = int(np.argmax(np.bincount(types, minlength=dom.total_size)[types]))
            pairs.append((f"a person of {unit}'s commonest type removed", _tree_change(real, unit, lambda d: drop_row(d, row))))
        return pairs
    if not len(D):
        return pairs
    local = np.bincount(types, minlength=dom.total_size)
    row_c = int(np.flatnonzero(types == int(np.argmax(local)))[0])
    rare, common = int(np.argmin(counts)), int(np.argmax(counts))
    pairs.append((f"a person of {unit}'s commonest type changed to the tree's rarest",
                  _tree_change(real, unit, lambda d: with_type(d, row_c, dom, rare))))
    present = np.flatnonzero(local > 0)
    rp = int(present[np.argmin(local[present])])
    row_r = int(np.flatnonzero(types == rp)[0])
    pairs.append((f"a person of {unit}'s rarest type changed to the tree's commonest",
                  _tree_change(real, unit, lambda d: with_type(d, row_r, dom, common))))
    others = [u for u in td.nodes if u != unit]
    shared = np.asarray((a_mat.T @ a_mat[:, most]).todense()).ravel()
    b = int(np.argmax(per_type + per_type[most] - 2 * shared))
    if others:
        target = others[-1]
        last = (len(td.nodes[target][2]) - 1) if wb else None
        moved = _tree_change(real, unit, lambda d: drop_row(d, row_c))
        keep_type = int(types[row_c])
        moved = _tree_change(moved, target, lambda d: add_row(d, dom, keep_type, last))
        pairs.append((f"a person moved from {unit} to {target}" + (f", block {last}" if wb else ""), moved))
        worst = _tree_change(real, unit, lambda d: with_type(d, row_c, dom, most))
        worst2 = _tree_change(_tree_change(worst, unit, lambda d: drop_row(d, row_c)), target,
                              lambda d: add_row(d, dom, b, last))
        pairs.append((f"a person of the type in most cells ({int(per_type[most])}) in {unit} replaced by the type "
                      f"differing most ({int((per_type + per_type[most] - 2 * shared)[b])} cells) in {target}", worst2))
    return pairs


def _tree_neighbours(td, real: dict, relation: Relation, k: int, rng: np.random.Generator) -> list[tuple[str, dict]]:
    """``k`` random neighbours of the real tree for the replay: a person of a random unit moved to a random
    block of another unit, changed to a random type, removed or a random type added."""
    dom = td.person_domain
    units = [u for u in td.nodes if len(real[u])]
    out = []
    for i in range(k):
        u = units[int(rng.integers(len(units)))] if units else next(iter(td.nodes))
        D = real[u]
        kind = i % 3
        if not len(D) or (relation is Relation.ADD_REMOVE and kind == 1):
            t = int(rng.integers(dom.total_size))
            nb = len(td.nodes[u][2])
            blk = int(rng.integers(nb)) if nb else None
            out.append((f"a person of type {t} added to {u}", _tree_change(real, u, lambda d: add_row(d, dom, t, blk))))
            continue
        row = int(rng.integers(len(D)))
        if relation is Relation.ADD_REMOVE and kind == 2:
            out.append((f"person {row} of {u} removed", _tree_change(real, u, lambda d: drop_row(d, row))))
        elif kind == 0 and relation is Relation.REPLACE_ONE and len(td.nodes) > 1:
            v = [x for x in td.nodes if x != u][int(rng.integers(len(td.nodes) - 1))]
            nb = len(td.nodes[v][2])
            blk = int(rng.integers(nb)) if nb else None
            t = int(types_of(D)[1][row])
            moved = _tree_change(_tree_change(real, u, lambda d: drop_row(d, row)), v, lambda d: add_row(d, dom, t, blk))
            out.append((f"person {row} moved from {u} to {v}", moved))
        else:
            t = int(rng.integers(dom.total_size))
            out.append((f"person {row} of {u} changed to type {t}", _tree_change(real, u, lambda d: with_type(d, row, dom, t))))
    return out


def _audit_topdown_root(src: AuditSource, mech: str, units: list[str], wb: bool, eps: float, seed: int,
                        cache: dict) -> AuditResult:
    """TopDown on its production tree (every level, every node), on the real data of every unit under the
    root: the bound over real pairs (the cells they touch, drawn by the publishing function with the
    production key schedule), the whole-release checks, the OpenDP accounting, the replay over many pairs
    and draws, the structure."""
    spec = src.spec
    a = spec.audit
    gaussian = spec.topdown.accounting == "zcdp"
    inst = _tree_instance(src, units[0], wb, seed, cache)
    td, pairs = inst["td"], inst["pairs"]
    bound, backend = bound_noise(seed, "topdown", td.root, wb, eps), publication_noise(spec, seed, "topdown", td.root, wb, eps)
    bounds = _tree_bounds(src, mech, inst, eps, bound)
    whole = _whole_trees(src, inst, eps, keyed_start=(backend, 2 * len(pairs) * a.runs), seed=seed)
    sens, level_sens = _tree_sensitivities(src, inst)
    delta = spec.topdown.delta
    budget = zcdp_rho(eps, delta) if gaussian else eps
    checks, info = whole_checks(spec, WholeNoise(whole.groups.sums, np.zeros(0, np.int64), [], np.array(whole.indep)),
                                sens, gaussian, budget)
    _tree_law_checks(a.confidence, gaussian, td, whole, checks, info)
    how = (f"the noise of {a.whole_releases} whole releases of the production tree: each level's measurements' "
           "scale bounded above from its least-noised node, table or band of true counts, their sensitivity over it, "
           "summed over levels")
    info["white_box"] = (gaussian_white_box(info["rho_from_noise_scale"], budget, delta, how, info["noise_draws"])
                         if gaussian else
                         laplace_white_box(info["epsilon_from_noise_scale"], eps, how, info["noise_draws"])).as_dict()
    # accounting by the library
    meas = whole.recorded[0]
    checks["accounting"], acc = opendp_accounting(
        meas.budgets, gaussian, budget,
        lambda b: sens[(td.shape.levels.index(b.level), "detailed" if b.query == "detailed" else "tables")])
    info.update(acc)
    info["sensitivity"] = {td.shape.levels[li]: dict(s.as_dict(), detailed=detailed_sensitivity(spec.relation))
                           for li, s in enumerate(level_sens)}
    if gaussian:  # the declared conversion, checked by OpenDP's own map
        e_map = opendp_epsilon(budget, delta)
        info["conversion"] = {"rho": budget, "delta": delta, "opendp_epsilon": e_map}
        checks["conversion"] = ("pass" if e_map <= eps * (1 + 1e-12) else
                                f"fail: ρ = {budget:.6g} is ({e_map:.6g}, {delta:g})-DP by OpenDP's map, over ε = {eps:g}")
    # replay: recorded releases, many neighbours of the real tree
    checks["post_processing"] = _topdown_replay(src, eps, td, inst["neighbours"], whole.recorded)
    if "structure" not in inst:  # releases at the smallest ε of the grid: one check for every ε
        inst["structure"] = _topdown_structure(src, units[0], wb, td.nodes)
    checks["structure"] = inst["structure"]
    if "root_total" in spec.invariants:
        info["not_audited"] = "the root's total: a declared invariant under replace-one (release.invariants)"
    best = max(bounds, default=(0.0, "none", 0, ""))
    info.update(root=td.root, tree_nodes=[len(i) for i in td.shape.ids], neighbours=[w for w, _ in pairs],
                bound_per_pair={b[3]: round(b[0], 6) for b in bounds}, audited_on="the production tree, every level "
                "and node, on the real private halves of every unit under the root")
    return AuditResult(mech, eps, best[0], a.runs, a.confidence, best[1], checks, info)


def _tree_instance(src: AuditSource, unit: str, wb: bool, seed: int, cache: dict) -> dict:
    """The real tree of ``unit``'s root, the private halves under it, its exact tables, its worst-case pairs and the
    replay's neighbours (near and far): the same at every ε, kept in ``cache``."""
    a, relation = src.spec.audit, parse_relation(src.spec.relation)
    key = ("topdown", unit, wb)
    if key not in cache:  # the real tree, its pairs and replay neighbours: the same at every ε
        td = src.topdown_root(unit, wb)
        real = {u: src.private_half(u, wb) for u in td.nodes}
        cache[key] = {"td": td, "real": real}
    inst = cache[key]
    td, real = inst["td"], inst["real"]

    def tree_of(halves):
        return dataclasses.replace(td, tree=src.topdown_tree(td.shape, td.nodes, halves, td.strategy, td.person_domain))

    def exact_of(t):
        return {(li, q): (h if q == "detailed" else t.strategy.tabulate(h)) for li, h in enumerate(t.tree.hist)
                for q in QUERIES}

    if "pairs" not in inst:
        inst["exact"] = exact_of(td)
        inst["pairs"] = [(what, tree_of(h)) for what, h in _topdown_pairs(td, real, unit, relation, wb)]
        inst["pair_exact"] = [exact_of(t2) for _, t2 in inst["pairs"]]
        rng_n = np.random.default_rng(stable_seed("audit-replay", seed, td.root))
        inst["neighbours"] = [(what, tree_of(h)) for what, h in
                              _tree_neighbours(td, real, relation, a.replay_pairs, rng_n)]
        names, total = list(real), sum(len(D) for D in real.values())
        for i in range(a.replay_far):  # whole trees far from the real one, the root's total kept (all else random)
            sizes = rng_n.multinomial(total, np.full(len(names), 1 / len(names)))
            far = {u: far_datasets(real[u], 1, rng_n, blocks=len(td.nodes[u][2]), n=int(m))[0][1]
                   for u, m in zip(names, sizes)}
            inst["neighbours"].append((f"a tree far from the real one ({i + 1}: its {total} persons drawn at "
                                       "random into its units and blocks)", tree_of(far)))
    return inst


def _tree_bounds(src: AuditSource, mech: str, inst: dict, eps: float, bound) -> list[tuple]:
    """The statistical bound of each worst-case pair of trees, over the cells it moves: ``runs`` releases of each
    tree drawn by the publishing function with the bound's noise (releases 0, 1, ... split between the pairs)."""
    a, td, exact, pairs = src.spec.audit, inst["td"], inst["exact"], inst["pairs"]
    pair_conf = 1 - (1 - a.confidence) / max(len(pairs), 1)
    bounds = []
    for i, (what, t2) in enumerate(pairs):
        e2 = inst["pair_exact"][i]
        cells = {k: np.flatnonzero((e2[k] != exact[k]).ravel()) for k in exact}
        keys = [k for k in exact if cells[k].size]
        if not keys:
            continue
        r1 = range(2 * i * a.runs, (2 * i + 1) * a.runs)
        r2 = range((2 * i + 1) * a.runs, (2 * i + 2) * a.runs)
        ys = []
        for tree, rr in ((td, r1), (t2, r2)):
            m = src.publish_topdown(tree, eps, bound, runs=rr, cells=cells).measurements
            ys.append(np.concatenate([(m.detailed if q == "detailed" else m.tables)[li] for li, q in keys], axis=1))
        ref1 = np.concatenate([exact[k].ravel()[cells[k]] for k in keys])
        ref2 = np.concatenate([e2[k].ravel()[cells[k]] for k in keys])
        res = audit_outputs(ys[0], ys[1], ref1, ref2 - ref1, eps, mech, pair_conf)
        bounds.append((res.epsilon_lower_bound, f"{what}: {res.event}", int(ref1.size), what))
    return bounds


@dataclasses.dataclass
class _WholeTrees:
    """What whole production releases of the real tree show: the noise's sums per group (node, table, band of true
    counts), its samples and tail statistics per level and query, the cells followed for independence, and the
    releases recorded for the replay."""

    groups: NoiseGroups
    samples: dict
    tails: dict
    indep: list
    recorded: list


def _whole_trees(src: AuditSource, inst: dict, eps: float, keyed_start: tuple, seed: int) -> _WholeTrees:
    """``whole_releases`` releases of the real tree through the single-release call that publishes (its estimation
    run only for the releases the replay uses), keyed from ``keyed_start`` (the publication noise, the first release
    number after the bound's)."""
    a, td, exact = src.spec.audit, inst["td"], inst["exact"]
    gaussian = src.spec.topdown.accounting == "zcdp"
    backend, start = keyed_start
    groups = NoiseGroups()
    rng = np.random.default_rng(stable_seed("audit-sample", seed, td.root))
    samples: dict = {k: [] for k in exact}
    tails: dict = {}
    pick = {}
    for (li, q), ex in exact.items():
        nodes = ex.shape[0]
        cs = rng.choice(ex.shape[1], size=min(300, ex.shape[1]), replace=False)
        ns = sorted({0, min(1, nodes - 1), nodes - 1})
        pick[(li, q)] = (np.array([n * ex.shape[1] + c for n in ns for c in cs]), np.array([f"{q}:{c}" for n in ns for c in cs]))
    indep, recorded = [], []
    bands = {k: band_groups(ex) for k, ex in exact.items()}
    for r in range(a.whole_releases):
        m = src.publish_topdown(td, eps, keyed_release(backend, start + r), estimate=r < a.replay_draws).measurements
        row = []
        for (li, q), ex in exact.items():
            y = (m.detailed if q == "detailed" else m.tables)[li]
            x = y - ex
            for node in range(ex.shape[0]):
                groups.add(((li, q), f"node {td.shape.ids[li][node]}"), x[node])
            for g, sel in bands[(li, q)].items():
                groups.add(((li, q), g), x[sel])
            if sum(len(v) for v in samples[(li, q)]) < 1_000_000:
                samples[(li, q)].append(shape_subsample(x, rng))
            tails.setdefault((li, q), []).append(release_tail_stats(x, gaussian))
            row.append(x.ravel()[pick[(li, q)][0]])
        indep.append(np.concatenate(row))
        if r < a.replay_draws:
            recorded.append(m)
    return _WholeTrees(groups, samples, tails, indep, recorded)


def _tree_sensitivities(src: AuditSource, inst: dict) -> tuple[dict, list]:
    """The yardstick: each level's sensitivities from the relation and the tables' definitions over the person
    domain (never the release's strategy matrix or budgets): per (level, query), and each level's in full."""
    spec, td = src.spec, inst["td"]
    n_levels = len(td.shape.levels)
    if "sensitivity" not in inst:
        pw = src.workload(spec.published, td.person_domain)
        inst["sensitivity"] = [
            node_table_sensitivity(pw, td.person_domain.decode(np.flatnonzero(td.tree.hist[li].sum(axis=0) > 0)),
                                   spec.relation, len(td.shape.ids[li])) for li in range(n_levels)]
    level_sens = inst["sensitivity"]
    sens = {(li, q): detailed_sensitivity(spec.relation) if q == "detailed" else level_sens[li].l1
            for li in range(n_levels) for q in QUERIES}
    return sens, level_sens


def _tree_law_checks(confidence: float, gaussian: bool, td, whole: _WholeTrees, checks: dict, info: dict) -> None:
    """The noise's shape and far tail at every level and query of the tree (the worst of each named)."""
    shape_p = {k: (gaussian_shape_pvalue(np.concatenate(v)) if gaussian else laplace_shape_pvalue(np.concatenate(v)))
               for k, v in whole.samples.items()}
    tail_p = {k: tail_from_stats(v, gaussian) for k, v in whole.tails.items()}
    nm = len(whole.samples)
    worst_s, worst_t = min(shape_p, key=shape_p.get), min(tail_p, key=tail_p.get)
    lvl = lambda k: f"{td.shape.levels[k[0]]}/{k[1]}"  # noqa: E731
    family = "Gaussian" if gaussian else "Laplace"
    checks["noise_shape"] = ("pass" if shape_p[worst_s] >= (1 - confidence) / nm else
                             f"fail: the noise added at {lvl(worst_s)} is not discrete {family} (chi-square over its "
                             f"whole range, p = {shape_p[worst_s]:.2g})")
    checks["noise_tail"] = ("pass" if tail_p[worst_t] >= (1 - confidence) / nm else
                            f"fail: the noise added at {lvl(worst_t)} has too few draws in its far tail for discrete "
                            f"{family} noise (p = {tail_p[worst_t]:.2g}): it is cut off")
    info.update(noise_shape_p_value={lvl(k): v for k, v in shape_p.items()},
                noise_tail_p_value={lvl(k): v for k, v in tail_p.items()})


def _topdown_replay(src: AuditSource, eps: float, td, neighbours: list, recorded: list) -> str:
    """Each recorded release's measurements replayed for the real tree and for many neighbours of it
    (``neighbours``: (what, tree)): the estimates (the MDF) must be identical."""
    for m in recorded:
        values = []
        for li in range(len(m.detailed)):
            values += [m.detailed[li], m.tables[li]]
        try:
            e1 = src.publish_topdown(td, eps, ReplaySequence(values)).estimates
        except PrivacyError as e:
            return f"fail: {e}"
        for what, tree2 in neighbours:
            try:
                e2 = src.publish_topdown(tree2, eps, ReplaySequence(values)).estimates
            except PrivacyError as e:
                return f"fail: {e} ({what})"
            if len(e1) != len(e2) or any(not np.array_equal(x, y) for x, y in zip(e1, e2)):
                return ("fail: with the same noisy measurements, the neighbours' MDFs differ "
                        f"({what}): the estimation reads the data beyond its measurements")
    return "pass"


def audit_tree(call: FamilyCall) -> AuditResult:
    """The ``tree`` family: TopDown's production tree of each root the audited units belong to, drawn through the
    tree's release shared by its units (a mechanism of this family that publishes otherwise fails its contract)."""
    src, mech, eps = call.src, call.mechanism, call.epsilon
    if registry.mechanism(mech).publish is not publish_shared:
        return AuditResult(mech, eps, 0.0, 0, src.spec.audit.confidence, "none", {"family_contract": (
            f"fail: {mech} is registered in the tree audit family, which draws TopDown's release of a whole tree "
            "(synth.topdown_release.publish_topdown, shared by its units through synth.publishing."
            f"publish_shared); {mech} publishes through {registry.mechanism(mech).publish.__name__}, which this "
            "family never draws")}, {})
    return combine_units(mech, eps, [_audit_topdown_root(src, mech, root_units, call.with_block, eps, call.seed,
                                                          call.cache)
                                      for root_units in _roots(src, list(call.units), call.with_block)])


register_family(AuditFamily("tree", (0, 6), audit_tree,
                            "TopDown's production tree, every level and node: the bound over real pairs, the noise's "
                            "scale, shape, tail and independence, OpenDP's accounting, the replay, the structure"))
