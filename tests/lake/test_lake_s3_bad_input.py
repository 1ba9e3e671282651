"""Bad input for a lake leaf on object storage: a bucket that does not exist, refused
credentials, an endpoint that does not answer, a prefix another node's table holds, a
scheme no library knows.  Each is one line naming the path (no secret in it), a non-zero
exit, and nothing registered (not even the leaf's table add-table would have made)."""

from __future__ import annotations

from conftest import moto_server

from pgferry.testing.cluster import free_port

DDL = "create table public.t (id int primary key, v text)"


def _pair(make_pair, path: str, settings: dict[str, str]):
    pair = make_pair(lake_path=path, **settings)
    pair.root(DDL)
    pair.cascade.add("rootnode", "public.t")
    return pair


def _refused(pair, node: str = "leafnode", secret: str = "") -> str:
    done = pair.cascade.cli(node, "add-table", "public.t", "--handler=lake")
    assert done.code != 0, done.out
    lines = [line for line in done.err.splitlines() if line.strip()]
    assert len(lines) == 1, done.err
    dsn = pair.cascade.dsns[node]
    assert pair.sql(dsn, "select count(*) from ferry.table_info where local") == [(0,)]
    assert pair.sql(dsn, "select to_regclass('public.t') is null") == [(True,)]
    if secret:
        assert secret not in done.err + done.out
    return lines[0]


def test_bucket_missing(make_pair, s3_server) -> None:
    pair = _pair(make_pair, "s3://no-such-bucket/lake", s3_server.settings())
    line = _refused(pair, secret=s3_server.secret)
    assert "lake path s3://no-such-bucket/lake cannot be written" in line, line


def test_endpoint_not_answering(make_pair, s3_server) -> None:
    settings = s3_server.settings(lake_s3_endpoint=f"http://127.0.0.1:{free_port()}",
                                  lake_timeout="3")  # fmt: skip
    pair = _pair(make_pair, "s3://lake/p", settings)
    line = _refused(pair, secret=s3_server.secret)
    assert "lake path s3://lake/p cannot be written" in line, line


def test_wrong_credentials(make_pair) -> None:
    """moto checks keys only when asked to (after its first request, which makes the
    bucket): then the test's keys are unknown to it."""
    with moto_server(INITIAL_NO_AUTH_ACTION_COUNT="1") as strict:
        strict.client.create_bucket(Bucket="lake")
        pair = _pair(make_pair, "s3://lake/p", strict.settings())
        line = _refused(pair, secret=strict.secret)
    assert "lake path s3://lake/p cannot be written" in line, line


def test_prefix_of_another_node(make_pair, s3_lake, new_db_b) -> None:
    server, path = s3_lake
    pair = _pair(make_pair, path, server.settings())
    pair.cascade.add("leafnode", "public.t", handler="lake")
    other = new_db_b(None)
    pair.cascade.node("other", other, "leaf", "rootnode", lake_path=path, **server.settings())
    line = _refused(pair, node="other", secret=server.secret)
    assert f"{path}/public/t is the lake table of leafnode's public.t" in line, line


def test_unknown_scheme(make_pair) -> None:
    pair = _pair(make_pair, "ftp://host/lake", {})
    assert "unknown scheme ftp://" in _refused(pair)
