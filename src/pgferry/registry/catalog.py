"""What the local PostgreSQL catalog says about tables and sequences.

Names come back in the raw (schema, name) form for matching, together with the server's
own ``format('%I.%I')`` spelling that the registry stores.
"""

from __future__ import annotations

from dataclasses import dataclass

import psycopg
from psycopg import sql
from psycopg.rows import class_row

from pgferry.errors import TableError

# Schemas that never hold replicated objects.
SYSTEM_SCHEMAS = ("pg_catalog", "information_schema", "ferry", "ferry_queue", "ferry_node")


@dataclass(frozen=True)
class RelName:
    schema: str
    name: str
    fq: str  # format('%I.%I', schema, name)

    @property
    def key(self) -> tuple[str, str]:
        return (self.schema, self.name)


# A relation as RelName reads it (the WHERE clause follows).
_RELATION = """
    select n.nspname as schema, c.relname as name,
           format('%%I.%%I', n.nspname, c.relname) as fq
      from pg_catalog.pg_class c
      join pg_catalog.pg_namespace n on n.oid = c.relnamespace
"""


def list_relations(conn: psycopg.Connection, kinds: str) -> list[RelName]:
    """Tables (``kinds='r'``) or sequences (``'S'``) outside system schemas."""
    relkinds = ["r", "p"] if kinds == "r" else ["S"]
    with conn.cursor(row_factory=class_row(RelName)) as cur:
        cur.execute(
            _RELATION
            + """
             where c.relkind = any(%s) and not c.relispartition
               and n.nspname <> all(%s)
               and n.nspname not like 'pg\\_toast%%' and n.nspname not like 'pg\\_temp%%'
             order by 1, 2
            """,
            (relkinds, list(SYSTEM_SCHEMAS)),
        )
        return cur.fetchall()


def find_relation(conn: psycopg.Connection, schema: str, name: str, kinds: str) -> RelName | None:
    relkinds = ["r", "p"] if kinds == "r" else ["S"]
    with conn.cursor(row_factory=class_row(RelName)) as cur:
        cur.execute(
            _RELATION + " where n.nspname = %s and c.relname = %s and c.relkind = any(%s)",
            (schema, name, relkinds),
        )
        return cur.fetchone()


def fq_name(conn: psycopg.Connection, schema: str, name: str) -> str:
    row = conn.execute("select format('%%I.%%I', %s::text, %s::text)", (schema, name)).fetchone()
    assert row is not None
    quoted: str = row[0]
    return quoted


def ident(schema: str, name: str) -> sql.Composed:
    return sql.SQL("{}.{}").format(sql.Identifier(schema), sql.Identifier(name))


def primary_key(conn: psycopg.Connection, fq: str) -> list[str]:
    """Primary-key column names of ``fq`` in key order (empty when there is none).

    A key that a copy into ``fq`` dropped for its load counts: the copy builds it again when
    it ends, and until then ``ferry_copy.saved_index`` holds it (pipeline/copy/keys.py)."""
    rows = conn.execute(
        """
        select a.attname
          from pg_catalog.pg_index i
          cross join lateral unnest(i.indkey) with ordinality as k(attnum, ord)
          join pg_catalog.pg_attribute a on a.attrelid = i.indrelid and a.attnum = k.attnum
         where i.indrelid = %s::regclass and i.indisprimary
         order by k.ord
        """,
        (fq,),
    ).fetchall()
    if rows:
        return [r[0] for r in rows]
    return _key_dropped_for_a_copy(conn, fq)


def _key_dropped_for_a_copy(conn: psycopg.Connection, fq: str) -> list[str]:
    kept = conn.execute(
        "select 1 from pg_catalog.pg_attribute where attname = 'key_columns'"
        " and attrelid = to_regclass('ferry_copy.saved_index')"
    ).fetchone()
    if kept is None:  # no copy into this database recorded keys
        return []
    row = conn.execute(
        """
        select s.key_columns
          from ferry_copy.saved_index s, pg_catalog.pg_class c
          join pg_catalog.pg_namespace n on n.oid = c.relnamespace
         where c.oid = %s::regclass and s.constraint_type = 'p'
           and s.dest_table = format('%%I.%%I', n.nspname, c.relname)
        """,
        (fq,),
    ).fetchone()
    return list(row[0]) if row else []


def unique_key(conn: psycopg.Connection, fq: str) -> tuple[str, list[str]] | None:
    """(index name, columns) of a unique index of ``fq`` that can stand in for a primary
    key: plain columns only, all NOT NULL, no predicate, valid and not deferred; the one
    with the fewest columns (then by name).  None when there is none."""
    row = conn.execute(
        """
        select ic.relname, array_agg(a.attname::text order by k.ord)
          from pg_catalog.pg_index i
          join pg_catalog.pg_class ic on ic.oid = i.indexrelid
          cross join lateral unnest(i.indkey[0:i.indnkeyatts - 1]) with ordinality as k(attnum, ord)
          left join pg_catalog.pg_attribute a
                 on a.attrelid = i.indrelid and a.attnum = k.attnum and k.attnum > 0
         where i.indrelid = %s::regclass and i.indisunique and i.indisvalid
           and i.indimmediate and i.indpred is null and i.indexprs is null
         group by ic.relname, i.indnkeyatts
        having bool_and(coalesce(a.attnotnull, false))
         order by i.indnkeyatts, ic.relname
         limit 1
        """,
        (fq,),
    ).fetchone()
    return None if row is None else (row[0], list(row[1]))


@dataclass(frozen=True)
class Column:
    name: str
    type_sql: str  # format_type() output: valid SQL type text
    not_null: bool


def columns(conn: psycopg.Connection, fq: str) -> list[Column]:
    with conn.cursor(row_factory=class_row(Column)) as cur:
        cur.execute(
            """
            select attname as name, format_type(atttypid, atttypmod) as type_sql,
                   attnotnull as not_null
              from pg_catalog.pg_attribute
             where attrelid = %s::regclass and attnum > 0 and not attisdropped
             order by attnum
            """,
            (fq,),
        )
        return cur.fetchall()


def column_defaults(conn: psycopg.Connection, fq: str) -> tuple[dict[str, str], list[str]]:
    """The column defaults of ``fq`` that can be made on another database, and the columns
    whose default is left out: one that uses a sequence (``nextval`` of a serial, say: the
    sequence is the source's) or an identity column.  Generated columns are neither."""
    rows = conn.execute(
        """
        select a.attname, pg_get_expr(d.adbin, d.adrelid), a.attidentity <> ''
               or exists (select 1 from pg_catalog.pg_depend dep
                            join pg_catalog.pg_class s on s.oid = dep.refobjid
                           where dep.classid = 'pg_catalog.pg_attrdef'::regclass
                             and dep.objid = d.oid
                             and dep.refclassid = 'pg_catalog.pg_class'::regclass
                             and s.relkind = 'S')
          from pg_catalog.pg_attribute a
          left join pg_catalog.pg_attrdef d on d.adrelid = a.attrelid and d.adnum = a.attnum
         where a.attrelid = %s::regclass and a.attnum > 0 and not a.attisdropped
           and a.attgenerated = '' and (d.oid is not null or a.attidentity <> '')
         order by a.attnum
        """,
        (fq,),
    ).fetchall()
    kept = {col: expr for col, expr, seq in rows if not seq}
    return kept, [col for col, _expr, seq in rows if seq]


def nextval_sequences(conn: psycopg.Connection, fq: str) -> dict[str, tuple[str, str]]:
    """Columns of ``fq`` whose default is ``nextval`` of one sequence (a serial, say, not
    an identity column): column -> (schema, name) of that sequence."""
    rows = conn.execute(
        """
        select a.attname, sn.nspname, s.relname
          from pg_catalog.pg_attribute a
          join pg_catalog.pg_attrdef d on d.adrelid = a.attrelid and d.adnum = a.attnum
          join pg_catalog.pg_depend dep on dep.classid = 'pg_catalog.pg_attrdef'::regclass
                                       and dep.objid = d.oid
                                       and dep.refclassid = 'pg_catalog.pg_class'::regclass
          join pg_catalog.pg_class s on s.oid = dep.refobjid and s.relkind = 'S'
          join pg_catalog.pg_namespace sn on sn.oid = s.relnamespace
         where a.attrelid = %s::regclass and a.attnum > 0 and not a.attisdropped
           and a.attidentity = ''
           and pg_get_expr(d.adbin, d.adrelid) like 'nextval(%%'
         order by a.attnum
        """,
        (fq,),
    ).fetchall()
    found: dict[str, list[tuple[str, str]]] = {}
    for col, schema, name in rows:
        found.setdefault(col, []).append((schema, name))
    # A default that draws on two sequences is not a plain nextval: left out.
    return {col: seqs[0] for col, seqs in found.items() if len(seqs) == 1}


def create_table(
    conn: psycopg.Connection,
    schema: str,
    name: str,
    cols: list[Column],
    pkey: list[str],
    defaults: dict[str, str] | None = None,
) -> None:
    """Create ``schema.name`` with ``cols``, their ``defaults`` (expressions as the server
    prints them) and ``pkey`` (the ``--create`` of add-table)."""
    if not cols:
        raise TableError(f"no columns to create table {schema}.{name}")
    defaults = defaults or {}
    defs = [
        sql.SQL("{} {}{}{}").format(
            sql.Identifier(c.name),
            sql.SQL(c.type_sql),  # server-generated type text, not operator input
            # pg_get_expr output of the source's own default, not operator input
            sql.SQL(f" default {defaults[c.name]}" if c.name in defaults else ""),
            sql.SQL(" not null" if c.not_null else ""),
        )
        for c in cols
    ]
    if pkey:
        defs.append(
            sql.SQL("primary key ({})").format(sql.SQL(", ").join(map(sql.Identifier, pkey)))
        )
    conn.execute(sql.SQL("create schema if not exists {}").format(sql.Identifier(schema)))
    conn.execute(
        sql.SQL("create table {} ({})").format(ident(schema, name), sql.SQL(", ").join(defs))
    )


@dataclass(frozen=True)
class StructureItem:
    """An index or a constraint of a table, to be recreated on another (``--create-full``).

    ``definition`` is the server's own text, never operator input: for an index what
    follows ``USING`` (access method, columns, INCLUDE, WHERE), for a constraint what
    follows ``ADD``.
    """

    kind: str  # "index" or "constraint"
    definition: str
    unique: bool = False


def structure(conn: psycopg.Connection, fq: str) -> list[StructureItem]:
    """The secondary indexes and the unique, check and exclusion constraints of ``fq``.

    The primary key is made by :func:`create_table`.  Foreign keys are left out: their
    referenced tables may not be replicated, and replay writes tables in its own order.
    """
    with conn.transaction():
        # Every name in the definitions schema-qualified, whatever the caller's search_path.
        conn.execute("set local search_path = pg_catalog")
        rows = conn.execute(
            """
            select 'index', pg_get_indexdef(i.indexrelid), i.indisunique,
                   format('%%s INDEX %%I ON %%s%%I.%%I USING ',
                          case when i.indisunique then 'CREATE UNIQUE' else 'CREATE' end,
                          ic.relname, case when t.relkind = 'p' then 'ONLY ' else '' end,
                          n.nspname, t.relname)
              from pg_index i
              join pg_class ic on ic.oid = i.indexrelid
              join pg_class t on t.oid = i.indrelid
              join pg_namespace n on n.oid = t.relnamespace
             where i.indrelid = %s::regclass
               and not exists (select 1 from pg_constraint c where c.conindid = i.indexrelid)
            union all
            select 'constraint', pg_get_constraintdef(c.oid), false, ''
              from pg_constraint c
             where c.conrelid = %s::regclass and c.contype in ('u', 'c', 'x')
             order by 1, 2
            """,
            (fq, fq),
        ).fetchall()
    items = []
    for kind, definition, unique, prefix in rows:
        if kind == "index":
            if not definition.startswith(prefix):
                raise TableError(f"cannot read the definition of an index of {fq}")
            definition = definition[len(prefix) :]  # without its name and old table
        items.append(StructureItem(kind, definition, unique))
    return items


def create_structure(
    conn: psycopg.Connection, schema: str, name: str, items: list[StructureItem]
) -> None:
    """Recreate on ``schema.name`` what :func:`structure` read (with new names)."""
    table = ident(schema, name)
    for item in items:
        if item.kind == "constraint":
            stmt = sql.SQL("alter table {} add {}").format(table, sql.SQL(item.definition))
        else:
            stmt = sql.SQL("create {}index on {} using {}").format(
                sql.SQL("unique " if item.unique else ""), table, sql.SQL(item.definition)
            )
        conn.execute(stmt)


def create_sequence(conn: psycopg.Connection, schema: str, name: str) -> None:
    conn.execute(sql.SQL("create schema if not exists {}").format(sql.Identifier(schema)))
    conn.execute(sql.SQL("create sequence {}").format(ident(schema, name)))


def sequence_value(conn: psycopg.Connection, fq: str) -> int | None:
    """Last value handed out by a sequence, None when it was never used."""
    row = conn.execute("select pg_sequence_last_value(%s::regclass)", (fq,)).fetchone()
    return None if row is None else row[0]
