"""TopDown releases of the census hierarchy: the tree of a root from the public unit list, its private
halves' histograms, the release through synth.topdown, the microdata detail file and each unit's share. ``study``
is a resolved study (``experiments.problem.Study``: its config, persons, units and tables' definitions)."""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import pandas as pd

from censusrecon.microdata.errors import ConfigError
from censusrecon.synth.publishing import Published, table_labels
from censusrecon.microdata.dataset import Dataset
from censusrecon.microdata.geography import FROM_ROWS
from censusrecon.reconstruct.exact import query_matrix
from censusrecon.synth.mechanism import Mechanism
from censusrecon.synth.release import workload_counts
from censusrecon.synth.topdown import Measurements, Strategy, Tree, TreeShape, build_tree, check_consistent, mdf_rows
from censusrecon.synth.topdown import estimate as topdown_estimate
from censusrecon.synth.topdown import TopDownPrivacy
from censusrecon.synth.topdown import measure as topdown_measure
from censusrecon.microdata.describe import block_groups


@dataclass
class TopDownRoot:
    """One TopDown release's inputs: the tree under a root (its shape from the public unit list, its
    leaves' exact histograms from the persons), what every node measures, the person domain the
    histograms are over, and where each unit of the target level and its blocks sit in the tree."""

    root: str
    tree: Tree
    strategy: Strategy
    person_domain: object
    nodes: dict  # unit -> (unit level index, its node, [leaf node of each of its blocks])
    block_source: str | None = None

    @property
    def shape(self) -> TreeShape:
        return self.tree.shape


def topdown_shape(study, unit: str, with_block: bool) -> tuple[str, TreeShape, dict, str]:
    """The public shape of the tree a TopDown release of ``unit`` runs over: the unit's ancestor at
    ``release.topdown.root`` and, level by level, every unit inside it from the public unit list
    (empty ones included, whatever their size), down to the target level and, with BLOCK, its
    blocks. Where the tracts' blocks carry census GEOIDs and some tract under the root has more than one
    block group (a block number's first digit), the block groups are a level between the tracts and
    their blocks, as in 2020's production tree. No person row decides whether a node exists. Without
    a public list the units come from the rows, which only a declared ``occupied_blocks`` invariant
    allows."""
    cfg = study.cfg
    geo = study.pop.geography
    level, root_level = study.level, cfg.release.topdown.root
    if root_level not in geo.coarser(level):
        raise ConfigError(f"release.topdown.root {root_level!r} must be coarser than the target level {level!r}; "
                          f"choose from {list(geo.coarser(level))}")
    root = geo.parent(level, unit, root_level)
    mids = [lv for lv in reversed(geo.coarser(level)) if lv in geo.finer(root_level)]  # coarsest first
    inner = [lv for lv in geo.finer(level) if lv != "block"] if with_block else []  # the tracts of a county
    levels = [root_level, *mids, level, *inner] + (["block"] if with_block else [])
    ids, parent, sources = [[root]], [[-1]], set()
    for li in range(1, len(levels)):
        ids.append([])
        parent.append([])
        for p, node in enumerate(ids[li - 1]):
            kids, src = geo.units_within(levels[li - 1], node, levels[li])
            sources.add(src)
            ids[li] += kids
            parent[li] += [p] * len(kids)
    if with_block and levels[-2] == "tract":
        ids, parent, levels = _with_block_groups(ids, parent, levels)
    if FROM_ROWS in sources and "occupied_blocks" not in cfg.release.invariants:
        raise ConfigError(
            f"this data has no public list of its units: TopDown's tree under {root_level} {root} would be "
            f"{FROM_ROWS}, and which nodes exist would tell who lives where (ε = ∞). Give the public unit list (a "
            "units file), or declare release.invariants: [occupied_blocks] to publish the list as an invariant")
    shape = TreeShape(levels, [np.array(x, dtype=str) for x in ids], [np.array(x, dtype=np.int64) for x in parent])
    u_level = 1 + len(mids)
    ancestor = np.arange(len(shape.ids[-1]))  # each leaf's node at the target level
    for li in range(len(levels) - 1, u_level, -1):
        ancestor = shape.parent[li][ancestor]
    nodes = {}
    for i, u in enumerate(shape.ids[u_level]):
        # in the order of the unit's BLOCK values (its public block list, sorted by id)
        leaves = sorted(np.flatnonzero(ancestor == i).tolist(), key=lambda b: shape.ids[-1][b]) if with_block else []
        nodes[str(u)] = (u_level, i, leaves)
    return root, shape, nodes, (FROM_ROWS if FROM_ROWS in sources else next(iter(sources)))


def _with_block_groups(ids: list, parent: list, levels: list[str]) -> tuple[list, list, list[str]]:
    """The tree's last two levels (tracts, blocks) with the block groups between them, where the blocks
    are census GEOIDs (a block group is a GEOID's first 12 characters) and some tract has two or more;
    else the tree as it is. The blocks keep their order within each tract."""
    blocks = np.asarray(ids[-1], dtype=str)
    groups = block_groups(blocks) if len(blocks) else None
    if groups is None:
        return ids, parent, levels
    pairs = list(zip(parent[-1], groups.tolist()))  # each block's (tract node, block group)
    index: dict = {}
    for pair in pairs:  # the groups numbered in order of appearance
        index.setdefault(pair, len(index))
    if len(index) == len(set(parent[-1])):
        return ids, parent, levels  # one block group per tract: the level would repeat the tracts
    groups_level, blocks_parent = [g for _, g in index], [index[p] for p in pairs]
    return (ids[:-1] + [groups_level, ids[-1]], parent[:-1] + [[t for t, _ in index], blocks_parent],
            levels[:-1] + ["block_group", "block"])


def person_types(data: Dataset, person_domain) -> np.ndarray:
    """Each row's person type: its attributes (BLOCK aside) row-major over ``person_domain``."""
    return person_domain.encode(data.project(list(person_domain.names)).codes)


def topdown_strategy(cfg, published) -> Strategy:
    """What every node measures: the detailed histogram over the person domain and ``published``, the published
    workload's cells over it, with the configured split of each level's budget between them."""
    return Strategy(query_matrix(published).astype(np.int64),
                    Fraction(repr(float(cfg.release.topdown.detailed_share))))


def topdown_tree(cfg, shape: TreeShape, nodes: dict, halves: dict[str, Dataset],
                 strategy: Strategy, person_domain) -> Tree:
    """The tree's exact histograms: each leaf's persons of ``halves`` (unit -> its private half over
    the attack domain) counted by type, summed up the tree. Every unit of the target level must have a
    half (empty for a unit nobody lives in)."""
    leaf = np.zeros((len(shape.ids[-1]), strategy.types), dtype=np.int64)
    with_block = shape.levels[-1] == "block"
    for u, (_, node, leaves) in nodes.items():
        D = halves[u]
        types = person_types(D, person_domain)
        if with_block:
            np.add.at(leaf, (np.asarray(leaves, dtype=np.int64)[D.column("BLOCK")], types), 1)
        else:
            np.add.at(leaf[node], types, 1)
    return build_tree(shape, leaf)


def topdown_root(study, unit: str, with_block: bool) -> TopDownRoot:
    """The tree a TopDown release of ``unit`` runs over (:func:`topdown_shape`), every unit of the
    target level in it holding its private half D (the holdouts stay out of every release)."""
    cfg = study.cfg
    root, shape, nodes, source = topdown_shape(study, unit, with_block)
    halves = {u: study.private_half(u, with_block) for u in nodes}
    person_domain = next(iter(halves.values())).domain
    person_domain = person_domain.project([a for a in person_domain.names if a != "BLOCK"])
    strategy = topdown_strategy(cfg, study.workload(cfg.published, person_domain))
    return TopDownRoot(root, topdown_tree(cfg, shape, nodes, halves, strategy, person_domain), strategy,
                       person_domain, nodes, source)


@dataclass
class TopDownRelease:
    """One TopDown release: its noisy measurements, the mechanism's record, and (one release, not a
    batch) the integer histograms estimated at every level, whose leaves are the MDF."""

    measurements: Measurements
    record: Mechanism
    estimates: list[np.ndarray] | None = None


def publish_topdown(cfg, td: TopDownRoot, epsilon: float, backend,
                    runs=None, cells: dict | None = None, estimate: bool = True) -> TopDownRelease:
    """TopDown over ``td``'s tree: the noisy measurements of every node (the private step), then the
    top-down estimation from the measurements and the tree's public shape alone (post-processing).
    ``runs`` (a count or release numbers) measures that many releases at once and estimates nothing
    (the auditor's batches, through the same code: a single release is the batch of one); ``cells``
    draws only those cells of each (level, query) (:func:`synth.topdown.measure`). ``estimate=False``
    stops after the measurements (the auditor's whole releases beyond those it replays)."""
    r = cfg.release
    privacy = TopDownPrivacy(r.relation, r.topdown.shares, r.topdown.accounting, r.topdown.delta,
                             tuple(i for i in r.invariants if i == "root_total"))
    meas, mech = topdown_measure(td.tree, epsilon, backend, td.strategy, privacy, runs=runs, cells=cells)
    if runs is not None or not estimate:
        return TopDownRelease(meas, mech)
    est = topdown_estimate(td.shape, meas, td.strategy, r.topdown.solver)
    check_consistent(td.shape, est)
    return TopDownRelease(meas, mech, est)


def topdown_mdf(td: TopDownRoot, estimates: list[np.ndarray]) -> pd.DataFrame:
    """The microdata detail file: one row per person of the leaves' histograms, with its leaf (block,
    or unit without BLOCK), its unit of the target level and its attributes as labels."""
    leaf, types = mdf_rows(estimates[-1])
    shape = td.shape
    unit_of_leaf = np.empty(len(shape.ids[-1]), dtype=object)
    for u, (_, node, leaves) in td.nodes.items():
        unit_of_leaf[leaves if leaves else [node]] = u
    frame = Dataset(td.person_domain, td.person_domain.decode(types)).to_pandas(labels=True)
    frame.insert(0, "UNIT", unit_of_leaf[leaf] if len(leaf) else np.array([], dtype=str))
    frame.insert(0, shape.levels[-1].upper() + "_ID", shape.ids[-1][leaf] if len(leaf) else np.array([], dtype=str))
    return frame


def topdown_unit(td: TopDownRoot, estimates: list[np.ndarray], unit: str, workload, mech, ok, note) -> Published:
    """One target unit's share of a TopDown release: its persons in the MDF (with their block), and its
    published tables, the exact tabulation of those rows, so every table of every unit agrees with
    every other and with the MDF."""
    _, node, leaves = td.nodes[unit]
    domain = workload.domain
    if leaves:
        rows, types = mdf_rows(estimates[-1][leaves])
    else:
        rows, types = mdf_rows(estimates[-1][[node]])
    person = td.person_domain.decode(types)
    codes = np.zeros((len(types), len(domain)), dtype=np.int64)
    for j, a in enumerate(td.person_domain.names):
        codes[:, domain.index(a)] = person[:, j]
    if "BLOCK" in domain:
        codes[:, domain.index("BLOCK")] = rows
    data = Dataset(domain, codes)
    counts = workload_counts(data, workload).astype(np.float64)
    answers = counts / max(len(data), 1)
    return Published("topdown", mech, estimates, answers, ("tables", table_labels(workload)), ok, note, counts,
                     rows=data)
