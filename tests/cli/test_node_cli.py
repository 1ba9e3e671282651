"""The node and table commands' command-line behaviour: bad ini files, wrong node types,
usage errors and the --ini template."""

from __future__ import annotations

import configparser

import psycopg

from pgferry.cli.ini_template import template_for


def test_missing_ini(tmp_path, cli):
    res = cli(tmp_path / "nope.ini", "create-root", "x")
    assert res.code == 1
    assert res.err.strip() == f"pgferry: config file not found: {tmp_path / 'nope.ini'}"


def test_ini_without_section(tmp_path, cli):
    path = tmp_path / "bad.ini"
    path.write_text("[other]\ndb = x\n")
    res = cli(path, "status")
    assert res.code == 1
    assert "no [pgferry] or [londiste3] or [londiste] section" in res.err
    assert "Traceback" not in res.err


def test_ini_missing_db_and_queue(tmp_path, cli):
    path = tmp_path / "nodb.ini"
    path.write_text("[londiste3]\nqueue_name = replika\n")
    res = cli(path, "create-root", "x")
    assert res.code == 1 and "missing setting 'db' in [londiste3]" in res.err
    path.write_text("[londiste3]\ndb = dbname=x\n")
    res = cli(path, "members")
    assert res.code == 1 and "missing setting 'queue_name'" in res.err


def test_unparsable_ini(tmp_path, cli):
    path = tmp_path / "broken.ini"
    path.write_text("no section header here\n")
    res = cli(path, "tables")
    assert res.code == 1 and "cannot parse config" in res.err


def test_commands_on_uninitialised_database(db_a, write_ini, cli):
    ini = write_ini("n", db_a)
    for command in ("members", "status", "tables", "seqs", "missing", "node-info"):
        res = cli(ini, command)
        assert res.code == 1, command
        assert (
            res.err.strip() == "pgferry: Node not initialized for queue: replika "
            "(run create-root/branch/leaf)"
        ), command


def test_wrong_node_type_and_usage(db_a, db_b, write_ini, cli):
    root_ini = write_ini("src", db_a)
    res = cli(root_ini, "create-root", "src", "--provider=dbname=x")
    assert res.code == 2  # create-root takes no provider
    assert cli(root_ini, "create-root", "src").code == 0
    leaf_ini = write_ini("dst", db_b)
    res = cli(leaf_ini, "create-leaf", "dst")
    assert res.code == 2 and "--provider=CONNSTR is required" in res.err
    res = cli(leaf_ini, "create-leaf")
    assert res.code == 2 and "NODE name is required" in res.err
    assert cli(leaf_ini, "create-leaf", "dst", f"--provider={db_a}").code == 0
    res = cli(root_ini, "resync", "--all")
    assert res.code == 1 and "not possible on the root node" in res.err
    res = cli(root_ini, "add-table", "--create", "public.x")
    assert res.code == 2 and "branch and leaf nodes only" in res.err
    res = cli(root_ini, "add-table")
    assert res.code == 2 and "give TABLE names or --all" in res.err
    res = cli(root_ini, "add-table", "a.b.c")
    assert res.code == 2 and "bad name" in res.err


def test_public_location_must_be_same_database(db_a, db_b, write_ini, cli):
    res = cli(write_ini("src", db_a), "create-root", "src", db_b)
    assert res.code == 1 and "Public connect string points to different database" in res.err
    with psycopg.connect(db_a) as conn:
        row = conn.execute("select to_regclass('ferry_node.node_info')").fetchone()
    assert row == (None,)
    assert cli(write_ini("src", db_a), "create-root", "src", db_b, "--nocheck").code == 0


def test_logfile_written_without_secrets(tmp_path, db_a, write_ini, cli):
    ini = write_ini("src", f"{db_a} password=Hidden99")
    assert cli(ini, "create-root", "src").code == 0
    log = (tmp_path / "log" / "src.log").read_text()
    assert "initialized for queue" in log
    assert "Hidden99" not in log


def test_ini_template(tmp_path, cli):
    res = cli("--ini")
    assert res.code == 0
    parser = configparser.ConfigParser(interpolation=None)
    parser.read_string(res.out)
    assert parser.sections() == ["pgferry"]
    for key in ("db", "queue_name"):
        assert parser.has_option("pgferry", key)
    for key in ("parallel_copies", "lock_timeout", "spark_master", "logfile", "local_only"):
        assert f"#{key} = " in res.out

    path = tmp_path / "mine.ini"
    path.write_text("[londiste3]\ndb = dbname=x\nqueue_name = replika\nparallel_copies = 16\n")
    res = cli(path, "--ini")
    assert res.code == 0
    assert res.out.startswith("[londiste3]")
    assert "parallel_copies = 16" in res.out and "queue_name = replika" in res.out

    ticker = tmp_path / "pgqd.ini"
    ticker.write_text("[pgqd]\nbase_connstr = host=127.0.0.1\n")
    text = template_for(ticker)
    assert text.startswith("[pgqd]") and "base_connstr = host=127.0.0.1" in text


def test_ini_ticker_template_and_a_missing_file(tmp_path, cli):
    res = cli("--ini", "ticker")
    assert res.code == 0
    parser = configparser.ConfigParser(interpolation=None)
    parser.read_string(res.out)
    assert parser.sections() == ["pgqd"] and parser.has_option("pgqd", "base_connstr")
    assert cli("--ini", "node").out == cli("--ini").out
    res = cli(tmp_path / "nosuch.ini", "--ini")
    assert res.code == 1 and res.out == ""
    assert res.err.strip().splitlines() == [
        f"pgferry: --ini: no such file: {tmp_path / 'nosuch.ini'}"
        " (or give node or ticker for an empty template)"
    ]
