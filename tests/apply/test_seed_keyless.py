"""The walkthrough's log tables as the seed made them, without any key, under its load.

The seed had to give ``user_login_rec`` a new ``serial8`` column on both sides before
Londiste would take it.  Here the two log tables keep their original shape (no primary
key, no unique index) and replicate as multisets while logins and logouts run: the copy
starts under the load, and at the end both sides hold the same rows, duplicates included.
"""

from __future__ import annotations

import random
import threading

import psycopg

from pgferry.testing.seed import seed_fill, seed_schema
from tests.apply.test_capture_options import leaf_add, multiset, root_add

USERS = 500
LOGS = """
create table digoal_01.user_login_rec (userid int, login_time timestamp, ip inet);
create table digoal_01.user_logout_rec (userid int, logout_time timestamp, ip inet);
"""
TABLES = (
    "digoal_01.user_session",
    "digoal_01.user_login_rec",
    "digoal_01.user_logout_rec",
)


def _seed_client(dsn: str, stop: threading.Event, seed: int, done: list[int]) -> None:
    """login.sql and logout.sql of the walkthrough, one transaction after the other."""
    rng = random.Random(seed)
    with psycopg.connect(dsn, autocommit=True) as conn:
        while not stop.is_set() and done[0] < 1500:
            uid = rng.randint(1, USERS)
            with conn.transaction():
                if rng.random() < 0.5:
                    conn.execute("select * from digoal_01.user_info where userid = %s", (uid,))
                    conn.execute(
                        "insert into digoal_01.user_login_rec values (%s, now(), '10.0.0.1')",
                        (uid,),
                    )
                    conn.execute(
                        "update digoal_01.user_session set logintime = now(),"
                        " login_count = login_count + 1 where userid = %s",
                        (uid,),
                    )
                else:
                    conn.execute(
                        "insert into digoal_01.user_logout_rec values (%s, now(), '10.0.0.2')",
                        (uid,),
                    )
                    conn.execute(
                        "update digoal_01.user_session set logouttime = now(),"
                        " online_interval = online_interval + (now() - logintime)"
                        " where userid = %s",
                        (uid,),
                    )
            done[0] += 1


def test_seed_log_tables_without_key_under_the_seed_load(pair) -> None:
    for dsn in (pair.root_dsn, pair.leaf_dsn):
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(seed_schema() + LOGS)
    pair.root(seed_fill(USERS))
    pair.root("update digoal_01.user_session set logintime = now()")
    assert root_add(pair, *TABLES) == list(TABLES)

    stop, done = threading.Event(), [0]
    clients = [
        threading.Thread(target=_seed_client, args=(pair.root_dsn, stop, seed, done))
        for seed in range(4)
    ]
    for t in clients:
        t.start()
    try:
        while done[0] < 100 and any(t.is_alive() for t in clients):  # copy under load
            stop.wait(0.05)
        leaf_add(pair, *TABLES)
        worker = pair.worker()
        while any(t.is_alive() for t in clients):
            pair.tick()
            worker.work()
    finally:
        stop.set()
        for t in clients:
            t.join()
    pair.catch_up(worker)
    for table in TABLES:
        root, leaf = multiset(pair, table)
        assert root == leaf, table
    logins = pair.root("select count(*) from digoal_01.user_login_rec")[0][0]
    assert logins > 300
    # Same login at the same microsecond never happens, but one user logs in many times.
    assert (
        pair.root(
            "select count(*) from (select userid from digoal_01.user_login_rec"
            " group by userid having count(*) > 1) d"
        )[0][0]
        > 0
    )
