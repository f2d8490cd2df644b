"""Declared tables (cross-tabulations at a geographic level, with optional groupings of a variable's
values) as product-query cells: the same cells, plans and releases as the SF1 tables, which are a
named preset of this mechanism."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Sequence

from censusrecon.microdata.census import Cell
from censusrecon.microdata.domain import Domain
from censusrecon.microdata.errors import CensusReconError
from censusrecon.microdata.geography import plural


class TableError(CensusReconError):
    """A declared table names an unknown variable, value or level; the message says which."""


@dataclass(frozen=True)
class TableSpec:
    """One published table: ``by`` lists its variables, each either a name (every value its own
    category) or ``(name, groups)`` with each group a tuple of the variable's value labels. A table
    with no variables is a total. ``level`` is where it is published: ``"block"`` (one table per
    block of the target unit, or summed to the unit when the attack does not keep BLOCK) or the
    target unit itself."""

    name: str
    level: str
    by: tuple[tuple[str, tuple[tuple[str, ...], ...] | None], ...]
    partial: bool = False  # groups may leave values out or overlap, as declared

    def cells(self, domain: Domain, block_level: bool, area_level: str | None = None) -> list[Cell]:
        """The table's cells; each is published per block (``block_level``), per area of
        ``area_level`` inside the unit, or once for the unit."""
        axes = []
        for var, groups in self.by:
            if var not in domain:
                raise TableError(f"table {self.name}: variable {var!r} is not an attack attribute; "
                                 f"they are {[a for a in domain.names if a != 'BLOCK']}")
            if var == "BLOCK":
                raise TableError(f"table {self.name}: tabulate by block with level: block, not by BLOCK")
            at = domain.attribute(var)
            if groups is None:
                axes.append([(var, (v,), frozenset({i})) for i, v in enumerate(at.values)])
                continue
            axis = []
            for g in groups:
                unknown = [v for v in g if v not in at.values]
                if unknown or not g:
                    raise TableError(f"table {self.name}: {var} group {list(g)} has values {unknown} that {var} "
                                     f"does not have (its values: {_show(at.values)})")
                axis.append((var, tuple(g), frozenset(at.values.index(v) for v in g)))
            if not self.partial:
                self._check_partition(var, at.values, axis)
            axes.append(axis)
        out = []
        for n, combo in enumerate(itertools.product(*axes), start=1):
            label = ", ".join(f"{var}={_group_label(vals)}" for var, vals, _ in combo) or "Total"
            sets = {var: s for var, _, s in combo}
            out.append(Cell(self.name, n, label, tuple(sorted(sets.items())),
                            "block" if block_level else area_level or "unit"))
        return out


    def _check_partition(self, var: str, values: Sequence[str], axis) -> None:
        """Groups must cover each value once: a gap drops persons from the table, an overlap counts
        them twice, and neither is what a table usually means."""
        seen: dict[int, tuple] = {}
        for _, labels, members in axis:
            for i in sorted(members):
                if i in seen:
                    raise TableError(f"table {self.name}: {var} value {values[i]} is in two groups "
                                     f"({_group_label(seen[i])} and {_group_label(labels)}); make the groups disjoint, "
                                     "or declare partial: true if the table really counts it twice")
                seen[i] = labels
        left = [v for i, v in enumerate(values) if i not in seen]
        if left:
            raise TableError(f"table {self.name}: {var} groups leave out {_ranges(left)}: everyone with "
                             f"{'that value' if len(left) == 1 else 'those values'} would be missing from the table; "
                             "add a group for them, or declare partial: true if the table really omits them")


def _ranges(values: Sequence[str]) -> str:
    """'65-115' for a run of numbers, else the values themselves (the first 12)."""
    if all(v.lstrip("-").isdigit() for v in values):
        nums = sorted(int(v) for v in values)
        runs, start = [], nums[0]
        for a, b in zip(nums, nums[1:] + [None]):
            if b != a + 1:
                runs.append(str(start) if start == a else f"{start}-{a}")
                start = b
        return ", ".join(runs)
    return ", ".join(values[:12]) + (" ..." if len(values) > 12 else "")


def _show(values: Sequence[str]) -> str:
    return f"{values[0]}..{values[-1]}" if len(values) > 12 else ", ".join(values)


def _group_label(vals: tuple[str, ...]) -> str:
    if len(vals) == 1:
        return vals[0]
    if all(v.lstrip("-").isdigit() for v in vals):
        nums = sorted(int(v) for v in vals)
        if nums == list(range(nums[0], nums[-1] + 1)):
            return f"{nums[0]}-{nums[-1]}"
    return "|".join(vals)


def parse_by(entry, domain: Domain, table: str) -> tuple[str, tuple[tuple[str, ...], ...] | None]:
    """One ``by`` entry of a config: ``SEX``, or ``{AGE: [[0, 17], [18, 64]]}`` (a range variable's
    groups as inclusive [low, high] bounds), or ``{RACE: [[W], [B, A]]}`` (groups of value labels)."""
    if isinstance(entry, str):
        return entry, None
    if not (isinstance(entry, dict) and len(entry) == 1):
        raise TableError(f"table {table}: each 'by' entry is a variable name or {{NAME: [groups]}}, got {entry!r}")
    var, groups = next(iter(entry.items()))
    if var not in domain:
        raise TableError(f"table {table}: variable {var!r} is not an attack attribute; they are "
                         f"{[a for a in domain.names if a != 'BLOCK']}")
    values = domain.attribute(var).values
    numeric = all(v.lstrip("-").isdigit() for v in values)
    out = []
    for g in groups if isinstance(groups, (list, tuple)) else [groups]:
        g = list(g) if isinstance(g, (list, tuple)) else [g]
        if numeric and len(g) == 2 and all(isinstance(x, int) for x in g):
            lo, hi = g
            if hi < lo or str(lo) not in values or str(hi) not in values:
                raise TableError(f"table {table}: {var} group [{lo}, {hi}] is outside {var}'s range "
                                 f"{values[0]}..{values[-1]}")
            out.append(tuple(str(v) for v in range(lo, hi + 1)))
        else:
            out.append(tuple(str(v) for v in g))
    return var, tuple(out)


def build_table_cells(specs: Sequence[dict], domain: Domain, unit_level: str, block_level: str = "block",
                      coarser: Sequence[str] = (), finer: Sequence[str] = ()) -> list[Cell]:
    """The cells of declared tables (config dicts with name, level, by) over an attack domain.
    ``level`` is the finest geography level (``block_level``: one table per block), a level in
    ``finer`` (between the target and its blocks: one table per such area inside the unit) or the
    target ``unit_level``; a level in ``coarser`` (than the target) gets an error that says what
    to do instead."""
    cells, names = [], set()
    for spec in specs:
        name, level = spec["name"], spec["level"]
        if name in names:
            raise TableError(f"table name {name!r} is used twice")
        names.add(name)
        if level not in (block_level, unit_level, *finer):
            if level in coarser:
                raise TableError(
                    f"table {name}: level {level!r} is coarser than the target level {unit_level!r}: a {level}'s table "
                    f"counts this {unit_level}'s persons together with its neighbours', so an attack on one "
                    f"{unit_level} cannot use it. To evaluate {level} tables, attack whole {plural(level)}: set target.level: "
                    f"{level} (their blocks stay BLOCK) and publish at level: {level} or {block_level}")
            raise TableError(f"table {name}: level {level!r} must be {block_level!r} (one table per block), "
                             + "".join(f"{lv!r}, " for lv in finer) + f"or the target level {unit_level!r}")
        by = tuple(parse_by(b, domain, name) for b in spec.get("by", []))
        cells += TableSpec(name, level, by, bool(spec.get("partial", False))).cells(
            domain, block_level=(level == block_level and level != unit_level),
            area_level=level if level in finer else None)
    return cells
