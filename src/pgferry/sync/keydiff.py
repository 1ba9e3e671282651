"""``pgferry diff``'s report: the differing keys, a few rows, a count, the same on every run.

Compare finds the key ranges whose checksums differ (ranges drawn from a random sample of
keys, so they change from run to run); :func:`key_differences` reads just those ranges with
repair's machinery (:func:`~.repair.find_differences`) and keeps the exact keys
(:func:`key_report`; ``diff --repair`` writes its fix from the same rows).  They are
reported in key order with reladiff's marks:

* ``-`` the key is only in the source (missing at the destination),
* ``+`` the key is only in the destination (extra there),
* ``!`` the key is on both sides with other values,

followed, for the first ``max_rows`` of them, by the rows themselves (``src:`` / ``dst:``,
``column=value`` as PostgreSQL prints values, strings quoted when they need it), and a
summary line.  :func:`as_json` is the same report as one JSON object.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from pgferry.pipeline.keyranges import KeyRange
from pgferry.sync.buckets import CompareTask
from pgferry.sync.repair import Differences, find_differences
from pgferry.sync.repair_local import ordered_columns

# repair's kinds as seen from the destination, and the mark and name each is reported with
MARKS = {"insert": "-", "delete": "+", "update": "!"}
NAMES = {"-": "only_in_source", "+": "only_in_destination", "!": "changed"}
_PLAIN = re.compile(r"[\w.:+-]+")


@dataclass(frozen=True)
class KeyDifference:
    mark: str  # "-", "+" or "!"
    key: tuple[str, ...]  # key values as PostgreSQL prints them
    src: dict[str, str | None] | None  # the source row (None when only in the destination)
    dst: dict[str, str | None] | None  # the destination row (None when only in the source)


@dataclass
class KeyReport:
    dest_table: str
    key_columns: tuple[str, ...]
    differences: list[KeyDifference] = field(default_factory=list)
    max_rows: int = 10

    def counts(self) -> dict[str, int]:
        found = {name: 0 for name in NAMES.values()}
        for d in self.differences:
            found[NAMES[d.mark]] += 1
        return found

    def summary(self) -> str:
        c = self.counts()
        return (
            f"{self.dest_table}: {len(self.differences)} differing keys:"
            f" {c['only_in_source']} only in source (-), {c['only_in_destination']} only in"
            f" destination (+), {c['changed']} changed (!)"
        )

    def lines(self) -> list[str]:
        out = []
        for no, d in enumerate(self.differences):
            out.append(f"{d.mark} {self._key_text(d.key)}")
            if no < self.max_rows:
                for side, row in (("src", d.src), ("dst", d.dst)):
                    if row is not None:
                        out.append(f"    {side}: {_row_text(row)}")
        shown = min(self.max_rows, len(self.differences))
        if shown < len(self.differences):
            out.append(f"(rows shown for the first {shown}; --max-rows=N for more)")
        out.append(self.summary())
        return out

    def as_json(self) -> dict[str, Any]:
        return {
            "dest_table": self.dest_table,
            "key": list(self.key_columns),
            "matches": not self.differences,
            "counts": self.counts(),
            "differences": [
                {
                    "mark": d.mark,
                    "kind": NAMES[d.mark],
                    "key": dict(zip(self.key_columns, d.key, strict=True)),
                    **({"src": d.src, "dst": d.dst} if no < self.max_rows else {}),
                }
                for no, d in enumerate(self.differences)
            ],
        }

    def _key_text(self, key: tuple[str, ...]) -> str:
        return ", ".join(
            f"{c}={_value_text(v)}" for c, v in zip(self.key_columns, key, strict=True)
        )


def key_differences(
    spark: Callable[[], Any],
    src_connstr: str,
    dst_connstr: str,
    task: CompareTask,
    ranges: Sequence[KeyRange],
    max_rows: int,
    threads: int = 0,
) -> KeyReport:
    """The differing keys of one table pair inside ``ranges`` (compare's differing ranges);
    ``threads`` as for repair (compare's :func:`~.compare.driver_threads`)."""
    found = find_differences(
        spark, src_connstr, dst_connstr, [task], ranges={task.dest_table: ranges}, threads=threads
    )
    return key_report(task, found, max_rows)


def key_report(task: CompareTask, found: Differences, max_rows: int) -> KeyReport:
    """The report of :func:`~.repair.find_differences`' answer for one task (``found``)."""
    prepared, (diffs,) = found
    plan = prepared.plans[0]
    names = ordered_columns(plan)
    nkey = len(plan.key.names)
    keys = []
    for _join_key, kind, src, dst in diffs:
        key_source = src if kind != "delete" else dst
        keys.append(
            KeyDifference(
                MARKS[kind],
                cast("tuple[str, ...]", tuple(key_source[:nkey])),  # a key is never NULL
                None if kind == "delete" else dict(zip(names, src, strict=False)),
                None if kind == "insert" else dict(zip(names, dst, strict=False)),
            )
        )
    keys.sort(key=lambda d: tuple(map(_sort_key, d.key)))
    return KeyReport(task.dest_table, tuple(plan.key.names), keys, max_rows)


def _sort_key(value: str) -> tuple[Any, ...]:
    """Numbers in numeric order, anything else in text order (stable for any key type)."""
    try:
        return (0, float(value), value)
    except ValueError:
        return (1, 0.0, value)


def _value_text(value: str | None) -> str:
    if value is None:
        return "NULL"
    if _PLAIN.fullmatch(value):
        return value
    return "'" + value.replace("'", "''") + "'"


def _row_text(row: dict[str, str | None]) -> str:
    return ", ".join(f"{c}={_value_text(v)}" for c, v in row.items())
