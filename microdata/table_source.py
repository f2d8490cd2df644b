"""Any person file (CSV or Parquet) with declared columns, codes and geography, read in chunks and checked."""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Mapping, Sequence

import numpy as np
import pandas as pd

from censusrecon.microdata.dataset import Dataset
from censusrecon.microdata.domain import Attribute, Domain
from censusrecon.microdata.errors import CensusReconError
from censusrecon.microdata.geography import Geography, UnitCatalogue

log = logging.getLogger(__name__)

#: Rows read at a time: a file of any size never has to fit in memory as text.
CHUNK_ROWS = 200_000
#: Joins a unit's code to its parents' in its id (codes are often unique only within their parent).
SEP = ":"


class DataFileError(CensusReconError):
    """A data file is missing, unreadable or holds a value its declaration does not allow; the
    message names the file, and the row, column and value where there is one."""


@dataclass(frozen=True)
class ColumnSpec:
    """One declared attribute: the file's column, and either its allowed codes (``values``, in the
    order they become codes 0, 1, ...) or an inclusive integer ``range``."""

    name: str
    column: str
    values: tuple[str, ...] | None = None
    range: tuple[int, int] | None = None

    def __post_init__(self) -> None:
        if (self.values is None) == (self.range is None):
            raise DataFileError(f"attribute {self.name}: declare exactly one of values or range")
        if self.values is not None:
            vals = tuple(str(v) for v in self.values)
            if not vals or len(set(vals)) != len(vals):
                raise DataFileError(f"attribute {self.name}: values must be distinct and non-empty, got {list(vals)}")
            object.__setattr__(self, "values", vals)
        else:
            lo, hi = (int(x) for x in self.range)
            if hi < lo:
                raise DataFileError(f"attribute {self.name}: range [{lo}, {hi}] is empty")
            object.__setattr__(self, "range", (lo, hi))

    def attribute(self) -> Attribute:
        if self.values is not None:
            return Attribute(self.name, self.values)
        lo, hi = self.range
        return Attribute(self.name, tuple(str(v) for v in range(lo, hi + 1)))

    def allowed(self) -> str:
        return f"one of [{', '.join(self.values)}]" if self.values is not None else \
            f"an integer in [{self.range[0]}, {self.range[1]}]"

    def encode(self, raw: pd.Series, where) -> np.ndarray:
        """Codes of one chunk's column; the first bad value raises, with ``where(i)`` naming its row."""
        text = raw.astype(str).str.strip()
        if self.values is not None:
            lookup = {v: i for i, v in enumerate(self.values)}
            codes = text.map(lookup)
            bad = codes.isna().to_numpy()
            if bad.any():
                i = int(np.argmax(bad))
                raise DataFileError(f"{where(i)}, column {self.column}: {raw.iloc[i]!r} is not {self.allowed()}")
            return codes.to_numpy(dtype=np.int64)
        nums = pd.to_numeric(text, errors="coerce")
        lo, hi = self.range
        bad = (nums.isna() | (nums != np.floor(nums)) | (nums < lo) | (nums > hi)).to_numpy()
        if bad.any():
            i = int(np.argmax(bad))
            raise DataFileError(f"{where(i)}, column {self.column}: {raw.iloc[i]!r} is not {self.allowed()}")
        return nums.to_numpy(dtype=np.int64) - lo


@contextlib.contextmanager
def reading(path: Path, what: str = "file") -> Iterator[None]:
    """Turn whatever a reader raises on a malformed file into one line that names the file."""
    try:
        yield
    except CensusReconError:
        raise
    except UnicodeDecodeError:
        raise DataFileError(f"{path}: not UTF-8 text; is it a {what}? (save text files as UTF-8)") from None
    except pd.errors.EmptyDataError:
        raise DataFileError(f"{path}: the file is empty; expected a {what} with a header row") from None
    except (pd.errors.ParserError, ValueError, OSError, KeyError, TypeError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise DataFileError(f"{path}: cannot be read as a {what}: {first}") from None
    except Exception as e:  # noqa: BLE001 - pyarrow and others raise their own types; name the file
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise DataFileError(f"{path}: cannot be read as a {what}: {type(e).__name__}: {first}") from None


def _chunks(path: Path, columns: Sequence[str]) -> Iterator[tuple[int, pd.DataFrame]]:
    """(first row number, chunk) over the file's ``columns`` as text; rows are numbered as a
    spreadsheet shows them, the header being row 1."""
    suffix = path.suffix.lower()
    if suffix in (".parquet", ".pq"):
        import pyarrow.parquet as pq

        with reading(path, "Parquet file"):
            f = pq.ParquetFile(path)
            have = f.schema_arrow.names
            _check_columns(path, have, columns)
            row = 2
            for batch in f.iter_batches(batch_size=CHUNK_ROWS, columns=list(dict.fromkeys(columns))):
                df = batch.to_pandas().astype(object).where(lambda x: x.notna(), "")
                yield row, df.astype(str)
                row += len(df)
        return
    if suffix not in (".csv", ".txt", ".tsv"):
        raise DataFileError(f"{path}: unknown file type {suffix!r}; give a .csv or .parquet file")
    sep = "\t" if suffix == ".tsv" else ","
    with reading(path, "CSV file"):
        header = pd.read_csv(path, nrows=0, sep=sep, encoding="utf-8").columns.tolist()
        _check_columns(path, header, columns)
        row = 2
        for df in pd.read_csv(path, usecols=list(dict.fromkeys(columns)), dtype=str, keep_default_na=False,
                              chunksize=CHUNK_ROWS, sep=sep, encoding="utf-8"):
            yield row, df
            row += len(df)


def _check_columns(path: Path, have: Sequence[str], want: Sequence[str]) -> None:
    missing = [c for c in dict.fromkeys(want) if c not in set(have)]
    if missing:
        hint = ""
        if len(have) == 1:  # one column holding the others: another delimiter
            found = [name for d, name in ((";", "semicolons"), ("\t", "tabs"), ("|", "'|'")) if d in str(have[0])]
            if found:
                hint = (f"; its header is one column holding {found[0]}: the file is not comma-separated. Save it "
                        "with commas (or, for tabs, name it .tsv)")
        raise DataFileError(f"{path}: missing column{'s' if len(missing) > 1 else ''} {', '.join(missing)}; "
                            f"the file has columns [{', '.join(map(str, have))}]{hint}")


def _geo_codes(path: Path, chunk: pd.DataFrame, first_row: int, geography: Sequence[tuple[str, str]]) -> dict:
    """Each level's unit id per row: its code joined to its parents' (a tract code is often unique only
    within its county); a blank code is an error."""
    ids, prefix = {}, None
    for level, column in geography:
        code = chunk[column].astype(str).str.strip()
        blank = (code == "").to_numpy()
        if blank.any():
            i = int(np.argmax(blank))
            raise DataFileError(f"{path} row {first_row + i}, column {column}: the {level} code is blank")
        prefix = code if prefix is None else prefix + SEP + code
        ids[level] = prefix.to_numpy(dtype=str)
    return ids


def read_units(path: str | Path, geography: Sequence[tuple[str, str]]) -> UnitCatalogue:
    """The public list of every unit of the finest level (empty ones included), one row each, with
    the same geography columns as the person file."""
    path = Path(path)
    if not path.is_file():
        raise DataFileError(f"units file {str(path)!r} does not exist")
    parts: dict[str, list] = {lv: [] for lv, _ in geography}
    for first, chunk in _chunks(path, [c for _, c in geography]):
        for lv, ids in _geo_codes(path, chunk, first, geography).items():
            parts[lv].append(ids)
    ids = {lv: np.concatenate(v) if v else np.zeros(0, str) for lv, v in parts.items()}
    finest = geography[-1][0]
    if len(ids[finest]) == 0:
        raise DataFileError(f"{path}: the units file lists no units")
    uniq, counts = np.unique(ids[finest], return_counts=True)
    if (counts > 1).any():
        raise DataFileError(f"{path}: {finest} {uniq[counts > 1][0].replace(SEP, ' ')!r} is listed more than once")
    return UnitCatalogue(ids, f"units file {path} (every {finest}, empty ones included)")


def read_table(path: str | Path, geography: Sequence[tuple[str, str]], attributes: Mapping[str, ColumnSpec],
               units_file: str | Path | None = None) -> Dataset:
    """Persons of a CSV or Parquet file: one row per person, the declared attribute columns and one
    column per geography level (coarsest first). Every value is checked against its declaration;
    the first that fails raises an error naming the file, row, column, value and what is allowed.
    With ``units_file`` the geography carries the public unit list, and a unit with persons that
    the list lacks is an error."""
    path = Path(path)
    if not path.is_file():
        raise DataFileError(f"person file {str(path)!r} does not exist")
    if not geography:
        raise DataFileError("data.geography needs at least one level (coarsest first)")
    specs = list(attributes.values())
    if not specs:
        raise DataFileError("data.attributes declares no attribute")
    columns = [c for _, c in geography] + [s.column for s in specs]
    codes, geo_parts = [], {lv: [] for lv, _ in geography}
    for first, chunk in _chunks(path, columns):
        def where(i, first=first):
            return f"{path} row {first + i}"

        codes.append(np.stack([s.encode(chunk[s.column], where) for s in specs], axis=1))
        for lv, ids in _geo_codes(path, chunk, first, geography).items():
            geo_parts[lv].append(ids)
    if not codes or sum(len(c) for c in codes) == 0:
        raise DataFileError(f"{path}: the file has a header but no persons")
    domain = Domain(tuple(s.attribute() for s in specs))
    ids = {lv: np.concatenate(v) for lv, v in geo_parts.items()}
    try:
        geo = Geography.from_levels(ids)
    except CensusReconError as e:
        raise DataFileError(f"{path}: {str(e).replace(SEP, ' ')}") from None
    if units_file is not None:
        catalogue = read_units(units_file, geography)
        for lv, _ in geography:
            listed = set(catalogue.ids[lv].tolist())
            missing = ~np.isin(ids[lv], list(listed))
            if missing.any():
                i = int(np.argmax(missing))
                raise DataFileError(f"{path} row {i + 2}: {lv} {ids[lv][i].replace(SEP, ' ')!r} is not in the units "
                                    f"file {units_file}")
        geo = geo.with_catalogue(catalogue)
    log.info("read %d persons from %s", len(ids[geography[0][0]]), path)
    return Dataset(domain, np.concatenate(codes), geo)
