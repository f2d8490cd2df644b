"""Neighbours of the real data: worst-case pairs, canaries, the replay's random and far datasets."""

from __future__ import annotations

import numpy as np

from censusrecon.microdata.dataset import Dataset
from censusrecon.microdata.domain import Attribute, Domain
from censusrecon.synth.audit.source import AuditSource
from censusrecon.synth.audit.yardstick import cells_of, person_types
from censusrecon.synth.mechanism import Relation

#: Cells of the small domain the histograms are audited on (their sensitivity does not depend on
#: the domain's size; the auditor needs every cell's value in every run).
HISTOGRAM_CELLS = 64


#: Cells of the smoothed histogram's audit domain: its δ grows with the number of cells, and on a
#: few cells the whole privacy loss is reached by an event of reasonable probability.
SMOOTHED_CELLS = 4


def audit_frame(src: AuditSource, unit: str, with_block: bool) -> tuple[Domain, dict | None]:
    """The attack domain of ``unit`` (BLOCK from its public block list), cut to two blocks, and
    the areas inside the unit (the tracts of a county) of those blocks: every block publishes the
    same tables and a person lives in one; when the unit has areas the second block is in another
    area than the first where one exists, so that a person moving between them changes the
    areas' tables too."""
    prob = src.prepare(unit, with_block, pad_blocks=False)
    dom = prob.private.domain
    if not with_block:
        return dom, None
    names = dom.attribute("BLOCK").values
    finest = prob.areas[list(prob.areas)[-1]] if prob.areas else []
    area_of = {b: i for i, (_, members) in enumerate(finest) for b in members}
    other = next((b for b in range(1, len(names)) if area_of.get(b) != area_of.get(0)), 1)
    keep = [0, other][:len(names)]
    areas = {lv: [(a, [keep.index(b) for b in members if b in keep]) for a, members in listed
                  if any(b in keep for b in members)] for lv, listed in (prob.areas or {}).items()}
    frame = Domain((Attribute("BLOCK", tuple(names[b] for b in keep)),)
                   + tuple(a for a in dom.attributes if a.name != "BLOCK"))
    return frame, areas


def _worst_pair(domain: Domain, workload, relation: Relation) -> tuple[Dataset, Dataset]:
    """Neighbours D, D′ whose released counts are as far apart as one person can make them:
    add/remove adds the person type counted in the most cells; replace-one replaces that person
    by the type, in another block, whose cells differ from theirs the most."""
    has_block = "BLOCK" in domain
    a_types = person_types(domain, 0 if has_block else None)
    counts = np.concatenate([cells_of(workload, a_types[i:i + 2000]).sum(axis=1) for i in range(0, len(a_types), 2000)])
    a = a_types[int(np.argmax(counts))]
    base = np.array([[(i + 2) % s for s in domain.sizes] for i in range(3)], dtype=np.int64)
    if relation is Relation.ADD_REMOVE:
        return Dataset(domain, base), Dataset(domain, np.vstack([base, a]))
    other = 1 if has_block and domain.size("BLOCK") > 1 else 0
    b_types = person_types(domain, other if has_block else None)
    cells_a = cells_of(workload, a[None, :])[0]
    diff = np.concatenate([(cells_of(workload, b_types[i:i + 2000]) != cells_a[None, :]).sum(axis=1)
                           for i in range(0, len(b_types), 2000)])
    b = b_types[int(np.argmax(diff))]
    return Dataset(domain, np.vstack([base, a])), Dataset(domain, np.vstack([base, b]))


def histogram_pair(frame: Domain, relation: Relation, cells: int = HISTOGRAM_CELLS
                    ) -> tuple[Dataset, Dataset, tuple[int, int]]:
    """Neighbours over a small domain (the smallest attack attributes, at most ``cells`` cells): D
    has one person alone in cell a and one in cell c; D′ moves the first to the empty cell b
    (replace-one) or adds a person in b (add/remove). Returns D, D′ and the keys (a, b)."""
    attrs, size = [], 1
    for at in sorted(frame.attributes, key=lambda x: x.size):
        if size * at.size <= cells:
            attrs.append(at)
            size *= at.size
    if size < 3:
        attrs, size = [Attribute.range("CELL", 4)], 4
    dom = Domain(tuple(attrs))
    a, b, c = 0, 1, size - 1
    D = Dataset(dom, dom.decode(np.array([a, c])))
    D2 = Dataset(dom, dom.decode(np.array([b, c] if relation is Relation.REPLACE_ONE else [a, c, b])))
    return D, D2, (a, b)


def types_of(D: Dataset) -> tuple[Domain, np.ndarray]:
    """The person domain (every attribute but BLOCK) and each row's type in it."""
    names = [a for a in D.domain.names if a != "BLOCK"]
    dom = D.domain.project(names)
    return dom, dom.encode(D.project(names).codes) if len(D) else np.zeros(0, np.int64)


def with_type(D: Dataset, row: int, dom: Domain, t: int) -> Dataset:
    codes = D.codes.copy()
    code = dom.decode(np.array([t]))[0]
    for j, name in enumerate(dom.names):
        codes[row, D.domain.index(name)] = code[j]
    return Dataset(D.domain, codes)


def add_row(D: Dataset, dom: Domain, t: int, block: int | None) -> Dataset:
    row = np.zeros((1, len(D.domain)), dtype=np.int64)
    code = dom.decode(np.array([t]))[0]
    for j, name in enumerate(dom.names):
        row[0, D.domain.index(name)] = code[j]
    if block is not None:
        row[0, D.domain.index("BLOCK")] = block
    return Dataset(D.domain, np.vstack([D.codes, row]))


def drop_row(D: Dataset, row: int) -> Dataset:
    return D.take(np.setdiff1d(np.arange(len(D)), [row]))


def _other_area_block(D: Dataset, areas: dict | None, block: int) -> int:
    """A block of another area (the tracts of a county) than ``block``'s where one exists, else the next block."""
    n = D.domain.size("BLOCK")
    finest = areas[list(areas)[-1]] if areas else []
    area_of = {b: i for i, (_, members) in enumerate(finest) for b in members}
    other = [b for b in range(n) if b != block and area_of.get(b) != area_of.get(block)]
    return other[-1] if other else (block + 1) % n


def real_pairs(D: Dataset, workload, relation: Relation, areas: dict | None) -> list:
    """Neighbours of the real D under ``relation``: replace-one moves a real person to a block of another
    area, changes a person of the commonest type to the rarest and one of the rarest present type to the
    commonest, and replaces a person by the type whose cells differ most from theirs; add/remove adds the
    type in most cells and removes a real person (of the commonest type)."""
    dom, types = types_of(D)
    counts = np.bincount(types, minlength=dom.total_size) if len(D) else np.zeros(dom.total_size, np.int64)
    common, rare = int(np.argmax(counts)), int(np.argmin(counts))
    has_block = "BLOCK" in D.domain
    pairs = []
    all_types = person_types(D.domain, 0 if has_block else None)
    if relation is Relation.ADD_REMOVE:
        per_type = np.concatenate([cells_of(workload, all_types[i:i + 2000]).sum(axis=1)
                                   for i in range(0, len(all_types), 2000)])
        t_most = int(dom.encode(all_types[int(np.argmax(per_type))][[D.domain.index(a) for a in dom.names]][None, :])[0])
        pairs.append((f"a person of the type in most cells ({int(per_type.max())}) added", add_row(D, dom, t_most,
                                                                                                   0 if has_block else None)))
        if len(D):
            row = int(np.flatnonzero(types == common)[0])
            pairs.append(("a person of the commonest type removed", drop_row(D, row)))
        return pairs
    if not len(D):
        return pairs
    row_c = int(np.flatnonzero(types == common)[0])
    pairs.append(("a person of the commonest type changed to the rarest", with_type(D, row_c, dom, rare)))
    present = np.flatnonzero(counts > 0)
    rarest_present = int(present[np.argmin(counts[present])])
    row_r = int(np.flatnonzero(types == rarest_present)[0])
    if rarest_present != common:
        pairs.append(("a person of the rarest type changed to the commonest", with_type(D, row_r, dom, common)))
    if has_block:
        codes = D.codes.copy()
        jb = D.domain.index("BLOCK")
        codes[row_c, jb] = _other_area_block(D, areas, int(codes[row_c, jb]))
        pairs.append(("a person moved to a block of another area", Dataset(D.domain, codes)))
    cells_a = cells_of(workload, D.codes[row_c][None, :])[0]
    cand = all_types.copy()
    if has_block:
        cand[:, D.domain.index("BLOCK")] = _other_area_block(D, areas, int(D.codes[row_c, D.domain.index("BLOCK")]))
    diff = np.concatenate([(cells_of(workload, cand[i:i + 2000]) != cells_a[None, :]).sum(axis=1)
                           for i in range(0, len(cand), 2000)])
    b = cand[int(np.argmax(diff))]
    codes = D.codes.copy()
    codes[row_c] = b
    pairs.append((f"a person replaced by the type differing in most cells ({int(diff.max())})", Dataset(D.domain, codes)))
    return pairs


def canary_codes(domain: Domain, canary: dict | None) -> dict[str, int]:
    """The codes of a named canary's values (``release.audit.canary``: attribute → value label) in ``domain``, or a
    one-line error naming the attribute or value outside it and the fix.

    >>> from censusrecon.microdata.domain import Attribute
    >>> dom = Domain((Attribute("AGE", tuple(map(str, range(116)))), Attribute("SEX", ("male", "female"))))
    >>> canary_codes(dom, {"AGE": 97, "SEX": "female"})
    {'AGE': 97, 'SEX': 1}
    >>> canary_codes(dom, {"AGE": 130})
    Traceback (most recent call last):
    ...
    ValueError: release.audit.canary: AGE = 130 is outside its domain (0 … 115): give one of its values, or leave AGE out for the rarest
    """
    out = {}
    for name, value in (canary or {}).items():
        if name == "BLOCK" or name not in domain.names:
            raise ValueError(f"release.audit.canary: {name!r} is not an attribute of the audited data (it has "
                             f"{', '.join(n for n in domain.names if n != 'BLOCK')}): name one of them")
        values = domain.attribute(name).values
        if str(value) not in values:
            shown = f"{values[0]} … {values[-1]}" if len(values) > 8 else ", ".join(values)
            raise ValueError(f"release.audit.canary: {name} = {value} is outside its domain ({shown}): give one of its "
                             f"values, or leave {name} out for the rarest")
        out[name] = values.index(str(value))
    return out


def canary_neighbour(D: Dataset, relation: Relation, canary: dict | None = None) -> tuple[str, Dataset]:
    """The worst-case neighbour of D for a synthesizer (Annamalai, Ganev and De Cristofaro 2024: a record in a
    region of the domain the data leaves empty): a person of a type nobody of D has, the one whose values are
    rarest in D (the least sum of its values' counts, one attribute at a time; the first such type breaking
    ties), in the block with the fewest persons. Added under add/remove; under replace-one it replaces a person
    of the commonest type. With every type present, the rarest one. ``canary`` (``release.audit.canary``: attribute
    → value label) fixes those values; the rest are chosen as above among the types that have them."""
    dom, types = types_of(D)
    counts = np.bincount(types, minlength=dom.total_size) if len(D) else np.zeros(dom.total_size, np.int64)
    fixed = canary_codes(dom, canary)
    allowed = np.arange(dom.total_size)
    if fixed:
        every = dom.decode(allowed)
        keep = np.all([every[:, dom.index(n)] == c for n, c in fixed.items()], axis=0)
        allowed = allowed[keep]
    least = counts[allowed].min()
    empty = allowed[counts[allowed] == least]
    values = dom.decode(empty)
    rarity = np.zeros(len(empty), dtype=np.int64)
    for j, name in enumerate(dom.names):
        rarity += np.bincount(D.column(name), minlength=dom.size(name))[values[:, j]]
    pick = int(np.argmin(rarity))
    t = int(empty[pick])
    block = None
    if "BLOCK" in D.domain:
        block = int(np.argmin(np.bincount(D.column("BLOCK"), minlength=D.domain.size("BLOCK"))))
    label = ", ".join(f"{n}={dom.attribute(n).values[v]}" for n, v in zip(dom.names, values[pick]))
    what = (f"a canary ({label}: " + ("a type nobody has" if least == 0 else f"a type {least} persons have")
            + (", as release.audit.canary names it" if fixed else "")
            + (f", in the block with fewest persons" if block is not None else "") + ")")
    if relation is Relation.ADD_REMOVE or not len(D):
        return what + " added", add_row(D, dom, t, block)
    common = int(np.argmax(counts))
    row = int(np.flatnonzero(types == common)[0])
    codes = with_type(D, row, dom, t).codes.copy()
    if block is not None:
        codes[row, D.domain.index("BLOCK")] = block
    return what + " in place of a person of the commonest type", Dataset(D.domain, codes)


def replay_neighbours(D: Dataset, relation: Relation, areas: dict | None, k: int,
                       rng: np.random.Generator) -> list[tuple[str, Dataset]]:
    """``k`` neighbours of the real D for the replay: in turn a random person moved to a random other block
    (of another area every other time), changed to a random other type, and (add/remove) removed or a
    random type added."""
    dom, _ = types_of(D)
    has_block = "BLOCK" in D.domain
    out = []
    for i in range(k):
        kind = i % 3
        if not len(D):
            t = int(rng.integers(dom.total_size))
            out.append(("a person added", add_row(D, dom, t, 0 if has_block else None)))
            continue
        row = int(rng.integers(len(D)))
        if relation is Relation.ADD_REMOVE and kind == 2:
            out.append((f"person {row} removed", drop_row(D, row)))
        elif relation is Relation.ADD_REMOVE and kind == 1:
            t = int(rng.integers(dom.total_size))
            blk = int(rng.integers(D.domain.size("BLOCK"))) if has_block else None
            out.append((f"a person of type {t} added", add_row(D, dom, t, blk)))
        elif kind == 0 and has_block and D.domain.size("BLOCK") > 1:
            codes = D.codes.copy()
            jb = D.domain.index("BLOCK")
            cur = int(codes[row, jb])
            codes[row, jb] = (_other_area_block(D, areas, cur) if i % 2 else
                              int((cur + 1 + rng.integers(D.domain.size("BLOCK") - 1)) % D.domain.size("BLOCK")))
            out.append((f"person {row} moved from block {cur} to {int(codes[row, jb])}", Dataset(D.domain, codes)))
        else:
            t = int(rng.integers(dom.total_size))
            out.append((f"person {row} changed to type {t}", with_type(D, row, dom, t)))
    return out


def far_datasets(D: Dataset, k: int, rng: np.random.Generator, blocks: int | None = None,
                  n: int | None = None) -> list[tuple[str, Dataset]]:
    """``k`` datasets far from D for the replay: ``n`` persons (default D's: n, and so every total an
    invariant may publish, stays), each attribute of each person drawn uniformly from its domain
    (BLOCK from the first ``blocks`` codes when given: the unit's own blocks). Post-processing reads
    only the measurements and public facts, so these must give D's output from D's measurements too."""
    n = len(D) if n is None else n
    out = []
    for i in range(k):
        codes = np.empty((n, len(D.domain)), dtype=np.int64)
        for j, name in enumerate(D.domain.names):
            size = blocks if name == "BLOCK" and blocks else D.domain.size(name)
            codes[:, j] = rng.integers(0, max(size, 1), n)
        out.append((f"a dataset far from the real one ({i + 1}: {n} persons drawn at random)", Dataset(D.domain, codes)))
    return out
