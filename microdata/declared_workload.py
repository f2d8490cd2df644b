"""The workload a config declares (:class:`microdata.data_settings.QueryConfig`), built over a domain: k-way marginals
(a seeded sample when asked), or tables: SF1 cells and declared tables in one product-query workload, per block, per
area between the unit and its blocks, or of the unit."""

from __future__ import annotations

import numpy as np

from censusrecon.microdata.census import TABLE_SETS, CensusWorkload, reference_cells, sf1_tables
from censusrecon.microdata.errors import ConfigError
from censusrecon.microdata.marginals import Workload
from censusrecon.microdata.seeds import stable_seed
from censusrecon.microdata.tables import TableError, build_table_cells


def census_cells(q) -> list:
    """The SF1 cells a tables workload names (its preset, or the SF1 names in its list)."""
    if q.tables == "reference":
        return reference_cells()
    tables = sf1_tables()
    names = TABLE_SETS[q.tables] if isinstance(q.tables, str) else [t for t in q.tables if isinstance(t, str)]
    return [c for name in names for c in tables[name]]


def data_levels(data) -> list[str]:
    """The geography levels below national of ``data`` (a :class:`~microdata.data_settings.DataConfig`), coarsest
    first, as it declares them (a person file's own levels; the census levels for the embedded population and PPMF;
    ACS: state, PUMA)."""
    if data.geography:
        return [g.level for g in data.geography]
    if data.source in ("acs_nist", "folktables"):
        return ["state", "puma"]
    return ["state", "county", "tract", "block"]


def table_cells(q, domain, levels: list[str], level: str, areas: dict | None = None) -> tuple[list, dict]:
    """The cells tables workload ``q`` publishes for a unit of ``level`` (SF1 cells, then the declared tables' cells)
    and the areas of the ``levels`` between the unit and its blocks they are published per (``areas`` cut to those)."""
    declared = [t.model_dump() for t in (q.tables if isinstance(q.tables, list) else []) if not isinstance(t, str)]
    try:
        at = levels.index(level) if level in levels else len(levels)
        finer = levels[at + 1:-1]
        cells = census_cells(q) + build_table_cells(declared, domain, level, coarser=levels[:at], finer=finer)
        inside = sorted({c.level for c in cells} & set(finer))
        if inside and "BLOCK" in domain and not (areas and set(inside) <= set(areas)):
            raise ValueError(f"tables per {inside} inside a {level} need the unit's areas (Study.areas)")
    except TableError as e:
        raise ConfigError(f"queries.tables: {e}") from None
    return cells, {k: v for k, v in (areas or {}).items() if k in inside}


def declared_workload(q, domain, levels: list[str], level: str, seed: int, areas: dict | None = None):
    """The published queries of workload ``q`` over ``domain`` for a unit of ``level``: k-way marginals (a sample
    seeded by ``seed`` and the workload's name, if asked), or tables (:func:`table_cells`): per block, or per area of
    ``areas`` for tables of a level between the unit and its blocks, when BLOCK is kept; summed to the unit when it
    is not."""
    if q.is_tables:
        cells, inside_areas = table_cells(q, domain, levels, level, areas)
        return CensusWorkload.build(domain, cells, areas=inside_areas)
    w = Workload.all_kway(domain, q.k, lower=q.lower)
    if q.max_marginals is not None:
        w = w.sample(q.max_marginals, np.random.default_rng(stable_seed("workload", seed, q.label)))
    return w
