"""create-root / create-branch / create-leaf against real clusters."""

from __future__ import annotations

import psycopg

from pgferry.node import model
from pgferry.testing.cluster import free_port


def q(connstr: str, query: str, params: tuple = ()) -> list[tuple]:
    with psycopg.connect(connstr, autocommit=True) as conn:
        cur = conn.execute(query, params)
        return cur.fetchall() if cur.description else []


def test_create_root_then_rerun(db_a, write_ini, cli):
    ini = write_ini("src_root", db_a)
    res = cli(ini, "create-root", "src_root", db_a)
    assert res.code == 0, res.err
    assert "Initializing node" in res.err
    assert 'Node "src_root" initialized for queue "replika" with type "root"' in res.err
    assert "Done" in res.err
    assert q(db_a, "select node_type, node_name, worker_name from ferry_node.node_info") == [
        ("root", "src_root", "src_root")
    ]
    (tick,) = q(db_a, "select last_tick_id from ferry_node.local_state")[0]
    assert tick is not None
    assert q(db_a, "select queue_name from ferry_queue.queue") == [("replika",)]

    again = cli(ini, "create-root", "src_root", db_a)
    assert again.code == 0
    assert "already initialized" in again.err and "nothing changed" in again.err
    assert "Done" not in again.err


def test_create_on_another_node_is_refused(db_a, db_b, write_ini, cli):
    """The database is one node: asking it to be another (type or name) fails, naming what
    is there, and changes nothing; the same request again stays a quiet success."""
    root_ini = write_ini("src", db_a)
    assert cli(root_ini, "create-root", "src").code == 0
    leaf_ini = write_ini("dst", db_b)
    assert cli(leaf_ini, "create-leaf", "dst", f"--provider={db_a}").code == 0
    before = q(db_b, "select node_type, node_name from ferry_node.node_info")

    for ini, args, wanted in (
        (leaf_ini, ("create-root", "dst"), 'not made root "dst"'),
        (leaf_ini, ("create-branch", "dst", f"--provider={db_a}"), 'not made branch "dst"'),
        (leaf_ini, ("create-leaf", "other", f"--provider={db_a}"), 'not made leaf "other"'),
        (root_ini, ("create-leaf", "src", f"--provider={db_b}"), 'not made leaf "src"'),
    ):
        res = cli(ini, *args)
        assert res.code == 1, res
        lines = res.err.strip().splitlines()
        assert lines[-1].startswith("pgferry: Node ") and "already initialized" in lines[-1]
        assert wanted in lines[-1] and "Traceback" not in res.err
    assert (
        'Node "dst" already initialized for queue "replika" with type "leaf"'
        in cli(leaf_ini, "create-root", "dst").err
    )
    assert q(db_b, "select node_type, node_name from ferry_node.node_info") == before

    again = cli(leaf_ini, "create-leaf", "dst", f"--provider={db_a}")
    assert again.code == 0 and "nothing changed" in again.err


def test_create_leaf_registers_on_provider(db_a, db_b, write_ini, cli):
    root_ini = write_ini("src", db_a)
    assert cli(root_ini, "create-root", "src").code == 0  # location defaults to db
    leaf_ini = write_ini("dst1", db_b)
    res = cli(leaf_ini, "create-leaf", "dst1", db_b, f"--provider={db_a}")
    assert res.code == 0, res.err
    assert 'with type "leaf"' in res.err

    consumer = q(db_a, "select last_tick from ferry_queue.get_consumer_info('replika', 'dst1')")
    assert len(consumer) == 1
    assert q(db_a, "select subscriber_node, worker_name from ferry_node.subscriber_info") == [
        ("dst1", "dst1")
    ]
    for db in (db_a, db_b):
        names = q(db, "select node_name from ferry_node.node_location order by 1")
        assert names == [("dst1",), ("src",)]
    state = q(db_b, "select consumer_name, provider_node, last_tick_id from ferry_node.local_state")
    assert state == [("dst1", "src", consumer[0][0])]
    # A leaf has no queue of its own.
    assert q(db_b, "select count(*) from ferry_queue.queue") == [(0,)]


def test_branch_chain_and_status_tree(new_db_a, new_db_b, write_ini, cli):
    root_db, branch_db, leaf_db = new_db_a(None), new_db_b(None), new_db_a(None)
    assert cli(write_ini("r", root_db), "create-root", "r").code == 0
    res = cli(write_ini("b", branch_db), "create-branch", "b", f"--provider={root_db}")
    assert res.code == 0, res.err
    assert q(branch_db, "select queue_external_ticker from ferry_queue.queue") == [(True,)]
    res = cli(write_ini("l", leaf_db), "create-leaf", "l", f"--provider={branch_db}")
    assert res.code == 0, res.err
    # The root learnt of the leaf although the leaf subscribed to the branch.
    assert ("l",) in q(root_db, "select node_name from ferry_node.node_location")
    assert q(leaf_db, "select provider_node from ferry_node.local_state") == [("b",)]

    out = cli(write_ini("r", root_db), "status").out
    assert out.startswith("Queue: replika   Local node: r")
    lines = out.splitlines()
    pos = {name: next(i for i, s in enumerate(lines) if f"{name} (" in s) for name in "rbl"}
    assert pos["r"] < pos["b"] < pos["l"]
    assert "+--: b (branch)" in out and "+--: l (leaf)" in out
    assert "Tables: 0/0/0" in out and "Tick: " in out


def test_dead_provider_is_one_line_and_changes_nothing(db_b, write_ini, cli):
    bad = f"host=127.0.0.1 port={free_port()} dbname=x user=postgres connect_timeout=2"
    res = cli(write_ini("dst", db_b), "create-leaf", "dst", f"--provider={bad}")
    assert res.code != 0
    line = res.err.strip().splitlines()[-1]
    assert line.startswith("pgferry: cannot connect to 127.0.0.1:")
    assert "Traceback" not in res.err
    assert q(db_b, "select to_regclass('ferry_node.node_info')") == [(None,)]


def test_provider_not_a_node(db_a, db_b, write_ini, cli):
    res = cli(write_ini("dst", db_b), "create-leaf", "dst", f"--provider={db_a}")
    assert res.code == 1
    assert "is not a node of queue replika" in res.err
    assert q(db_b, "select to_regclass('ferry_node.node_info')") == [(None,)]


def test_leaf_cannot_be_provider(new_db_a, write_ini, cli):
    root_db, leaf_db, other = new_db_a(None), new_db_a(None), new_db_a(None)
    cli(write_ini("r", root_db), "create-root", "r")
    cli(write_ini("l", leaf_db), "create-leaf", "l", f"--provider={root_db}")
    res = cli(write_ini("x", other), "create-leaf", "x", f"--provider={leaf_db}")
    assert res.code == 1
    assert "is a leaf" in res.err


def test_node_name_clash(new_db_a, write_ini, cli):
    root_db, leaf_db = new_db_a(None), new_db_a(None)
    cli(write_ini("r", root_db), "create-root", "r")
    res = cli(write_ini("l", leaf_db), "create-leaf", "r", f"--provider={root_db}")
    assert res.code == 1
    assert "Node name already in use: r" in res.err


def test_members_masks_passwords(db_a, db_b, write_ini, cli):
    secret_a = f"{db_a} password=Sekr1t_root"
    secret_b = f"{db_b} password=Sekr1t_leaf"
    root_ini = write_ini("src", secret_a)
    assert cli(root_ini, "create-root", "src", secret_a).code == 0
    leaf_ini = write_ini("dst", secret_b)
    res = cli(leaf_ini, "-v", "create-leaf", "dst", secret_b, f"--provider={secret_a}")
    assert res.code == 0, res.err
    for ini in (root_ini, leaf_ini):
        out = cli(ini, "members")
        assert out.code == 0
        assert "Sekr1t" not in out.out + out.err
        assert "password=[...]" in out.out
        assert out.out.splitlines()[0].split() == ["node_name", "dead", "node_location"]
        info = cli(ini, "node-info")
        assert "Sekr1t" not in info.out + info.err
    assert "Sekr1t" not in res.err
    logs = (root_ini.parent / "log").read_text() if (root_ini.parent / "log").is_file() else ""
    assert "Sekr1t" not in logs


def test_status_json_error_and_unreachable(db_a, db_b, write_ini, cli):
    root_ini = write_ini("src", db_a)
    cli(root_ini, "create-root", "src")
    leaf_ini = write_ini("dst", db_b)
    cli(leaf_ini, "create-leaf", "dst", f"--provider={db_a}")
    q(db_b, "update ferry_node.local_state set cur_error = 'connection refused'")
    # A member whose server is gone must not break status.
    gone = f"host=127.0.0.1 port={free_port()} dbname=x user=postgres"
    q(db_b, "insert into ferry_node.node_location values ('replika', 'gone', %s, false)", (gone,))

    res = cli(leaf_ini, "status")
    assert res.code == 1, res.err  # a monitor hears of both
    assert "Local node: dst" in res.out
    assert "ERR: connection refused" in res.out
    assert "gone (? unreachable)" in res.out
    assert res.err.strip().splitlines()[-1] == "pgferry: status: dst in ERR; gone unreachable"
    res = cli(leaf_ini, "status", "--dead=gone", "--dead=src")
    assert "gone (? dead)" in res.out and "src (? dead)" in res.out
    assert "Node is marked dead" in res.out
    assert res.code == 1 and "gone" not in res.err  # dead is not a problem; the ERR still is

    res = cli(root_ini, "status", "--json")
    import json

    data = json.loads(res.out)
    assert data["queue"] == "replika" and data["local_node"] == "src"
    nodes = {n["name"]: n for n in data["nodes"]}
    assert nodes["src"]["node_type"] == "root"
    assert nodes["dst"]["node_type"] == "leaf" and nodes["dst"]["provider"] == "src"
    assert nodes["dst"]["error"] == "connection refused"
    assert isinstance(nodes["dst"]["tick"], int)
    assert nodes["src"]["lag_seconds"] is not None
    assert data["problems"] == ["dst in ERR"]  # the root does not list "gone"
    assert res.code == 1
    q(db_b, "update ferry_node.local_state set cur_error = null")
    res = cli(leaf_ini, "status", "--dead=gone")
    assert res.code == 0 and "pgferry: status" not in res.err, res.err


def test_node_info(db_a, write_ini, cli):
    ini = write_ini("src", db_a)
    cli(ini, "create-root", "src")
    out = cli(ini, "node-info").out
    assert "node_type" in out and "root" in out and "status" in out and "OK" in out
    assert model is not None


def test_status_follows_ticks(db_a, db_b, write_ini, cli):
    import json

    root_ini = write_ini("src", db_a)
    cli(root_ini, "create-root", "src")
    cli(write_ini("dst", db_b), "create-leaf", "dst", f"--provider={db_a}")
    before = {n["name"]: n for n in json.loads(cli(root_ini, "status", "--json").out)["nodes"]}
    q(db_a, "select ferry_queue.force_tick('replika')")
    (new_tick,) = q(db_a, "select ferry_queue.ticker('replika')")[0]
    after = {n["name"]: n for n in json.loads(cli(root_ini, "status", "--json").out)["nodes"]}
    assert after["src"]["tick"] == new_tick > before["src"]["tick"]
    # The leaf has applied nothing yet: it stays at its registration tick.
    assert after["dst"]["tick"] == before["dst"]["tick"] < new_tick
    assert after["dst"]["lag_seconds"] >= 0
