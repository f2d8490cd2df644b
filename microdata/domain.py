"""Ordered categorical attributes and the encoding of rows to int64 keys."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

from censusrecon.microdata.errors import DomainError

_INT64_MAX = np.iinfo(np.int64).max


@dataclass(frozen=True)
class Attribute:
    """One categorical attribute: a name and its ordered value labels (codes 0..size-1).

    >>> Attribute("SEX", ("male", "female")).size
    2
    """

    name: str
    values: tuple[str, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise DomainError(f"attribute name must be a non-empty string, got {self.name!r}")
        values = tuple(str(v) for v in self.values)
        object.__setattr__(self, "values", values)
        if len(values) < 1:
            raise DomainError(f"attribute {self.name!r} needs at least one value, got none")
        if len(set(values)) != len(values):
            raise DomainError(f"attribute {self.name!r} has duplicate value labels: {values}")

    @property
    def size(self) -> int:
        return len(self.values)

    @classmethod
    def range(cls, name: str, size: int) -> "Attribute":
        """An attribute whose labels are 0..size-1 (single-year age, block index)."""
        if int(size) < 1:
            raise DomainError(f"attribute {name!r} needs size >= 1, got {size}")
        return cls(name, tuple(str(i) for i in range(int(size))))


@dataclass(frozen=True)
class Domain:
    """An ordered tuple of attributes; a row is one code per attribute.

    >>> d = Domain((Attribute.range("A", 3), Attribute.range("B", 4)))
    >>> d.sizes, d.total_size
    ((3, 4), 12)
    >>> d.encode(np.array([[2, 3], [0, 1]])).tolist()
    [11, 1]
    """

    attributes: tuple[Attribute, ...]

    def __post_init__(self) -> None:
        attrs = tuple(self.attributes)
        object.__setattr__(self, "attributes", attrs)
        if not attrs:
            raise DomainError("a domain needs at least one attribute")
        for a in attrs:
            if not isinstance(a, Attribute):
                raise DomainError(f"domain entries must be Attribute, got {type(a).__name__}")
        names = [a.name for a in attrs]
        if len(set(names)) != len(names):
            raise DomainError(f"duplicate attribute names in domain: {names}")
        total = 1
        for a in attrs:
            total *= a.size
        if total > _INT64_MAX:
            raise DomainError(
                f"domain of {len(attrs)} attributes has {total} cells, more than int64 keys can hold"
            )

    @classmethod
    def from_sizes(cls, sizes: dict[str, int]) -> "Domain":
        """A domain with integer labels from a {name: size} mapping."""
        return cls(tuple(Attribute.range(n, s) for n, s in sizes.items()))

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.attributes)

    @property
    def sizes(self) -> tuple[int, ...]:
        return tuple(a.size for a in self.attributes)

    @property
    def total_size(self) -> int:
        total = 1
        for s in self.sizes:
            total *= s
        return total

    def __len__(self) -> int:
        return len(self.attributes)

    def __contains__(self, name: object) -> bool:
        return name in self.names

    def index(self, name: str) -> int:
        """Position of attribute ``name``; a DomainError lists the valid names."""
        try:
            return self.names.index(name)
        except ValueError:
            raise DomainError(f"unknown attribute {name!r}; the domain has {list(self.names)}") from None

    def attribute(self, name: str) -> Attribute:
        return self.attributes[self.index(name)]

    def size(self, name: str) -> int:
        return self.attribute(name).size

    def project(self, names: Iterable[str]) -> "Domain":
        """The sub-domain of the given attributes, in the given order."""
        return Domain(tuple(self.attribute(n) for n in names))

    def drop(self, names: Iterable[str]) -> "Domain":
        drop = set(names)
        for n in drop:
            self.index(n)
        return Domain(tuple(a for a in self.attributes if a.name not in drop))

    def to_dict(self) -> dict[str, list[str]]:
        return {a.name: list(a.values) for a in self.attributes}

    @classmethod
    def from_dict(cls, d: dict[str, Sequence[str]]) -> "Domain":
        return cls(tuple(Attribute(n, tuple(v)) for n, v in d.items()))

    def _radix(self) -> np.ndarray:
        # key = sum_i code_i * prod_{j>i} size_j  (last attribute varies fastest)
        sizes = np.array(self.sizes, dtype=np.int64)
        radix = np.ones(len(sizes), dtype=np.int64)
        for i in range(len(sizes) - 2, -1, -1):
            radix[i] = radix[i + 1] * sizes[i + 1]
        return radix

    def check_codes(self, codes: np.ndarray) -> np.ndarray:
        """Validate an (n, d) integer code matrix against the domain and return it as int64."""
        codes = np.asarray(codes)
        if codes.ndim != 2 or codes.shape[1] != len(self):
            raise DomainError(
                f"codes must have shape (n, {len(self)}) for attributes {list(self.names)}, got {codes.shape}"
            )
        if codes.size and not np.issubdtype(codes.dtype, np.integer):
            raise DomainError(f"codes must be integers, got dtype {codes.dtype}")
        codes = codes.astype(np.int64, copy=False)
        if codes.size:
            lo = codes.min(axis=0)
            hi = codes.max(axis=0)
            for i, a in enumerate(self.attributes):
                if lo[i] < 0 or hi[i] >= a.size:
                    raise DomainError(
                        f"attribute {a.name!r} has codes in [{lo[i]}, {hi[i]}]; valid codes are 0..{a.size - 1}"
                    )
        return codes

    def encode(self, codes: np.ndarray) -> np.ndarray:
        """Encode (n, d) codes to one int64 key per row (mixed radix, vectorised)."""
        codes = self.check_codes(codes)
        return codes @ self._radix()

    def decode(self, keys: np.ndarray) -> np.ndarray:
        """Inverse of :meth:`encode`: int64 keys to an (n, d) int64 code matrix."""
        keys = np.asarray(keys, dtype=np.int64)
        if keys.size and (keys.min() < 0 or keys.max() >= self.total_size):
            raise DomainError(f"keys must lie in [0, {self.total_size}), got [{keys.min()}, {keys.max()}]")
        sizes = np.array(self.sizes, dtype=np.int64)
        return (keys[:, None] // self._radix()[None, :]) % sizes[None, :]
