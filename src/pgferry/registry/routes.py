"""Where each replicated table's events go on this node, and how they are filtered.

A :class:`Route` joins one row of ``ferry.table_info`` (a :class:`TableEntry`, read by
:func:`pgferry.registry.entries.list_tables`) with what the local catalog says of its
destination table (schema, name, primary key, columns), so replay can compose every
statement with :mod:`psycopg.sql` without guessing at quoting.  The table's capture spec
(copied from the provider at add-table) gives the key events are collapsed and applied by,
the columns replay must leave alone and whether the table has no key at all.  A view of
the registry: replay, compare, repair and the lake commands read it, built by keyword from
the entry's named row, so a column added to the registry's read cannot shift a field.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import psycopg
from psycopg import sql

from pgferry import expressions
from pgferry.errors import TableError
from pgferry.handlers import Handler, HandlerError, Target
from pgferry.handlers import registry as handler_registry
from pgferry.handlers.api import HandlerContext
from pgferry.registry.capture_spec import CaptureSpec
from pgferry.registry.entries import TableEntry, list_tables

# Table states whose events the main stream applies (NULL / in-copy tables are being
# copied, catching-up ones replay their copy group's own batches: see apply/handover.py).
APPLY_STATES = ("ok",)


@dataclass(frozen=True, kw_only=True)
class Route:
    table_name: str  # queue-visible source name, as in ev_extra1
    dest_schema: str
    dest_name: str
    pk: tuple[str, ...]
    columns: tuple[str, ...]  # insertable columns of the destination
    types: tuple[str, ...]  # their types as SQL text, valid in any session (see table_shape)
    merge_state: str | None
    copy_condition: str | None
    copy_snapshot: str | None
    skip_truncate: bool
    dest_fq: str  # the destination as format('%I.%I') writes it
    builtin_types: bool = False  # every column type is a pg_catalog one (binary COPY safe)
    handler: Handler = field(
        default_factory=lambda: handler_registry.build_default(HandlerContext())
    )
    # The handler's row filter, when it names key columns only: events failing it skip.
    key_filter: str | None = None
    # The handler's row filter otherwise: an image failing it becomes a delete.
    row_filter: str | None = None
    ignored: tuple[str, ...] = ()  # captured without these: replay never writes them
    keyless: bool = False  # no key: every column identifies a row (pk is empty)
    key_unique: bool = True  # the destination has a unique index on pk (ON CONFLICT works)
    when: str | None = None  # the capture's when=: the source's rows outside it never come
    # The source's name on the provider now, when a script later in the batch renamed it
    # (its row type decodes the images queued under the old name).
    source_type: str | None = None

    @property
    def dest(self) -> sql.Composable:
        return sql.Identifier(self.dest_schema, self.dest_name)

    @property
    def image_condition(self) -> str | None:
        """What each row image must pass, else it turns into a delete of its key."""
        return expressions.conjunction(self.copy_condition, self.row_filter)

    @property
    def source_filter(self) -> str | None:
        """Every row filter of the table: what the copy and compare take of the source
        (the capture's ``when=`` included)."""
        return expressions.conjunction(
            self.copy_condition, self.row_filter, self.key_filter, self.when
        )

    def target(self, columns: tuple[str, ...]) -> Target:
        """The handler's view of the table, with the columns staged."""
        return Target(
            self.table_name, self.dest_schema, self.dest_name, self.dest_fq, self.pk, columns,
            self.keyless, self.key_unique,
        )  # fmt: skip

    @property
    def dest_text(self) -> str:
        return f"{self.dest_schema}.{self.dest_name}"

    @property
    def applies(self) -> bool:
        return self.merge_state in APPLY_STATES and self.handler.replays


def resolve_table(conn: psycopg.Connection, name: str) -> tuple[int, str, str, str]:
    """(oid, schema, name, quoted name) of a 'schema.table' text as stored in the registry."""
    row = conn.execute(
        """
        select c.oid::int, n.nspname, c.relname, format('%%I.%%I', n.nspname, c.relname)
          from pg_class c join pg_namespace n on n.oid = c.relnamespace
         where c.oid = to_regclass(%s)
        """,
        (name,),
    ).fetchone()
    if row is None:
        raise TableError(f"Table not found: {name}")
    return row[0], row[1], row[2], row[3]


def table_shape(
    conn: psycopg.Connection, oid: int, label: str
) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...], tuple[bool]]:
    """(primary key columns, insertable columns, their types, (all built-in,)) of ``oid``.

    Types outside pg_catalog are schema-qualified whatever the search_path, because replay
    writes them into queries that run on the provider.
    """
    pk = conn.execute(
        """
        select array_agg(a.attname order by k.ord)
          from pg_index i
          cross join lateral unnest(i.indkey) with ordinality as k(attnum, ord)
          join pg_attribute a on a.attrelid = i.indrelid and a.attnum = k.attnum
         where i.indrelid = %s and i.indisprimary
        """,
        (oid,),
    ).fetchone()
    cols = conn.execute(
        """
        select array_agg(a.attname order by a.attnum),
               array_agg(case when t.typnamespace = 'pg_catalog'::regnamespace
                              then format_type(a.atttypid, a.atttypmod)
                              else format('%%I.%%I', n.nspname, t.typname) end
                         order by a.attnum),
               coalesce(bool_and(t.typnamespace = 'pg_catalog'::regnamespace), false)
          from pg_attribute a
          join pg_type t on t.oid = a.atttypid
          join pg_namespace n on n.oid = t.typnamespace
         where a.attrelid = %s and a.attnum > 0 and not a.attisdropped and a.attgenerated = ''
        """,
        (oid,),
    ).fetchone()
    assert pk is not None and cols is not None  # aggregates without GROUP BY: one row
    return tuple(pk[0] or ()), tuple(cols[0] or ()), tuple(cols[1] or ()), (bool(cols[2]),)


def unique_on(conn: psycopg.Connection, oid: int, columns: tuple[str, ...]) -> bool:
    """Whether table ``oid`` has a unique index ON CONFLICT can use for exactly ``columns``
    (in any order): no predicate, no expression, not deferred."""
    row = conn.execute(
        """
        select exists (
            select 1 from pg_index i
             where i.indrelid = %s and i.indisunique and i.indisvalid and i.indimmediate
               and i.indpred is null and i.indexprs is null and i.indnkeyatts = %s
               and (select array_agg(a.attname::text order by a.attname)
                      from unnest(i.indkey[0:i.indnkeyatts - 1]) as k(attnum)
                      join pg_attribute a on a.attrelid = i.indrelid and a.attnum = k.attnum)
                   = %s::text[])
        """,
        (oid, len(columns), sorted(columns)),
    ).fetchone()
    return bool(row and row[0])


def route_key(
    conn: psycopg.Connection,
    oid: int,
    label: str,
    pk: tuple[str, ...],
    columns: tuple[str, ...],
    spec: CaptureSpec | None,
) -> tuple[tuple[str, ...], bool, bool]:
    """(key, keyless, key unique here) of a destination: the key of its capture spec, or
    its primary key for a registry entry from before capture specs."""
    if spec is None or spec.key is None:
        if not pk:
            raise TableError(f"Primary key missing on table: {label}")
        return pk, False, True
    if not spec.key:
        return (), True, False
    missing = [c for c in spec.key if c not in columns]
    if missing:
        raise TableError(f"Key column {missing[0]} missing on table: {label}")
    return spec.key, False, spec.key == pk or unique_on(conn, oid, spec.key)


def load_routes(
    conn: psycopg.Connection, queue_name: str, handlers: HandlerContext
) -> dict[str, Route]:
    """Every local table of the queue on this node, keyed by its queue-visible name, its
    handler built with ``handlers`` (the worker's or command's context)."""
    return {e.table_name: route_of(conn, e, handlers) for e in list_tables(conn, queue_name)}


def route_of(conn: psycopg.Connection, entry: TableEntry, handlers: HandlerContext) -> Route:
    """The route of one registry entry, its destination looked up in the local catalog."""
    try:
        handler = handler_registry.from_attrs(entry.table_attrs or {}, handlers)
    except HandlerError as exc:
        raise TableError(f"table {entry.table_name}: {exc}") from None
    dest = entry.dest_name
    if not handler.needs_table:  # no local table to look at
        schema, name = split_name(dest)
        return Route(
            table_name=entry.table_name, dest_schema=schema, dest_name=name, pk=(),
            columns=(), types=(), merge_state=entry.merge_state, copy_condition=None,
            copy_snapshot=entry.copy_snapshot, skip_truncate=entry.skip_truncate,
            dest_fq=dest, handler=handler,
        )  # fmt: skip
    oid, schema, name, fq = resolve_table(conn, dest)
    pk, columns, types, (builtin,) = table_shape(conn, oid, dest)
    spec = CaptureSpec.from_attrs(entry.table_attrs or {})
    pk, keyless, unique = route_key(conn, oid, dest, pk, columns, spec)
    key_filter, row_filter = _split_filter(handler, pk)
    return Route(
        table_name=entry.table_name,
        dest_schema=schema,
        dest_name=name,
        pk=pk,
        columns=columns,
        types=types,
        merge_state=entry.merge_state,
        copy_condition=entry.copy_condition or None,
        copy_snapshot=entry.copy_snapshot,
        skip_truncate=entry.skip_truncate,
        dest_fq=fq,
        builtin_types=builtin,
        handler=handler,
        key_filter=key_filter,
        row_filter=row_filter,
        ignored=spec.ignore if spec else (),
        keyless=keyless,
        key_unique=unique,
        when=spec.when if spec else None,
    )


def _split_filter(handler: Handler, pk: tuple[str, ...]) -> tuple[str | None, str | None]:
    """(key filter, row filter): the handler's row filter goes to the first when every
    column it names is a key column (see :attr:`Route.key_filter`)."""
    text = handler.row_filter()
    if not text:
        return None, None
    names = expressions.column_names(text, f"row filter of handler {handler.name}")
    if names is not None and names <= set(pk):
        return text, None
    return None, text


def split_name(name: str) -> tuple[str, str]:
    """Split a 'schema.table' name in ``format('%I.%I')`` form into its two identifiers.

    Unqualified names are taken as ``public``.  Quoted parts may hold dots and doubled quotes.
    """
    parts: list[str] = []
    buf: list[str] = []
    i, quoted = 0, False
    while i < len(name):
        ch = name[i]
        if quoted:
            if ch == '"':
                if i + 1 < len(name) and name[i + 1] == '"':
                    buf.append('"')
                    i += 1
                else:
                    quoted = False
            else:
                buf.append(ch)
        elif ch == '"':
            quoted = True
        elif ch == ".":
            parts.append("".join(buf))
            buf = []
        else:
            buf.append(ch.lower())
        i += 1
    parts.append("".join(buf))
    if quoted or len(parts) > 2 or not all(parts):
        raise TableError(f"Invalid table name: {name}")
    return (parts[0], parts[1]) if len(parts) == 2 else ("public", parts[0])


# What registry_signature reads (parameter: the queue name).
SIGNATURE_SQL = """
        select md5(coalesce(string_agg(concat_ws('|', t.table_name, t.merge_state,
                   t.dest_table, t.copy_condition, t.copy_snapshot::text, t.skip_truncate,
                   t.table_attrs::text,
                   (select count(*) from pg_attribute a
                     where a.attrelid = to_regclass(coalesce(t.dest_table, t.table_name))
                       and a.attnum > 0 and not a.attisdropped)),
                   ',' order by t.table_name), ''))
          from ferry.table_info t
         where t.queue_name = %s and t.local
        """


def registry_signature(conn: psycopg.Connection, queue_name: str) -> str:
    """Changes whenever the local registry or a destination's columns change (one query)."""
    row = conn.execute(SIGNATURE_SQL, (queue_name,)).fetchone()
    return row[0] if row else ""
