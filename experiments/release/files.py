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

import hashlib
from dataclasses import dataclass
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

#: the columns of a tables file (label is optional)
TABLE_COLUMNS = ("unit", "table", "cell", "label", "geography", "value")


@dataclass
class Layout:
    """Every cell a unit's release publishes, duplicates included: one row per (table, cell, geography)
    with the index of the workload query it measures (``query``)."""

    unit: str
    with_block: bool
    rows: pd.DataFrame  # table, cell, label, geography, level, query, sets (attribute -> value codes)
    workload: object

    def to_queries(self, values: np.ndarray) -> np.ndarray:
        """Values per row (or releases × rows) to the workload's queries: the mean of a query's copies."""
        values = np.asarray(values, dtype=np.float64)
        q = self.rows["query"].to_numpy()
        n = self.workload.num_queries
        copies = np.bincount(q, minlength=n).astype(np.float64)
        if values.ndim == 1:
            return np.bincount(q, weights=values, minlength=n) / copies
        out = np.zeros((values.shape[0], n))
        np.add.at(out.T, q, values.T)
        return out / copies[None, :]


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


def file_digest(path: str | Path) -> str:
    """SHA-256 of a release file's bytes (a unit's saved result is reused only for the same file)."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _read(path: Path) -> tuple[pd.DataFrame, str]:
    """The file as strings (nothing coerced before it is checked), and how to name its rows."""
    if not path.exists():
        raise ConfigError(f"release file {path} does not exist (release.files: paths are read from the config's "
                          "folder; `censusrecon release-template CONFIG` writes the layout to fill)")
    suffix = path.suffix.lower()
    try:
        if suffix == ".parquet":
            return pd.read_parquet(path).astype(str), "row"
        if suffix == ".csv":
            return pd.read_csv(path, dtype=str, keep_default_na=False), "line"
    except Exception as e:  # unreadable: the reader's own words, one line
        raise ConfigError(f"release file {path} cannot be read: {str(e).splitlines()[0]}") from None
    raise ConfigError(f"release file {path}: CSV (.csv) or Parquet (.parquet), by extension; got {suffix or 'none'}")


def _where(kind: str, i: int) -> str:
    """Row i (0-based, after the header) as the user finds it: a CSV line (the header is line 1)."""
    return f"line {i + 2}" if kind == "line" else f"row {i + 1}"


class TablesFile:
    """A tables release file read and checked against the layouts of the units evaluated."""

    def __init__(self, cfg: ExperimentConfig, spec: ReleaseFileConfig, layouts: dict[str, Layout],
                 other_units: set[str] = frozenset()):
        """``layouts``: per unit evaluated; ``other_units``: the data's other units at the target level,
        whose rows a file covering every unit has and this evaluation skips (counted in ``skipped``)."""
        self.spec = spec
        self.skipped = 0
        self.path = Path(cfg.data_file(spec.path))
        raw, kind = _read(self.path)
        missing = [c for c in TABLE_COLUMNS if c != "label" and c not in raw.columns]
        if missing:
            raise ConfigError(f"release file {self.path}: no column {', '.join(repr(c) for c in missing)} (it has "
                              f"{', '.join(map(str, raw.columns))}; the layout: {', '.join(TABLE_COLUMNS)})")
        self.values: dict[tuple, float] = {}
        first: dict[tuple, int] = {}
        known = {u: lay.rows for u, lay in layouts.items()}
        tables = {u: set(rows["table"]) for u, rows in known.items()}
        cells = {u: {(t, c): lab for t, c, lab in zip(rows["table"], rows["cell"], rows["label"])}
                 for u, rows in known.items()}
        places = {u: {(t, c, g) for t, c, g in zip(rows["table"], rows["cell"], rows["geography"])}
                  for u, rows in known.items()}
        has_label = "label" in raw.columns
        for i, rec in enumerate(raw.itertuples(index=False)):
            at = f"release file {self.path}, {_where(kind, i)}"
            unit, table, geo = str(rec.unit).strip(), str(rec.table).strip(), str(rec.geography).strip()
            if unit not in known:
                if unit in other_units:  # a unit of the data this evaluation does not target
                    self.skipped += 1
                    continue
                raise ConfigError(f"{at}: unit {unit!r} is not a {cfg.target.level} of the data (the units "
                                  f"evaluated: {', '.join(sorted(known)[:6])}{', ...' if len(known) > 6 else ''})")
            if table not in tables[unit]:
                raise ConfigError(f"{at}: table {table!r} is not a published table of this config "
                                  f"({', '.join(sorted(tables[unit]))})")
            try:  # 3, or 3.0 as a float column writes it
                number = float(str(rec.cell).strip())
                if not number.is_integer():
                    raise ValueError
                cell = int(number)
            except ValueError:
                raise ConfigError(f"{at}: cell {rec.cell!r} is not a cell number") from None
            if (table, cell) not in cells[unit]:
                numbers = sorted(c for t, c in cells[unit] if t == table)
                raise ConfigError(f"{at}: cell {cell} is not a cell of table {table} (cells {numbers[0]} to "
                                  f"{numbers[-1]})")
            label = cells[unit][(table, cell)]
            if has_label and str(rec.label).strip() not in ("", "nan") and str(rec.label).strip() != label:
                raise ConfigError(f"{at}: label {str(rec.label).strip()!r} is not the label of {table} cell {cell} "
                                  f"({label!r}): are the cells numbered as the declared tables number them?")
            if (table, cell, geo) not in places[unit]:
                where = sorted({g for t, c, g in places[unit] if (t, c) == (table, cell)})
                shown = ", ".join(where[:4]) + (", ..." if len(where) > 4 else "")
                raise ConfigError(f"{at}: geography {geo!r} is not where {table} cell {cell} of unit {unit} is "
                                  f"published ({shown})")
            try:
                value = float(str(rec.value).strip())
            except ValueError:
                value = float("nan")
            if not np.isfinite(value):
                raise ConfigError(f"{at}: value {rec.value!r} is not a finite number")
            key = (unit, table, cell, geo)
            if key in first:
                raise ConfigError(f"{at} repeats {_where(kind, first[key])} (unit {unit}, {table} cell {cell}, "
                                  f"geography {geo})")
            first[key] = i
            self.values[key] = value
        self.digest = file_digest(self.path)

    def counts(self, unit: str, layout: Layout) -> np.ndarray:
        """The published counts of ``unit`` in ``layout``'s workload order: the mean of a query's copies.
        A layout without BLOCK reads each unit-level cell as the sum of the file's rows of that cell
        (its blocks, or the unit row itself). A cell missing from the file is an error naming it."""
        rows = layout.rows
        per_cell: dict[tuple, float] = {}
        if not layout.with_block:  # each cell of the unit: the sum of the file's rows of it
            for (u, t, c, _), v in self.values.items():
                if u == unit:
                    per_cell[(t, c)] = per_cell.get((t, c), 0.0) + v
        values, missing = [], []
        for t, c, lab, g in zip(rows["table"], rows["cell"], rows["label"], rows["geography"]):
            v = self.values.get((unit, t, c, g)) if layout.with_block else per_cell.get((t, c))
            if v is None:
                missing.append((t, c, lab, g))
            values.append(v)
        if missing:
            t, c, lab, g = missing[0]
            more = f" (and {len(missing) - 1} more cells missing)" if len(missing) > 1 else ""
            raise ConfigError(f"release file {self.path}: no row for unit {unit}, {t} cell {c} ({lab!r}), geography "
                              f"{g}{more}")
        return layout.to_queries(np.array(values, dtype=np.float64))


#: what a release file's ledger entry and report say of its privacy: the tool did not make it
FILE_NOTE = "made outside censusrecon: its ε is the agency's declaration, not audited (a file cannot be re-run on " \
            "neighbouring data; name the program that made it under release.programs to have it audited)"


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
        tf = TablesFile(cfg, spec, check, others - set(units))
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
