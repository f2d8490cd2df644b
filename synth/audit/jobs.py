"""One audit job: every DP mechanism and release program of one (BLOCK variant, ε), each by its family."""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from censusrecon.microdata.dataset import Dataset
from censusrecon.microdata.geography import FROM_ROWS, Geography
from censusrecon.microdata.seeds import stable_seed
from censusrecon.synth import registry
from censusrecon.synth.audit.families import AuditFamily, FamilyCall, family
from censusrecon.synth.audit.neighbours import SMOOTHED_CELLS, audit_frame, histogram_pair
from censusrecon.synth.audit.source import AuditSource, AuditSpec
from censusrecon.synth.audit.statistics import AuditResult
from censusrecon.synth.mechanism import parse_relation


@dataclasses.dataclass(frozen=True)
class AuditPlan:
    """What every job of one audit shares: the audited units and their roles, and the audit's seed."""

    units: list[str]
    roles: dict[str, str]
    seed: int
    seed_source: str

    @property
    def anchor(self) -> str:
        """The unit whose frame the histograms are audited on: the largest audited unit."""
        return next((u for u, role in self.roles.items() if role == "largest"), self.units[0])


def audit_job(src: AuditSource, plan: AuditPlan, wb: bool, eps: float, cache: dict, bar=None,
              only: str | None = None) -> list[AuditResult]:
    """One (BLOCK variant, ε) of an audit: every DP mechanism, then every release program, in config order, each
    audited on its own through its own publishing function (two mechanisms of one family never share a result);
    every result says which function drew it (``published_through``), the variant and the units. ``cache``
    holds the variant's real instances (its frame, its tables' pairs, its trees), shared by the ε of one
    process; a fresh one gives the same results. ``only``: that mechanism or program (by its result's name)
    alone, as a Ray task audits it."""
    spec = src.spec
    seed, units = plan.seed, plan.units
    names = [n for n in spec.names if only in (None, n)]
    common = {"audit_seed": seed, "audit_seed_source": plan.seed_source, "audited_units": list(units),
              "unit_roles": plan.roles, "with_block": wb}
    if spec.backend == "opendp":
        common["noise_drawn"] = ("whole releases, the structure and the replay through OpenDP, as published; the "
                                 "bound's releases per neighbour through the same code with the audit's keyed noise")
    mechanisms = [n for n in names if not registry.is_program(n)]  # programs use neither the frame nor the block list
    if "audit_frame" not in cache and mechanisms:
        frame, _ = audit_frame(src, plan.anchor, wb)
        relation = parse_relation(spec.relation)
        cache["audit_frame"] = (_block_list_check(src, plan.anchor) if wb else None,
                                histogram_pair(frame, relation), histogram_pair(frame, relation, cells=SMOOTHED_CELLS))
    blocks_check, small, smallest = cache.get("audit_frame", (None, None, None))
    out = []
    for name in names:
        t0 = time.perf_counter()
        res = family_of(name).audit(FamilyCall(src, name, eps, wb, seed, tuple(units), cache, small, smallest))
        if blocks_check is not None and not registry.is_program(name):  # programs read no block list of ours
            res.checks["block_list"] = blocks_check
        res.details.update(published_through=name, audit_seconds=round(time.perf_counter() - t0, 1), **common)
        out.append(res)
        if bar is not None:
            bar.update(1, f"{name} at ε = {eps:g}")
    return out


def family_of(name: str) -> AuditFamily:
    """The family that audits a DP mechanism, or (``program:<name>``) a release program."""
    return family("program" if registry.is_program(name) else registry.mechanism(name).audit)


def unit_roles(src: AuditSource, units: list[str], seed: int = 0) -> dict[str, str]:
    """The units an audit checks, in the order audited, each with its role in the choice: all of them
    ("all"), or ``release.audit.units`` of them chosen to cover the size range: the smallest, the median
    and the largest (by persons; ties by id), then one drawn with the audit's ``seed`` ("random"), then
    the rest drawn likewise. A bug that shows only on small units, or only on large ones, falls inside
    what is audited."""
    spec, pop = src.spec, src.pop
    k = spec.audit.units
    if k == "all" or k >= len(units):
        return {u: "all" for u in units}
    sizes = {u: int(pop.geography.mask(spec.level, u).sum()) for u in units}
    by_size = sorted(units, key=lambda u: (sizes[u], u))
    roles: dict[str, str] = {}
    for role, u in (("smallest", by_size[0]), ("median", by_size[(len(by_size) - 1) // 2]),
                    ("largest", by_size[-1])):
        roles.setdefault(u, role)
    rest = sorted((u for u in units if u not in roles), key=lambda u: stable_seed("audit-sample", seed, u))
    for u in rest[:k - len(roles)]:
        roles[u] = "random"
    return roles


#: Statistical tests per result of a program's stages, beside its family's: its first measurements (their bound and
#: their noise's ρ), and a synthesizer's spending ledger (counted like first measurements, as a multiple of them:
#: its spending, its measurements' noise, its selections). Each family's own count is its value's ``tests``.
STAGE_TESTS = {"measurements": (0, 2), "spending": (0, 2)}


def audit_level(spec: AuditSpec, units: int) -> AuditSpec:
    """``spec`` at the confidence every check of its audit over ``units`` units runs at (:func:`family_level`
    over every audited ε, variant, mechanism and program)."""
    programs = spec.programs
    return spec.at_confidence(family_level(
        spec.audit, len(spec.audited_epsilons) * len(spec.with_block), list(spec.names), units,
        sum(p.measurements is not None for p in programs)
        + sum(STAGE_TESTS["spending"]) * sum(p.spending is not None for p in programs)))


def family_level(a, results: int, mechanisms: list[str], units: int = 1, staged: int = 0) -> float:
    """The confidence every check of one audit runs at, ``a`` its ``release.audit``: each statistical test at
    1 − false_alarm / K, K the tests of the whole audit (every ε, variant and mechanism, each audited on its own;
    ``staged``: programs whose first measurements are audited too), so that an audit of correct mechanisms fails
    with probability at most ``false_alarm`` (Bonferroni); never below ``confidence``."""

    def tests(m: str) -> int:
        fixed, per_unit = family_of(m).tests
        return fixed + per_unit * units

    count = results * (sum(tests(m) for m in mechanisms) + sum(STAGE_TESTS["measurements"]) * staged * units)
    return max(a.confidence, 1 - a.false_alarm / max(count, 1))


def _block_list_check(src: AuditSource, unit: str) -> str:
    """A tract where one block's only resident is replaced by someone in another of its blocks
    (or removed): the attack domain, hence every table's and histogram's shape, must not change."""
    spec, pop = src.spec, src.pop
    if "occupied_blocks" in spec.invariants:
        return "declared invariant: occupied_blocks (the block list is published as it is; not audited)"
    geo = pop.geography
    rows = np.flatnonzero(geo.mask(spec.level, unit))
    blocks = sorted(set(geo.units("block")[rows].tolist()))
    if len(blocks) < 2:
        return "not applicable: the unit has fewer than two occupied blocks"
    first = rows[geo.units("block")[rows] == blocks[0]][:1]
    second = rows[geo.units("block")[rows] == blocks[1]][:3]
    template = pop.take(np.concatenate([first, second]))
    moved = pop.take(np.concatenate([second[:1], second]))  # the lone resident replaced by one of block 2

    def domain_of(people: Dataset):
        g = Geography(people.geography.levels, people.geography.ids, catalogue=geo.catalogue)
        return src.with_people(Dataset(people.domain, people.codes, g)).prepare(unit, True, pad_blocks=False).private.domain

    try:
        same = domain_of(template) == domain_of(moved)
    except Exception as e:  # noqa: BLE001 - a crash on the neighbour is a failed check, reported as such
        return f"fail: the neighbour could not be prepared ({e})"
    if same:
        return "pass"
    source = geo.catalogue.source if geo.catalogue is not None else FROM_ROWS
    return f"fail: the block list changes when a block's only resident is replaced (block list: {source})"
