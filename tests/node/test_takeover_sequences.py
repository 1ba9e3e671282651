"""Replicated sequences across takeover: an application inserting with ``nextval`` keeps
going on the new root without reusing an id the old root handed out, after a switchover and
after a failover that lost the end of the old root's queue.  The root publishes ahead of
its sequences, once per half buffer, and not at all while idle."""

from __future__ import annotations

import re
import threading

import psycopg
import pytest
from psycopg import sql

from pgferry.apply import publish_seqs
from pgferry.node.seqops import DEFAULT_SEQ_BUFFER
from tests.fixtures.fix_cascade import Tree

SEQ = "public.order_ids"
ORDERS = "public.orders"
NODES = ("root", "branch", "leaf", "leaf2")  # every provider before its subscribers


class NextvalWriter(threading.Thread):
    """Inserts rows that take their id from the sequence, on the first of ``dsns`` that
    accepts them; a refused insert moves on to the next node, as an application would after
    a takeover.  Records each committed id with the node that took it, and every
    duplicate-key error."""

    def __init__(self, dsns: dict[str, str], every: float = 0.01) -> None:
        super().__init__(daemon=True)
        self.dsns = list(dsns.items())
        self.every = every
        self.halt = threading.Event()
        self.written: list[tuple[int, str]] = []
        self.collisions: list[str] = []

    def run(self) -> None:
        current = 0
        while not self.halt.wait(self.every):
            node, dsn = self.dsns[current]
            try:
                with psycopg.connect(dsn, autocommit=True, connect_timeout=2) as conn:
                    while not self.halt.wait(self.every):
                        row = conn.execute(
                            "insert into public.orders (v) values (%s) returning id", (node,)
                        ).fetchone()
                        assert row is not None
                        self.written.append((row[0], node))
            except psycopg.errors.UniqueViolation as exc:
                self.collisions.append(f"{node}: {exc}")
            except psycopg.Error:
                current = (current + 1) % len(self.dsns)  # denied, or the node is gone

    def count(self, node: str) -> int:
        return sum(1 for _, n in self.written if n == node)

    def ids(self, node: str) -> list[int]:
        return sorted(i for i, n in self.written if n == node)

    def stop(self) -> None:
        self.halt.set()
        self.join(timeout=30)


def _orders(tree: Tree, node: str) -> list[tuple[int, str]]:
    return [tuple(r) for r in tree.sql(node, "select id, v from public.orders order by id")]


def _position(tree: Tree, node: str) -> int:
    return tree.sql(
        node, sql.SQL("select last_value from {}").format(sql.Identifier(*SEQ.split(".")))
    )[0][0]


def _published(tree: Tree, node: str) -> int | None:
    found = tree.sql(node, "select last_value from ferry.seq_info where seq_name = %s", (SEQ,))
    return found[0][0]


@pytest.fixture
def seq_tree(tree: Tree) -> Tree:
    """The cascade of ``tree`` plus ``public.orders`` whose ids come from ``public.order_ids``,
    both replicated on every node (empty, so in sync)."""
    for node in NODES:
        tree.sql(node, f"create sequence {SEQ}")
        tree.sql(
            node,
            f"create table {ORDERS} (id bigint default nextval('{SEQ}') primary key, v text)",
        )
        sync = () if node == "root" else ("--expect-sync",)
        for args in (("add-table", ORDERS, *sync), ("add-seq", SEQ)):
            res = tree.cli(node, *args)
            assert res.code == 0, (node, args, res.err)
    return tree


def test_root_publishes_ahead_and_only_when_due(seq_tree: Tree) -> None:
    tree, buffer = seq_tree, 100

    def publish() -> int:
        with psycopg.connect(tree.dsns["root"]) as conn:
            return publish_seqs.publish(conn, tree.queue, buffer)

    def events() -> list[tuple]:
        return tree.sql(
            "root",
            "select ev_data::bigint from ferry_queue.event where ev_type = 'SEQ' order by ev_id",
        )

    tree.sql("root", "select nextval(%s) from generate_series(1, 7)", (SEQ,))
    assert publish() == 1 and events() == [(7 + buffer,)]
    assert _published(tree, "root") == 7 + buffer
    assert publish() == 0  # nothing moved: no event
    tree.sql("root", "select nextval(%s) from generate_series(1, 49)", (SEQ,))
    assert publish() == 0  # more than half the buffer is still ahead
    tree.sql("root", "select nextval(%s)", (SEQ,))
    assert publish() == 1 and events()[-1] == (57 + buffer,)
    assert publish() == 0 and len(events()) == 2


def test_switchover_under_nextval_load(seq_tree: Tree) -> None:
    tree = seq_tree
    tree.start(*NODES)
    tree.start_ticker()
    writer = NextvalWriter({"root": tree.dsns["root"], "branch": tree.dsns["branch"]})
    writer.start()
    try:
        tree.wait_for(lambda: writer.count("root") > 60, what="writes on the root")
        # What every subscriber holds is ahead of what the root hands out.
        published = _published(tree, "root")
        assert published is not None and published > max(writer.ids("root"))
        res = tree.cli("branch", "takeover", "root", "--timeout=60")
        assert res.code == 0, res.err
        assert "Node branch is now root" in res.out
        tree.wait_for(lambda: writer.count("branch") > 60, what="writes on the new root")
    finally:
        writer.stop()
        tree.stop_ticker()
    assert writer.collisions == []
    old_ids, new_ids = writer.ids("root"), writer.ids("branch")
    assert min(new_ids) > max(old_ids)
    tree.catch_up("root", "leaf", "leaf2")
    expected = sorted(writer.written)
    for node in NODES:
        assert _orders(tree, node) == expected, node
        # The new root's publishes reached everyone: every sequence is ahead of every id.
        assert _position(tree, node) >= max(new_ids), node


def test_failover_moves_past_a_lost_publish(seq_tree: Tree) -> None:
    tree, buffer = seq_tree, DEFAULT_SEQ_BUFFER
    tree.start(*NODES)
    tree.start_ticker()
    writer = NextvalWriter({"root": tree.dsns["root"], "branch": tree.dsns["branch"]})
    writer.start()
    try:
        tree.wait_for(lambda: writer.count("root") > 30, what="writes on the root")
        tree.catch_up("branch", "leaf", "leaf2")
        # leaf2 reads from the root too: stopped after the branch, it could take one more
        # tick of the root and stand ahead of the new root, which then cannot serve it (a
        # failover moves no node that is ahead: "not moved (ahead): leaf2").  Stopped
        # first, it is at most behind the branch; leaf reads from the branch.
        tree.stop("leaf2", "branch", "leaf")
        # From here on nothing of the root reaches the survivors: rows, and a publish made
        # when a burst of a whole buffer of values used up what the survivors hold.
        heard = _published(tree, "branch")
        assert heard is not None and heard > max(writer.ids("root"))
        tree.sql("root", "select nextval(%s) from generate_series(1, %s)", (SEQ, buffer))
        tree.wait_for(lambda: (_published(tree, "root") or 0) > heard, what="a publish on the root")
        count = writer.count("root")
        tree.wait_for(lambda: writer.count("root") > count + 20, what="more root writes")
        assert max(writer.ids("root")) > heard  # the survivors' value alone would collide
        with tree.gone("root"):
            res = tree.cli("branch", "takeover", "root", "--dead-root", "--timeout=60")
            assert res.code == 0, res.err
            assert "Node branch is now root in place of dead root" in res.out
            found = re.search(rf"seq_buffer {buffer}: {re.escape(SEQ)}=(\d+)", res.out)
            assert found, res.out
            assert int(found[1]) >= heard + buffer
            assert "sequences advanced past the last published value" in res.err
            tree.start("branch", "leaf", "leaf2")
            tree.wait_for(lambda: writer.count("branch") > 60, what="writes on the new root")
            writer.stop()
            tree.catch_up("leaf", "leaf2")
            survivors = _orders(tree, "branch")
            for node in ("leaf", "leaf2"):
                assert _orders(tree, node) == survivors, node
    finally:
        writer.stop()
        tree.stop_ticker()
    assert writer.collisions == []
    dead = _orders(tree, "root")  # back: every row the old root took, the lost ones too
    new_ids = writer.ids("branch")
    assert min(new_ids) > max(i for i, _ in dead)
    assert [i for i, _ in dead] == writer.ids("root")
    # The survivors hold what reached them of the old root and every row of the new one.
    received = [r for r in survivors if r[1] == "root"]
    assert len(received) > 30 and set(received) <= set(dead)
    assert [i for i, v in survivors if v == "branch"] == new_ids


def test_bad_seq_buffer_stops_takeover_before_anything_changes(seq_tree: Tree) -> None:
    tree = seq_tree
    ini = tree.configs["branch"]
    text = ini.read_text()
    for value, message in (("0", "must be at least 1"), ("lots", "must be an integer")):
        ini.write_text(f"{text}seq_buffer = {value}\n")
        res = tree.cli("branch", "takeover", "root")
        assert res.code != 0 and f"setting 'seq_buffer' {message}" in res.err, res.err
        assert len(res.err.strip().splitlines()) == 1
    assert tree.node_type("root") == "root" and tree.node_type("branch") == "branch"
    assert tree.sql("root", "select queue_external_ticker from ferry_queue.queue") == [(False,)]


def test_switchover_refuses_a_sequence_missing_on_the_new_root(seq_tree: Tree) -> None:
    tree = seq_tree
    assert tree.cli("branch", "remove-seq", SEQ).code == 0
    res = tree.cli("branch", "takeover", "root")
    assert res.code != 0
    assert f"Sequence {SEQ} is not replicated on node branch (add-seq it there)" in res.err
    assert tree.node_type("root") == "root"
    assert tree.sql("root", "select queue_external_ticker from ferry_queue.queue") == [(False,)]


def test_switchover_names_the_defaults_the_new_root_lacks(seq_tree: Tree) -> None:
    """A table made by ``add-table --create`` before its sequence existed has no nextval
    default: the new root's inserts relying on it fail, so the takeover says which."""
    tree = seq_tree
    tree.sql("branch", f"alter table {ORDERS} alter column id drop default")
    tree.start(*NODES)
    tree.sql("root", f"insert into {ORDERS} (v) select 'r' from generate_series(1, 5)")
    tree.catch_up("branch", "leaf", "leaf2")
    res = tree.cli("branch", "takeover", "root", "--timeout=60")
    assert res.code == 0, res.err
    assert "columns without the sequence default" in res.out
    assert res.out.rstrip().endswith(f"fail on branch): {ORDERS}.id"), res.out
    assert "make sure one runs for database" in res.out
    tree.sql("branch", f"alter table {ORDERS} alter column id set default nextval('{SEQ}')")
    tree.sql("branch", f"insert into {ORDERS} (v) values ('b')")
    tree.catch_up("root", "leaf", "leaf2")
    expected = _orders(tree, "branch")
    assert len(expected) == 6
    for node in NODES:
        assert _orders(tree, node) == expected, node
