"""A tables file an agency made outside censusrecon, read and checked cell by cell against the layout of what its units
publish (every unit, table, cell, label and geography, one line an error), and its counts turned into the workload's
queries. How a config's units are laid out is :mod:`experiments.release.files`'s."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from censusrecon.microdata.errors import ConfigError

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

    def __init__(self, path: Path, spec, layouts: dict[str, Layout], level: str, other_units: set[str] = frozenset()):
        """``path``: the file ``spec`` (its ``release.files`` entry) names; ``layouts``: per unit evaluated, units
        of ``level``; ``other_units``: the data's other units of that level, whose rows a file covering every unit
        has and this evaluation skips (counted in ``skipped``)."""
        self.spec = spec
        self.skipped = 0
        self.path = Path(path)
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
                raise ConfigError(f"{at}: unit {unit!r} is not a {level} of the data (the units "
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
