"""Where each key of an Iceberg lake table lives: data file and row position.

Merge-on-read deletes a changed row by its position in its data file, so a batch must
find the positions of its keys.  Reading the table's files for each batch would make a
commit's cost grow with the table; this index makes it grow with the batch.  Per data
file it keeps the file's keys sorted (numpy) beside their row positions, and which of
those rows a delete file has removed: a batch's keys are found by binary search in each
file, O(B log F) per file, without reading any file.

Data files and delete files never change once written, so what is read of one file stays
true.  The index records the snapshot it reflects: after its own commit it is brought
up to date from what the commit wrote (the new rows' keys are in memory); when the
table's current snapshot is another (the worker started, another process compacted or
repaired the table) it is rebuilt from that snapshot: the key columns of the data files
it has not read yet and every delete file of the snapshot (small: compaction folds them
into the data).  Kept per process; nothing to keep consistent across a crash.

Keys: one integer, float, date or timestamp column is kept as a numpy array of that
type; other keys (text, numeric, several columns) as Python objects (tuples for several
columns), which cost more memory per row.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # Arrow: the rows come from the caller
    import pyarrow as pa

_NATIVE = "iufMm"  # numpy kinds searched natively: ints, unsigned, floats, datetimes


def key_values(rows: pa.Table, key: Sequence[str]) -> np.ndarray[Any, Any]:
    """The key of each row of ``rows`` (Arrow) as one comparable numpy value per row."""
    if len(key) == 1:
        column = rows.column(key[0])
        values = column.to_numpy(zero_copy_only=False) if len(column) else np.array([])
        if values.dtype.kind in _NATIVE:
            return values
        return _objects(column.to_pylist())
    columns = [rows.column(k).to_pylist() for k in key]
    return _objects(list(zip(*columns, strict=True)))


def _objects(values: list[Any]) -> np.ndarray[Any, Any]:
    out = np.empty(len(values), dtype=object)
    out[:] = values  # tuples stay tuples (np.array would make them a second dimension)
    return out


@dataclass
class FileKeys:
    """One data file's keys, sorted, their row positions, and its rows still live."""

    keys: np.ndarray  # sorted
    rows: np.ndarray  # rows[i]: the position in the file of keys[i]
    live: np.ndarray  # live[pos]: False once a delete file removed row pos

    @classmethod
    def of(cls, values: np.ndarray) -> FileKeys:
        order = np.argsort(values, kind="stable")
        return cls(values[order], order.astype(np.int64), np.ones(len(values), dtype=bool))

    def find(self, wanted: np.ndarray) -> np.ndarray:
        """The live positions of the rows whose key is one of ``wanted`` (sorted)."""
        if not len(self.keys) or not len(wanted):
            return np.empty(0, dtype=np.int64)
        lo = np.searchsorted(self.keys, wanted, side="left")
        hi = np.searchsorted(self.keys, wanted, side="right")
        counts = hi - lo
        hits = counts > 0
        if not hits.any():
            return np.empty(0, dtype=np.int64)
        lo, counts = lo[hits], counts[hits]
        # Every index in [lo, hi) of each hit: a key held several times is found each time.
        starts = np.repeat(lo - np.concatenate(([0], np.cumsum(counts)[:-1])), counts)
        found = self.rows[starts + np.arange(int(counts.sum()))]
        return np.unique(found[self.live[found]])


@dataclass
class KeyIndex:
    """A lake table's data files as of one snapshot (``snapshot``: its id as text)."""

    key: tuple[str, ...]
    snapshot: str | None = None
    files: dict[str, FileKeys] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def find(self, wanted: np.ndarray) -> dict[str, np.ndarray]:
        """Data file path -> the live positions holding one of the ``wanted`` keys."""
        if not len(wanted):
            return {}
        wanted = np.sort(wanted, kind="stable")
        found = {}
        for path, keys in self.files.items():
            at = keys.find(wanted)
            if len(at):
                found[path] = at
        return found

    def deleted(self, positions: Mapping[str, Iterable[int]]) -> None:
        for path, at in positions.items():
            keys = self.files.get(path)
            if keys is not None:
                keys.live[np.asarray(list(at) if not isinstance(at, np.ndarray) else at,
                                     dtype=np.int64)] = False  # fmt: skip

    def added(self, files: Sequence[tuple[str, int]], values: np.ndarray) -> None:
        """Data files written with ``values`` (the keys of their rows, in order): each
        (path, row count) holds the next rows."""
        start = 0
        for path, count in files:
            self.files[path] = FileKeys.of(values[start : start + count])
            start += count

    def rebuild(self, snapshot: str | None, data: Mapping[str, Any],
                read_keys: Callable[[Any], np.ndarray[Any, Any]],
                deletes: Mapping[str, Sequence[int]]) -> None:  # fmt: skip
        """The index of another snapshot: ``data`` its data files (path -> what
        ``read_keys`` needs to read one), ``deletes`` the positions its delete files
        remove (path -> positions).  Files already read keep their keys."""
        files = {}
        for path, handle in data.items():
            known = self.files.get(path)
            if known is None:
                known = FileKeys.of(read_keys(handle))
            else:
                known.live[:] = True
            files[path] = known
        self.files = files
        self.deleted(deletes)
        self.snapshot = snapshot


_INDEXES: dict[str, KeyIndex] = {}
_GUARD = threading.Lock()


def of_table(location: str, key: Sequence[str]) -> KeyIndex:
    """The process's index of the table at ``location`` (a new, empty one for a table
    seen first or keyed otherwise)."""
    with _GUARD:
        index = _INDEXES.get(location)
        if index is None or index.key != tuple(key):
            index = _INDEXES[location] = KeyIndex(tuple(key))
        return index
