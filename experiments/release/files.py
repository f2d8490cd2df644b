"""Releases made outside censusrecon: an agency's own noisy tables (or microdata) read from a file,
checked against the declared tables and units, and turned into what the attacks read.

The tables layout, one row a published cell:

======== =============================================================================
unit     the target unit's id, as the data's geography writes it (``01:001:000100``)
table    the table's name: an SF1 table (P12) or a declared table (SEX_BY_AGE)
cell     the cell's number within its table (1 = the first cell, as SF1 numbers them)
label    optional: the cell's label; when present it must be the declared one
geography where the cell is published: a block's id (tables per block), an area's id
         (tables per tract inside a county) or the unit's id (tables of the unit)
value    the published count, any real number (noisy counts may be negative or fractional)
======== =============================================================================

``censusrecon release-template CONFIG`` writes every row a config's release must have, value
empty. A table published twice (a total in two tables) is two measurements of one query: the
attacks read their mean. A variant without BLOCK reads a file published per block as its blocks'
sums (post-processing)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from censusrecon.experiments.config import ConfigError, ExperimentConfig, ReleaseFileConfig
from censusrecon.experiments.problem import Study, table_cells
from censusrecon.microdata.census import CensusWorkload, placed_cells
from censusrecon.microdata.errors import CensusReconError
from censusrecon.synth.registry import FILE_PREFIX
from censusrecon.experiments.problem import exact_answers, load_population, resolve
from censusrecon.synth.publishing import Published, tables_published
from censusrecon.experiments.results import atomic_write_text, write_parquet
from censusrecon.synth.release import workload_counts
from censusrecon.synth.release_files import FILE_NOTE, TABLE_COLUMNS, Layout, TablesFile, file_digest


def unit_layout(study: Study, unit: str, with_block: bool) -> Layout:
    """The published cells of ``unit`` in file order (table by table, cell by cell, block by block),
    each with its query in :func:`experiments.problem.build_workload`'s workload of the unit."""
    cfg = study.cfg
    prob = study.prepare(unit, with_block, pad_blocks=False)
    domain = prob.private.domain
    cells, areas = table_cells(cfg, cfg.published, domain, prob.areas)
    w = CensusWorkload.build(domain, cells, areas=areas)  # as build_workload builds it, from the same cells
    query = {label: i for i, label in enumerate(w.labels)}
    full = dict(zip(domain.attribute("BLOCK").values, study.blocks(unit)[0])) if with_block else {}
    seen: dict[tuple, int] = {}
    rows = []
    for c, place, level, key in placed_cells(domain, cells, "BLOCK", areas):
        if key not in seen:  # the workload keeps the first copy of a product and names it by that cell
            seen[key] = query[c.name if place is None else f"{c.name}@{place}"]
        where = unit if place is None else full.get(place, place)
        rows.append((c.table, c.number, c.label, where, level, seen[key], c.attrs()))
    df = pd.DataFrame(rows, columns=["table", "cell", "label", "geography", "level", "query", "sets"])
    return Layout(unit, with_block, df, w)


def template(study: Study, units: list[str]) -> pd.DataFrame:
    """The rows a tables file for these units must have, value empty: per block when any variant
    keeps BLOCK (a variant without it sums the blocks), else per unit."""
    wb = any(study.cfg.target.with_block)
    parts = [unit_layout(study, u, wb).rows.assign(unit=u) for u in units]
    df = pd.concat(parts, ignore_index=True)
    return df.assign(value=np.nan)[list(TABLE_COLUMNS)]


def write_template(cfg: ExperimentConfig, to: str | Path, force: bool = False) -> tuple[Path, int, int]:
    """Write :func:`template` for the config's units to ``to`` (CSV or Parquet by extension), never over
    an existing file unless ``force``; return the path, its rows and its units."""
    path = Path(to)
    if path.suffix.lower() not in (".csv", ".parquet"):
        raise ConfigError(f"{path}: the template is written as CSV (.csv) or Parquet (.parquet)")
    if path.exists() and not force:
        raise ConfigError(f"{path} exists and is never replaced: choose another path, or pass --force")
    study = resolve(cfg)
    units = study.units
    df = template(study, units)
    if path.suffix.lower() == ".parquet":
        write_parquet(path, df)
    else:
        atomic_write_text(path, df.to_csv(index=False))
    return path, len(df), len(units)


class MicrodataFile:
    """A microdata release file (synthetic persons, a swapped or perturbed file) read with the person
    file's columns, codes and public block list: every code is checked as the person file's are."""

    def __init__(self, cfg: ExperimentConfig, spec: ReleaseFileConfig, units: list[str]):
        self.spec = spec
        self.path = Path(cfg.data_file(spec.path))
        if not self.path.exists():
            raise ConfigError(f"release file {self.path} does not exist (release.files: paths are read from the "
                              "config's folder)")
        data = cfg.data.model_copy(update={"path": str(self.path.resolve())})
        as_file = cfg.model_copy(update={"data": data}).with_base_dir(cfg.base_dir)
        try:
            self.pop = load_population(as_file)
        except CensusReconError as e:  # the person file's reader names the file, the row and the value
            raise ConfigError(f"release file {spec.name!r} (microdata): {e}") from None
        there = set(np.unique(self.pop.geography.units(cfg.target.level)).tolist())
        absent = [u for u in units if u not in there]
        if absent:
            raise ConfigError(f"release file {self.path} has no persons in {cfg.target.level} {absent[0]}, one of the "
                              f"units evaluated" + (f" (nor in {len(absent) - 1} more)" if len(absent) > 1 else ""))
        self.cfg = cfg
        self.study = resolve(cfg, self.pop)  # the file's persons, over the config's units and public block list
        self.digest = file_digest(self.path)

    def rows(self, unit: str, with_block: bool):
        """The file's persons of ``unit`` over the attack domain (BLOCK from the public block list)."""
        return self.study.unit_data(unit, with_block)


def read_release_files(study: Study, units: list[str]) -> dict[tuple, TablesFile | MicrodataFile]:
    """Every file of ``release.files``, read and checked against every unit and variant before
    anything runs (a file that does not fit is a one-line error naming file, row and value): per
    (file:<name>, setting); a tables file carries the layouts of every (unit, variant) in ``.layouts``."""
    cfg, pop = study.cfg, study.pop
    r = cfg.release
    out = {}
    for spec in r.files:
        if spec.kind == "microdata":
            out[(FILE_PREFIX + spec.name, spec.epsilon or 0.0)] = MicrodataFile(cfg, spec, units)
    specs = [f for f in r.files if f.kind == "tables"]
    if not specs:
        return out
    fine = any(cfg.target.with_block)  # the file is checked against the finest variant evaluated
    layouts = {(u, wb): unit_layout(study, u, wb) for u in units for wb in dict.fromkeys(cfg.target.with_block)}
    check = {u: layouts[(u, fine)] for u in units}
    level = cfg.target.level
    geo = pop.geography
    others = set(geo.unit_ids(level)) | (set(geo.catalogue.ids[level].tolist()) if geo.catalogue is not None and
                                          level in geo.catalogue.ids else set())
    for spec in specs:
        tf = TablesFile(cfg.data_file(spec.path), spec, check, level, others - set(units))
        for (u, wb), lay in layouts.items():
            tf.counts(u, lay)  # every cell of every unit there
        tf.layouts = layouts
        out[(FILE_PREFIX + spec.name, spec.epsilon or 0.0)] = tf
    return out


def file_published(mechanism: str, release, unit: str, with_block: bool, workload):
    """A release file as the attacks read it. Tables: the file's counts, and the answers RAP-Rank fits
    (negatives clipped, divided by the total estimated from the file's own tables: post-processing).
    Microdata: the file's persons of the unit, their tabulation (consistent tables) and its answers."""
    if isinstance(release, MicrodataFile):
        rows = release.rows(unit, with_block)
        return Published(mechanism, None, rows, exact_answers(rows, workload), ("rows over", tuple(rows.domain.names),
                         rows.domain.sizes), False, FILE_NOTE, workload_counts(rows, workload).astype(np.float64),
                         facts={"kind": "microdata"}, rows=rows)
    return tables_published(mechanism, release.counts(unit, release.layouts[(unit, with_block)]), workload, FILE_NOTE)
