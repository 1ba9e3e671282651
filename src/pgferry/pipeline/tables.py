"""Table metadata the pipeline jobs need: real name, columns with types, primary key, size.

Names are parsed by PostgreSQL itself (``parse_ident``, ``to_regclass``), so
``"My Schema"."Tbl"``, unquoted names and unicode all behave exactly as in SQL; a name
without a schema is ``public``'s (pgferry's sessions have no other schema on their path).
Everything here is plain values (strings, numbers, tuples), so it pickles for Spark
executors.
"""

from __future__ import annotations

from dataclasses import dataclass

import psycopg
from psycopg import sql

from pgferry.db import error_text
from pgferry.errors import TableError


@dataclass(frozen=True)
class Column:
    name: str
    type: str  # format_type() output, already quoted where needed
    generated: bool = False
    type_oid: int = 0  # pg_type oid of the column's type


@dataclass(frozen=True)
class TableInfo:
    """One table as the database sees it."""

    schema: str
    name: str
    columns: tuple[Column, ...]
    pkey: tuple[str, ...]
    pages: int  # heap size in blocks when resolved (a partitioned table: its partitions')
    est_rows: int  # planner estimate (reltuples); -1 when unknown
    display: str  # 'schema.table' as format('%I.%I') prints it
    partitioned: bool = False  # no heap of its own: no TID ranges

    @property
    def ident(self) -> sql.Identifier:
        return sql.Identifier(self.schema, self.name)

    @property
    def relation(self) -> sql.Composable:
        return relation(self.schema, self.name, self.partitioned)

    def column(self, name: str) -> Column:
        for col in self.columns:
            if col.name == name:
                return col
        raise KeyError(name)

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    def require_pkey(self) -> tuple[str, ...]:
        if not self.pkey:
            raise TableError(f"table {self.display} has no primary key")
        return self.pkey


def relation(schema: str, name: str, partitioned: bool) -> sql.Composable:
    """The table as a FROM/UPDATE/DELETE target: ``ONLY`` (never inheritance children) for a
    plain table, the whole table for a partitioned one, whose rows all live in partitions."""
    ident = sql.Identifier(schema, name)
    return ident if partitioned else sql.SQL("only {}").format(ident)


_TABLE_SQL = """
select c.oid, n.nspname, c.relname, c.relkind,
       -- a partitioned table's rows all live in its partitions: their heaps count
       (case when c.relkind = 'p'
             then (select coalesce(sum(pg_relation_size(t.relid)), 0)
                     from pg_partition_tree(c.oid) t)
             else pg_relation_size(c.oid)
        end / current_setting('block_size')::int)::bigint,
       c.reltuples::bigint, format('%%I.%%I', n.nspname, c.relname)
from pg_class c join pg_namespace n on n.oid = c.relnamespace
where c.oid = to_regclass(case when cardinality(parse_ident(%(name)s)) = 1
                                then 'public.' || %(name)s else %(name)s end)
"""

_COLUMNS_SQL = """
select a.attname, format_type(a.atttypid, a.atttypmod), a.attgenerated <> '',
       a.atttypid::bigint
from pg_attribute a
where a.attrelid = %s and a.attnum > 0 and not a.attisdropped
order by a.attnum
"""

_PKEY_SQL = """
select a.attname
from pg_index i
cross join lateral unnest(i.indkey) with ordinality as k(attnum, ord)
join pg_attribute a on a.attrelid = i.indrelid and a.attnum = k.attnum
where i.indrelid = %s and i.indisprimary
order by k.ord
"""


def resolve_table(conn: psycopg.Connection, name: str, where: str = "") -> TableInfo:
    """Look ``name`` up in the database of ``conn``; TableError when it is not a table."""
    label = f" on {where}" if where else ""
    try:
        row = conn.execute(_TABLE_SQL, {"name": name}).fetchone()
    except psycopg.Error as exc:
        if not conn.autocommit:
            conn.rollback()
        raise TableError(f"invalid table name {name!r}{label}: {error_text(exc)}") from None
    if row is None:
        raise TableError(f"unknown table {name}{label}")
    oid, schema, relname, relkind, pages, reltuples, display = row
    if relkind not in ("r", "p"):
        raise TableError(f"{name}{label} is not a table")
    columns = tuple(Column(*row) for row in conn.execute(_COLUMNS_SQL, (oid,)).fetchall())
    pkey = tuple(r[0] for r in conn.execute(_PKEY_SQL, (oid,)).fetchall())
    return TableInfo(
        schema, relname, columns, pkey, int(pages), int(reltuples), display, relkind == "p"
    )


def common_columns(src: TableInfo, dst: TableInfo) -> tuple[str, ...]:
    """Destination columns that the source also has, in destination order.

    Generated columns are left out: the destination computes them itself.
    """
    have = set(src.column_names)
    return tuple(c.name for c in dst.columns if c.name in have and not c.generated)


def require_same_columns(src: TableInfo, dst: TableInfo) -> None:
    """For compare/repair: both sides must have the same column names and primary key."""
    src_cols, dst_cols = set(src.column_names), set(dst.column_names)
    if src_cols != dst_cols:
        only_src = ", ".join(sorted(src_cols - dst_cols)) or "-"
        only_dst = ", ".join(sorted(dst_cols - src_cols)) or "-"
        raise TableError(
            f"{src.display} and {dst.display} have different columns "
            f"(only in source: {only_src}; only in destination: {only_dst})"
        )
    src.require_pkey()
    dst.require_pkey()
    if src.pkey != dst.pkey:
        raise TableError(
            f"primary keys differ: {src.display} ({', '.join(src.pkey)}) vs "
            f"{dst.display} ({', '.join(dst.pkey)})"
        )
