"""Datasets of integer-coded rows over a Domain, with optional geography, and their I/O."""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from censusrecon.microdata.domain import Domain
from censusrecon.microdata.errors import DomainError
from censusrecon.microdata.geography import Geography

_META_KEY = b"censusrecon.domain"


@dataclass(frozen=True, eq=False)
class Dataset:
    """A multiset of rows: an (n, d) int64 code matrix over ``domain``, plus optional geography.

    >>> ds = Dataset(Domain.from_sizes({"A": 2, "B": 3}), np.array([[0, 2], [1, 0]]))
    >>> len(ds), ds.keys().tolist()
    (2, [2, 3])
    """

    domain: Domain
    codes: np.ndarray
    geography: Geography | None = None

    def __post_init__(self) -> None:
        codes = np.array(self.domain.check_codes(self.codes), dtype=np.int64)  # own copy, then freeze
        codes.setflags(write=False)
        object.__setattr__(self, "codes", codes)
        if self.geography is not None and len(self.geography) != len(codes):
            raise DomainError(
                f"geography has {len(self.geography)} rows but the data has {len(codes)}"
            )

    def __len__(self) -> int:
        return self.codes.shape[0]

    def column(self, name: str) -> np.ndarray:
        return self.codes[:, self.domain.index(name)]

    def keys(self) -> np.ndarray:
        """One int64 key per row (see :meth:`Domain.encode`)."""
        return self.domain.encode(self.codes)

    def distinct(self) -> int:
        """u: the number of distinct rows."""
        return int(np.unique(self.keys()).size)

    def take(self, index: np.ndarray) -> "Dataset":
        index = np.asarray(index)
        geo = self.geography.take(index) if self.geography is not None else None
        return Dataset(self.domain, self.codes[index], geo)

    def project(self, names: Iterable[str]) -> "Dataset":
        names = list(names)
        idx = [self.domain.index(n) for n in names]
        return Dataset(self.domain.project(names), self.codes[:, idx], self.geography)

    def with_column(self, attribute, values: np.ndarray, position: int = 0) -> "Dataset":
        """A copy with one more attribute inserted at ``position``."""
        attrs = list(self.domain.attributes)
        attrs.insert(position, attribute)
        codes = np.insert(self.codes, position, np.asarray(values, dtype=np.int64), axis=1)
        return Dataset(Domain(tuple(attrs)), codes, self.geography)

    # ---- pandas / parquet -------------------------------------------------------------
    def to_pandas(self, labels: bool = False) -> pd.DataFrame:
        """Columns per attribute (codes, or value labels as ordered categoricals) and GEO_<level>."""
        cols = {}
        for i, a in enumerate(self.domain.attributes):
            c = self.codes[:, i]
            cols[a.name] = pd.Categorical.from_codes(c, categories=list(a.values), ordered=True) if labels else c
        df = pd.DataFrame(cols)
        if self.geography is not None:
            for name, ids in self.geography.to_columns().items():
                df[name] = ids
        return df

    @classmethod
    def from_pandas(cls, df: pd.DataFrame, domain: Domain) -> "Dataset":
        """From integer-code or categorical-label columns named as the domain's attributes."""
        missing = [n for n in domain.names if n not in df.columns]
        if missing:
            raise DomainError(f"data frame lacks attribute columns {missing}; it has {list(df.columns)}")
        cols = []
        for a in domain.attributes:
            s = df[a.name]
            if isinstance(s.dtype, pd.CategoricalDtype) or s.dtype == object or pd.api.types.is_string_dtype(s):
                lookup = {v: i for i, v in enumerate(a.values)}
                mapped = s.astype(str).map(lookup)
                if mapped.isna().any():
                    bad = s[mapped.isna()].iloc[0]
                    raise DomainError(f"attribute {a.name!r} has value {bad!r} not in {list(a.values)[:10]}...")
                cols.append(mapped.to_numpy(dtype=np.int64))
            else:
                cols.append(s.to_numpy(dtype=np.int64))
        codes = np.stack(cols, axis=1) if cols else np.zeros((len(df), 0), dtype=np.int64)
        geo = Geography.from_columns(df)
        return cls(domain, codes, geo)

    def to_parquet(self, path: str | os.PathLike) -> None:
        """Write atomically (temp file + rename); the domain travels in the file's metadata."""
        table = pa.Table.from_pandas(self.to_pandas(), preserve_index=False)
        meta = dict(table.schema.metadata or {})
        meta[_META_KEY] = json.dumps(self.domain.to_dict()).encode()
        atomic_write_table(table.replace_schema_metadata(meta), path)

    @classmethod
    def read_parquet(cls, path: str | os.PathLike) -> "Dataset":
        table = pq.read_table(path)
        meta = table.schema.metadata or {}
        if _META_KEY not in meta:
            raise DomainError(f"{path} was not written by Dataset.to_parquet (no domain metadata)")
        domain = Domain.from_dict(json.loads(meta[_META_KEY]))
        return cls.from_pandas(table.to_pandas(), domain)


def shared_mode(path: str | os.PathLike) -> None:
    """Give a file the permissions a plain ``open`` would (0666 less the umask): temporary files
    are created private (0600), and results must stay readable by the user's group."""
    mask = os.umask(0)
    os.umask(mask)
    os.chmod(path, 0o666 & ~mask)


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write text so a reader sees the old file or the whole new one, never a part."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        shared_mode(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_table(table: pa.Table, path: str | os.PathLike) -> None:
    """Write a Parquet file so that readers see the old file or the whole new one, never a part."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        pq.write_table(table, tmp)
        shared_mode(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def lookup(keys: np.ndarray, values: np.ndarray, query: np.ndarray, missing: int = 0) -> np.ndarray:
    """``values`` of the sorted ``keys`` at ``query``, ``missing`` where a query key is absent.

    >>> lookup(np.array([2, 5, 9]), np.array([20, 50, 90]), np.array([5, 3, 9, 10])).tolist()
    [50, 0, 90, 0]
    """
    keys, values, query = np.asarray(keys), np.asarray(values), np.asarray(query)
    if keys.size == 0:
        return np.full(query.shape, missing, dtype=values.dtype if values.size else np.int64)
    pos = np.minimum(np.searchsorted(keys, query), keys.size - 1)
    return np.where(keys[pos] == query, values[pos], missing)
