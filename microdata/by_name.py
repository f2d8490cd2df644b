"""A registry of named values (the release mechanisms, the attacks): one place that knows them by name."""

from __future__ import annotations

from typing import Callable, Generic, Iterator, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    """Values of one type by their ``name``: added once (a test may replace or remove its own), looked up with an
    error that names the registered ones. ``check(value, registered)`` may refuse a value that clashes with others.

    >>> from collections import namedtuple
    >>> Thing = namedtuple("Thing", "name")
    >>> things = Registry("thing", Thing, KeyError)
    >>> _ = things.register(Thing("a"), built_in=True)
    >>> things.names(), "a" in things, things.get("a")
    (['a'], True, Thing(name='a'))
    >>> things.get("b")
    Traceback (most recent call last):
    ...
    KeyError: "no thing is named 'b'; the registered ones: a"
    """

    def __init__(self, what: str, kind: type, unknown: type[Exception],
                 check: Callable[[T, dict], None] | None = None):
        self.what, self.kind, self.unknown, self.check = what, kind, unknown, check
        self._values: dict[str, T] = {}
        self._built_in: set[str] = set()

    def register(self, value: T, replace: bool = False, built_in: bool = False) -> T:
        """Add ``value``; its name must be new (``replace=True`` to redefine one, e.g. in a test)."""
        if not isinstance(value, self.kind):
            raise TypeError(f"register takes a {self.kind.__name__}, got {type(value).__name__}")
        if value.name in self._values and not replace:
            article = "an" if self.what[:1] in "aeiou" else "a"
            raise ValueError(f"{article} {self.what} named {value.name!r} is already registered")
        if self.check is not None:
            self.check(value, {n: v for n, v in self._values.items() if n != value.name})
        self._values[value.name] = value
        if built_in:
            self._built_in.add(value.name)
        return value

    def unregister(self, name: str) -> None:
        """Remove a value added by :meth:`register` (a test's); the built-in ones stay."""
        if name in self._built_in:
            raise ValueError(f"{name!r} is built in")
        self._values.pop(name, None)

    def get(self, name: str) -> T:
        try:
            return self._values[name]
        except KeyError:
            raise self.unknown(f"no {self.what} is named {name!r}; the registered ones: "
                               f"{', '.join(self._values)}") from None

    def names(self) -> list[str]:
        return list(self._values)

    def is_built_in(self, name: str) -> bool:
        return name in self._built_in

    def __contains__(self, name: object) -> bool:
        return name in self._values

    def __iter__(self) -> Iterator[T]:
        return iter(list(self._values.values()))
