"""``make demo``: capture row changes into a queue, tick, consume them in batches.

Starts a throw-away PostgreSQL cluster, installs the queue schema, attaches capture
triggers to a table, makes a few changes (insert, update, a primary-key change, delete,
truncate), ticks and reads the events back batch by batch with the consumer class.
"""

from __future__ import annotations

import sys

import psycopg
from rich.console import Console
from rich.table import Table

from pgferry import schema
from pgferry.errors import PgferryError
from pgferry.queue.consumer import Batch, Consumer
from pgferry.testing.cluster import make_cluster

QUEUE = "replika"
CONSUMER = "demo_reader"

# (description, statement) pairs; each commits on its own, ticks are made in between.
CHANGES = [
    [
        ("insert two users", "insert into digoal_01.user_info values (1, 'ann'), (2, 'bob')"),
        ("update one", "update digoal_01.user_info set engname = 'Ann' where userid = 1"),
    ],
    [
        ("change a primary key", "update digoal_01.user_info set userid = 20 where userid = 2"),
        ("delete a row", "delete from digoal_01.user_info where userid = 1"),
    ],
    [("truncate the table", "truncate digoal_01.user_info")],
]


def run(console: Console) -> None:
    console.print("[bold]Starting a throw-away PostgreSQL cluster...[/]")
    cluster = make_cluster("demo")
    try:
        connstr = cluster.createdb("digoal_01")
        with psycopg.connect(connstr) as conn:
            for item in schema.install(conn, ("queue",)):
                console.print(f"Installing {item}")
        with psycopg.connect(connstr, autocommit=True) as conn:
            conn.execute("create schema digoal_01")
            conn.execute("create table digoal_01.user_info (userid int primary key, engname text)")
            conn.execute("select ferry_queue.create_queue(%s)", (QUEUE,))
            conn.execute("select ferry_queue.attach_capture(%s, 'digoal_01.user_info')", (QUEUE,))
            console.print(
                f"Queue [cyan]{QUEUE}[/] created, capture triggers on digoal_01.user_info"
            )
            with Consumer(connstr, QUEUE, CONSUMER) as consumer:
                consumer.register()
                for group in CHANGES:
                    for description, statement in group:
                        conn.execute(statement)  # type: ignore[arg-type]
                        console.print(f"  {description}: [dim]{statement}[/]")
                    conn.execute("select ferry_queue.force_tick(%s)", (QUEUE,))
                    tick = conn.execute("select ferry_queue.ticker(%s)", (QUEUE,)).fetchone()
                    console.print(f"  tick {tick[0] if tick else '?'}")
                consumer.run(lambda batch: show_batch(console, batch))
    finally:
        cluster.destroy()
        console.print("[bold]Cluster stopped and removed.[/]")


def show_batch(console: Console, batch: Batch) -> None:
    info = batch.info
    table = Table(title=f"batch {info.batch_id}: ticks {info.prev_tick_id} -> {info.tick_id}")
    for column in ("ev_id", "ev_txid", "ev_type", "ev_extra1"):
        table.add_column(column)
    table.add_column("ev_data", overflow="fold")  # the row image matters most: never cut
    for ev in batch.events():
        table.add_row(str(ev.ev_id), str(ev.ev_txid), ev.ev_type, ev.ev_extra1, ev.ev_data or "")
    console.print(table)


def main() -> int:
    console = Console()
    try:
        run(console)
    except PgferryError as exc:
        print(f"pgferry demo: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
