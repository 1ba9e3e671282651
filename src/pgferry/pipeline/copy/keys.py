"""A copy's destination indexes: dropped before the load, built again once the rows are in.

Rows load fastest into a table without indexes: each index is then built once, by one sort,
instead of being updated row by row.  For every table a copy empties,
:func:`drop_for_load` (in the transaction that empties it) drops the secondary indexes and,
where it is safe (:data:`_KEYS_SQL` says when), the indexes of the primary key and of the
unique constraints, that is the constraints themselves.  Each definition is first recorded
in ``ferry_copy.saved_index`` (``constraint_type`` 'p' or 'u' for a constraint's index), in
that same transaction, so a copy that dies leaves the next copy of the table, a resume or a
new one, to build it: whichever finishes calls :func:`rebuild`.

A key is rebuilt as ``CREATE UNIQUE INDEX`` from its recorded definition, then ``ALTER
TABLE .. ADD CONSTRAINT <its name> PRIMARY KEY | UNIQUE USING INDEX``, in one transaction
that also forgets the record: the table has its key again, or still has the record that
will give it back.  The columns keep their NOT NULL meanwhile (dropping a primary key leaves
it), so adding the key back reads no row but the index build's.  Rows copied without the
key are still exact: each chunk or block range is committed with its ``range_done`` record,
so a resumed copy copies only what no committed transaction holds.  Should the build fail
(duplicate keys: the copy's rows were not unique after all), the copy fails with one line
naming the table and the constraint, and the record stays.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor

import psycopg
from psycopg import sql

from pgferry.db import connect, describe, error_text
from pgferry.errors import DatabaseError
from pgferry.pipeline.copy.task import TablePlan
from pgferry.pipeline.tables import TableInfo

log = logging.getLogger(__name__)

# Index builds at once (one connection each); the keys of one table build one after another.
JOBS = 4
# maintenance_work_mem of a rebuild's session, when the server's is lower: 5M bigint keys
# sort in memory instead of in temporary files at the default 64MB.
BUILD_MEMORY = "512MB"
_CONSTRAINT = {"p": sql.SQL("primary key"), "u": sql.SQL("unique")}

# The key and unique constraints of a table that may be dropped for the load.  Not those:
_KEYS_SQL = """
select k.conname, k.contype, pg_get_indexdef(k.conindid),
       array(select a.attname::text
             from unnest(k.conkey) with ordinality as c(attnum, ord)
             join pg_attribute a on a.attrelid = k.conrelid and a.attnum = c.attnum
             order by c.ord)
from pg_constraint k
join pg_class t on t.oid = k.conrelid
join pg_class i on i.oid = k.conindid
join pg_index x on x.indexrelid = k.conindid
where k.conrelid = %(table)s::regclass
  and k.contype in ('p', 'u')  -- (an exclusion constraint cannot be added USING INDEX)
  -- whose columns do not hold the source's whole key, copied as it is: the rows copied
  -- are unique on them only then (a copy without such a key drops none)
  and cardinality(%(key)s::text[]) > 0
  and array(select a.attname::text from pg_attribute a
            where a.attrelid = k.conrelid and a.attnum = any(k.conkey)) @> %(key)s::text[]
  -- DEFERRABLE ones (kept as they are rather than re-made with their timing)
  and not k.condeferrable
  -- of a partitioned table (its key is its partitions' indexes) or of a partition (its
  -- index is a part of its parent's)
  and t.relkind = 'r' and not t.relispartition
  -- not a btree (a temporal key is GiST) or in a tablespace of its own: the definition
  -- read back would not make the same index
  and i.relam = (select oid from pg_am where amname = 'btree') and i.reltablespace = 0
  -- the replica identity's index, or the primary key of a published table whose replica
  -- identity is the default one (the key): its updates and deletes need it
  and not x.indisreplident
  and not (k.contype = 'p' and t.relreplident = 'd' and exists (
      select 1 from pg_publication_tables p
      where p.tablename = t.relname
        and p.schemaname = (select nspname from pg_namespace where oid = t.relnamespace)))
  -- referenced by a foreign key (of another table or of this one): the FK needs the index;
  -- any key of such a table stays
  and not exists (select 1 from pg_constraint f where f.contype = 'f' and f.confrelid = t.oid)
  -- anything else depending on the constraint or its index (a view grouping by the key)
  and not exists (
      select 1 from pg_depend d
      where (d.refclassid = 'pg_constraint'::regclass and d.refobjid = k.oid
             and not (d.classid = 'pg_class'::regclass and d.objid = k.conindid))
         or (d.refclassid = 'pg_class'::regclass and d.refobjid = k.conindid
             and not (d.classid = 'pg_constraint'::regclass and d.objid = k.oid)))
  -- a comment on either, which the rebuild would not carry
  and obj_description(k.oid, 'pg_constraint') is null
  and obj_description(k.conindid, 'pg_class') is null
order by k.contype, k.conname
"""

_SECONDARY_SQL = """
select c.relname, pg_get_indexdef(i.indexrelid)
from pg_index i join pg_class c on c.oid = i.indexrelid
where i.indrelid = %s::regclass
  and not exists (select 1 from pg_constraint k where k.conindid = i.indexrelid)
"""


def copied_key(src: TableInfo, plan: TablePlan) -> tuple[str, ...]:
    """The source's primary key when the copy writes its columns as they are (so the rows
    copied are unique on them at the destination too); empty otherwise."""
    exprs = dict(plan.exprs)
    if src.pkey and all(c in plan.columns and c not in exprs for c in src.pkey):
        return src.pkey
    return ()


def droppable(conn: psycopg.Connection, dst: TableInfo, key: tuple[str, ...]) -> bool:
    """Whether :func:`drop_for_load` would drop anything of ``dst`` (a read only)."""
    if conn.execute(_KEYS_SQL, {"table": dst.display, "key": list(key)}).fetchone():
        return True
    return conn.execute(_SECONDARY_SQL, (dst.display,)).fetchone() is not None


def drop_for_load(conn: psycopg.Connection, dst: TableInfo, key: tuple[str, ...]) -> None:
    """Record and drop ``dst``'s secondary indexes and droppable keys (``key``: the
    columns the copied rows are unique on, :func:`copied_key`), in the caller's transaction."""
    # A key's index goes with its constraint; the other constraints' indexes stay.
    keys = conn.execute(_KEYS_SQL, {"table": dst.display, "key": list(key)}).fetchall()
    for name, kind, definition, columns in keys:
        _save(conn, dst, name, definition, kind, columns)
        conn.execute(
            sql.SQL("alter table {} drop constraint {}").format(dst.ident, sql.Identifier(name))
        )
    for name, definition in conn.execute(_SECONDARY_SQL, (dst.display,)).fetchall():
        _save(conn, dst, name, definition, None, None)
        conn.execute(sql.SQL("drop index {}").format(sql.Identifier(dst.schema, name)))


def _save(
    conn: psycopg.Connection,
    dst: TableInfo,
    name: str,
    definition: str,
    kind: str | None,
    columns: list[str] | None,
) -> None:
    # A record left by an earlier copy that died stays as it was.
    conn.execute(
        "insert into ferry_copy.saved_index (dest_table, index_name, index_def,"
        " constraint_type, key_columns) values (%s, %s, %s, %s, %s) on conflict do nothing",
        (dst.display, name, definition, kind, columns),
    )


def rebuild(dst_connstr: str, dest_names: list[str]) -> None:
    """Build every recorded index and key of ``dest_names``, several at once."""
    with connect(dst_connstr, autocommit=True) as conn:
        try:
            saved = conn.execute(
                "select dest_table, index_name, index_def, constraint_type"
                " from ferry_copy.saved_index where dest_table = any(%s)"
                " order by dest_table, constraint_type nulls last, index_name",
                (dest_names,),
            ).fetchall()
        except psycopg.Error as exc:
            raise DatabaseError(f"{describe(dst_connstr)}: {error_text(exc)}") from None
    # A table's keys in one job, in order: two ADD CONSTRAINTs on one table at once, each
    # holding the SHARE lock of its index build, would deadlock.  A secondary index is a job
    # of its own (a key's ADD CONSTRAINT waits for it, never the other way round).
    jobs: list[list[tuple[str, str, str, str | None]]] = []
    per_table: dict[str, list[tuple[str, str, str, str | None]]] = {}
    for row in saved:
        if row[3] is None:
            jobs.append([row])
        else:
            per_table.setdefault(row[0], []).append(row)
    jobs = [*per_table.values(), *jobs]
    if not jobs:
        return
    with ThreadPoolExecutor(min(JOBS, len(jobs)), thread_name_prefix="pgferry-index") as pool:
        outcomes = [pool.submit(_build, dst_connstr, job) for job in jobs]
    errors = [f.exception() for f in outcomes if f.exception() is not None]
    if errors:
        raise errors[0]  # type: ignore[misc]


def _build(dst_connstr: str, job: list[tuple[str, str, str, str | None]]) -> None:
    with connect(dst_connstr, autocommit=True) as conn:
        conn.execute(
            "select set_config('maintenance_work_mem', %s, false)"
            " where pg_size_bytes(current_setting('maintenance_work_mem'))"
            " < pg_size_bytes(%s)",
            (BUILD_MEMORY, BUILD_MEMORY),
        )
        for dest, name, definition, kind in job:
            what = "index" if kind is None else ("primary key" if kind == "p" else "unique key")
            log.info("copy %s: building %s %s", dest, what, name)
            try:
                with conn.transaction():
                    _build_one(conn, dest, name, definition, kind)
            except psycopg.Error as exc:
                raise DatabaseError(
                    f"{describe(dst_connstr)}: copy of {dest}: could not build its {what}"
                    f" {name} again: {error_text(exc)}"
                ) from None


def _build_one(
    conn: psycopg.Connection, dest: str, name: str, definition: str, kind: str | None
) -> None:
    """One index (and its constraint), and its record forgotten, in the open transaction."""
    row = conn.execute(
        "select n.nspname, c.relname, exists (select 1 from pg_class i"
        "   where i.relname = %(name)s and i.relnamespace = c.relnamespace)"
        " from pg_class c join pg_namespace n on n.oid = c.relnamespace"
        " where c.oid = %(table)s::regclass",
        {"table": dest, "name": name},
    ).fetchone()
    assert row is not None
    schema, table, exists = row
    if not exists:  # else made again by hand since: nothing left to do
        conn.execute(definition)  # type: ignore[arg-type]
        if kind is not None:
            conn.execute(
                sql.SQL("alter table {} add constraint {} {} using index {}").format(
                    sql.Identifier(schema, table),
                    sql.Identifier(name),
                    _CONSTRAINT[kind],
                    sql.Identifier(name),
                )
            )
    conn.execute(
        "delete from ferry_copy.saved_index where dest_table = %s and index_name = %s",
        (dest, name),
    )
