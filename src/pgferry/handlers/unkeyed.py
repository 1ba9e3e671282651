"""The bulk apply of a table without a unique key on this node.

Two kinds (docs/replication.md, "Tables without a key"):

* **No key at all** (:attr:`Target.keyless`): the stage holds ``I`` and ``D`` copies of
  whole row images (``pgferry.apply.replay.unkeyed`` nets them per image); each ``D`` deletes one
  row equal to it, any of equal ones (they cannot be told apart), then the ``I`` rows are
  inserted.  A delete that finds no row is counted as divergence.
* **A key the destination does not enforce** (``pkey=`` columns without a unique index
  here): the rows are collapsed per key as usual; every staged key is deleted, then the new
  images are inserted (ON CONFLICT needs a unique index).
"""

from __future__ import annotations

from psycopg import sql

from pgferry.handlers.staged import Applied, Staged, Target


def apply_rows(staged: Staged) -> Applied:
    """Deletes, then inserts, of a rows-mode stage (in the caller's transaction)."""
    conn, target, stage = staged.conn, staged.target, staged.relation
    applied = Applied()
    if not staged.inserts_only:
        if target.keyless:
            wanted = conn.execute(
                sql.SQL("select count(*) from {} where op = 'D'").format(stage)
            ).fetchone()
            if wanted and wanted[0]:
                applied.deletes = conn.execute(_delete_images(target, stage)).rowcount
                applied.missing_deletes = wanted[0] - applied.deletes
        else:
            applied.deletes = conn.execute(_delete_keys(target, stage)).rowcount
    applied.upserts = conn.execute(
        sql.SQL(
            "insert into {dest} ({cols}) overriding system value"
            " select {cols} from {stage} where op not in ('D', 'd')"
        ).format(
            dest=target.dest,
            cols=sql.SQL(", ").join(map(sql.Identifier, target.columns)),
            stage=stage,
        )
    ).rowcount
    return applied


def _delete_images(target: Target, stage: sql.Composable) -> sql.Composable:
    """Delete, per staged ``D`` image, as many rows equal to it as it has copies.

    Rows are compared as the text of their typed values (any type, NULLs included), and
    picked by (tableoid, ctid): equal rows cannot be told apart, any of them will do.
    """

    def image(alias: str) -> sql.Composable:
        return sql.SQL("row({})::text").format(
            sql.SQL(", ").join(sql.Identifier(alias, c) for c in target.columns)
        )

    return sql.SQL(
        """
        with want as (select {s_img} as k, count(*) as n from {stage} as s
                       where s.op = 'D' group by 1),
             here as (select t.tableoid as rel, t.ctid as tid, {t_img} as k,
                             row_number() over (partition by {t_img}) as rn
                        from {dest} as t
                       where {t_img} in (select k from want))
        delete from {dest} as d
         using here as h join want as w on w.k = h.k and h.rn <= w.n
         where d.tableoid = h.rel and d.ctid = h.tid
        """
    ).format(s_img=image("s"), t_img=image("t"), stage=stage, dest=target.dest)


def _delete_keys(target: Target, stage: sql.Composable) -> sql.Composable:
    """Delete every row whose key is staged, whatever its op (the new images follow)."""
    pk = [sql.Identifier(c) for c in target.pk]
    return sql.SQL("delete from {dest} as t using {stage} as s where ({tpk}) = ({spk})").format(
        dest=target.dest,
        stage=stage,
        tpk=sql.SQL(", ").join(sql.SQL("t.{}").format(c) for c in pk),
        spk=sql.SQL(", ").join(sql.SQL("s.{}").format(c) for c in pk),
    )
