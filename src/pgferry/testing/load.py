"""Write load for tests, the demo and benchmarks: a thread that writes until stopped.

One :class:`Load` runs a unit of writes (a function of a connection and the number of units
done so far) over and over on the first of its databases that accepts it.  A refused or
broken connection (a node that is no longer root denies writes, a server restarting) moves
on to the next database, or tries the same one again, and the unit is repeated with the
same number: the rows an application would have written after a switchover.
:class:`Inserts` is the load most scenarios want: rows with new ids, one per unit;
:class:`KeyChurn` inserts, updates and deletes rows of ``t (id, v, s)`` at random keys.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Sequence

import psycopg
from psycopg import sql

Unit = Callable[[psycopg.Connection, int], None]


class Load(threading.Thread):
    """Runs ``unit(conn, done)`` every ``every`` seconds until :meth:`stop`.

    ``transaction``: each unit in a transaction of its own (the connection is autocommit
    otherwise).  ``retry``: seconds before a new connection after an error (default:
    ``every``).  ``done`` counts the units committed, ``refused`` the errors met.
    """

    def __init__(
        self,
        dsns: str | Sequence[str],
        unit: Unit,
        *,
        every: float = 0.01,
        transaction: bool = True,
        retry: float | None = None,
    ) -> None:
        super().__init__(daemon=True)
        self.dsns = [dsns] if isinstance(dsns, str) else list(dsns)
        self.unit, self.every, self.transaction = unit, every, transaction
        self.retry = every if retry is None else retry
        self.halt = threading.Event()
        self.done = 0
        self.refused = 0

    def run(self) -> None:
        current = 0
        while not self.halt.is_set():
            try:
                with psycopg.connect(self.dsns[current], autocommit=True, connect_timeout=5) as c:
                    while not self.halt.wait(self.every):
                        if self.transaction:
                            with c.transaction():
                                self.unit(c, self.done)
                        else:
                            self.unit(c, self.done)
                        self.done += 1
            except psycopg.Error:
                self.refused += 1
                current = (current + 1) % len(self.dsns)
                self.halt.wait(self.retry)

    def stop(self) -> int:
        """Stop writing; the number of units done."""
        self.halt.set()
        self.join(timeout=30)
        return self.done

    def __enter__(self) -> Load:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class Inserts(Load):
    """Rows ``(id, 'w<id>')`` into ``table`` with ids from ``first_id``, one per unit."""

    def __init__(
        self, dsns: str | Sequence[str], table: sql.Composable, first_id: int, every: float = 0.02
    ) -> None:
        query = sql.SQL("insert into {} values (%s, %s)").format(table)

        def insert(conn: psycopg.Connection, done: int) -> None:
            conn.execute(query, (first_id + done, f"w{first_id + done}"))

        super().__init__(dsns, insert, every=every, transaction=False)
        self.first_id = first_id

    @property
    def next_id(self) -> int:
        """The id the next row gets."""
        return self.first_id + self.done


class KeyChurn(Load):
    """Five random writes per unit (in one transaction) on ``t (id, v, s)``: an insert or
    increment, an update or a delete of a key in ``1..keys``, so a copy of the table meets
    rows changed, removed and added again across its whole key range."""

    def __init__(
        self, dsns: str | Sequence[str], keys: int, *, seed: int = 1, every: float = 0
    ) -> None:
        rng = random.Random(seed)

        def unit(conn: psycopg.Connection, _done: int) -> None:
            for _ in range(5):
                k, op = rng.randint(1, keys), rng.random()
                if op < 0.4:
                    conn.execute(
                        "insert into t (id, v) values (%s, 1)"
                        " on conflict (id) do update set v = t.v + 1",
                        (k,),
                    )
                elif op < 0.75:
                    conn.execute("update t set v = v + 10, s = md5(v::text) where id = %s", (k,))
                else:
                    conn.execute("delete from t where id = %s", (k,))

        super().__init__(dsns, unit, every=every)
