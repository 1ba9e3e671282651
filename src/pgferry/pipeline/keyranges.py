"""Primary-key ranges: boundaries sampled from the source, predicates usable on both sides.

Key values travel as their text form and are cast back to the column type inside SQL, so
any key type with a btree order works, and one set of boundaries applies verbatim to the
source and the destination.  A range is ``[lower, upper)``; ``None`` means unbounded.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import psycopg
from psycopg import sql

from pgferry.pipeline.tables import TableInfo

Key = tuple[str, ...]

# Aim for buckets this small, so that repair reads little more than the differing rows.
BUCKET_ROWS = 500
MAX_BUCKETS = 20_000
# Sample about this many keys per bucket boundary when the table is big.
SAMPLE_PER_BUCKET = 10
# Below this many rows the whole key column is read instead of a sample.
EXACT_SAMPLE_ROWS = 20_000


@dataclass(frozen=True)
class KeyRange:
    lower: Key | None  # inclusive
    upper: Key | None  # exclusive

    def describe(self, pkey: Sequence[str]) -> str:
        cols = pkey[0] if len(pkey) == 1 else "(" + ", ".join(pkey) + ")"

        def show(key: Key) -> str:
            return key[0] if len(key) == 1 else "(" + ", ".join(key) + ")"

        parts = []
        if self.lower is not None:
            parts.append(f"{cols} >= {show(self.lower)}")
        if self.upper is not None:
            parts.append(f"{cols} < {show(self.upper)}")
        return " and ".join(parts) or "all rows"


@dataclass(frozen=True)
class KeySpec:
    """Key columns with their types: enough to build predicates on either side."""

    names: tuple[str, ...]
    types: tuple[str, ...]

    @classmethod
    def of(cls, table: TableInfo) -> KeySpec:
        names = table.require_pkey()
        return cls(names, tuple(table.column(n).type for n in names))

    def columns(self) -> sql.Composable:
        idents = [sql.Identifier(n) for n in self.names]
        if len(idents) == 1:
            return idents[0]
        return sql.SQL("({})").format(sql.SQL(", ").join(idents))

    def value(self, key: Key) -> sql.Composable:
        casts = [
            sql.SQL("cast({} as {})").format(sql.Literal(v), sql.SQL(t))
            for v, t in zip(key, self.types, strict=True)
        ]
        if len(casts) == 1:
            return casts[0]
        return sql.SQL("row({})").format(sql.SQL(", ").join(casts))

    def predicate(self, rng: KeyRange) -> sql.Composable:
        parts: list[sql.Composable] = []
        if rng.lower is not None:
            parts.append(sql.SQL("{} >= {}").format(self.columns(), self.value(rng.lower)))
        if rng.upper is not None:
            parts.append(sql.SQL("{} < {}").format(self.columns(), self.value(rng.upper)))
        return sql.SQL(" and ").join(parts) if parts else sql.SQL("true")

    def bucket(self, thresholds: Sequence[Key]) -> sql.Composable:
        """0-based bucket of a row among sorted ``thresholds`` (width_bucket on any type)."""
        if not thresholds:
            return sql.SQL("0")
        values = sql.SQL(", ").join(self.value(k) for k in thresholds)
        operand = self.columns()
        if len(self.names) > 1:
            operand = sql.SQL("row{}").format(operand)
        return sql.SQL("width_bucket({}, array[{}])").format(operand, values)

    def text_columns(self) -> sql.Composable:
        return sql.SQL(", ").join(sql.SQL("{}::text").format(sql.Identifier(n)) for n in self.names)


def row_estimate(conn: psycopg.Connection, table: TableInfo) -> int:
    if table.est_rows >= 0 and not (table.est_rows == 0 and table.pages > 0):
        return table.est_rows
    row = conn.execute(sql.SQL("select count(*) from {}").format(table.relation)).fetchone()
    return int(row[0]) if row else 0


def sample_boundaries(
    conn: psycopg.Connection, table: TableInfo, spec: KeySpec, bucket_rows: int | None = None
) -> list[Key]:
    """Sorted, distinct key boundaries splitting ``table`` into buckets of ~``bucket_rows``
    rows (default BUCKET_ROWS, read at the call, so that a changed value applies)."""
    rows = row_estimate(conn, table)
    size = BUCKET_ROWS if bucket_rows is None else bucket_rows
    buckets = min(MAX_BUCKETS, rows // max(1, size))
    if buckets <= 1:
        return []
    # Qualified: a bare name in ORDER BY would mean the text output column, i.e. text order.
    order = sql.SQL(", ").join(sql.Identifier("_t", n) for n in spec.names)
    source: sql.Composable = sql.SQL("{} as _t").format(table.relation)
    if rows > EXACT_SAMPLE_ROWS:
        percent = min(100.0, 100.0 * buckets * SAMPLE_PER_BUCKET / rows)
        # Row-level sampling: page sampling clusters on tables stored in key order.
        source = sql.SQL("{} tablesample bernoulli ({})").format(source, sql.Literal(percent))
    query = sql.SQL("select {} from {} order by {}").format(spec.text_columns(), source, order)
    keys = [tuple(r) for r in conn.execute(query).fetchall()]
    if len(keys) < 2:
        return []
    step = len(keys) / buckets
    picked: list[Key] = []
    for i in range(1, buckets):
        key = keys[min(len(keys) - 1, int(i * step))]
        if not picked or picked[-1] != key:
            picked.append(key)
    return picked


def bucket_range(boundaries: Sequence[Key], bucket: int) -> KeyRange:
    """Key range of global bucket ``bucket`` (0 .. len(boundaries))."""
    lower = boundaries[bucket - 1] if bucket > 0 else None
    upper = boundaries[bucket] if bucket < len(boundaries) else None
    return KeyRange(lower, upper)


def merge_buckets(boundaries: Sequence[Key], buckets: Sequence[int]) -> list[KeyRange]:
    """Adjacent buckets merged into as few ranges as possible."""
    ranges: list[KeyRange] = []
    start = prev = None
    for b in sorted(set(buckets)):
        if start is None:
            start = prev = b
        elif b == prev + 1:  # type: ignore[operator]
            prev = b
        else:
            ranges.append(
                KeyRange(
                    bucket_range(boundaries, start).lower, bucket_range(boundaries, prev).upper
                )
            )  # type: ignore[arg-type]
            start = prev = b
    if start is not None:
        ranges.append(
            KeyRange(bucket_range(boundaries, start).lower, bucket_range(boundaries, prev).upper)
        )  # type: ignore[arg-type]
    return ranges
