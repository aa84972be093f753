"""FrozenMap: the read-only, hashable str -> str mapping a spec's labels and env are."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping


class FrozenMap(Mapping[str, str]):
    """A read-only, hashable str -> str mapping, iterated in sorted key order."""

    __slots__ = ("_data", "_hash")

    def __init__(self, data: Mapping[str, str] | Iterable[tuple[str, str]] = ()) -> None:
        items = data.items() if isinstance(data, Mapping) else data
        self._data: dict[str, str] = dict(sorted(items))
        self._hash: int | None = None

    def __getitem__(self, key: str) -> str:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(tuple(self._data.items()))
        return self._hash

    def __eq__(self, other: object) -> bool:
        if isinstance(other, FrozenMap):
            return self._data == other._data
        if isinstance(other, Mapping):
            return self._data == dict(other.items())
        return NotImplemented

    def __repr__(self) -> str:
        return f"FrozenMap({self._data!r})"

    def __reduce__(self) -> tuple[object, tuple[dict[str, str]]]:
        return (FrozenMap, (self._data,))


EMPTY_MAP = FrozenMap()  # shared by every spec without labels or env
