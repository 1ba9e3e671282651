"""The harness itself: real clusters start, databases are isolated, schemas install."""

import psycopg

from pgferry import schema
from pgferry.db import connect, mask_connstr


def test_clusters_are_real_and_separate(db_a: str, db_b: str) -> None:
    with psycopg.connect(db_a) as a, psycopg.connect(db_b) as b:
        port_a = a.execute("show port").fetchone()[0]
        port_b = b.execute("show port").fetchone()[0]
        assert port_a != port_b
        assert a.execute("select current_setting('fsync')").fetchone()[0] == "off"


def test_install_is_idempotent_and_records_versions(db_a: str) -> None:
    with connect(db_a) as conn:
        first = schema.install(conn, ("ferry",))
        assert first, "a fresh database must get every file"
        again = schema.install(conn, ("ferry",))
        assert again == []
        versions = schema.installed_versions(conn)
    for component in schema.COMPONENTS:
        assert versions[component] == schema.latest_version(component)


def test_mask_connstr_hides_passwords() -> None:
    masked = mask_connstr("host=x password=s3cret user=u")
    assert "s3cret" not in masked and "password=[...]" in masked
    assert "s3cret" not in mask_connstr("postgresql://u:s3cret@h/db")
    assert "s3cret" not in mask_connstr("host=x password='a b s3cret'")


def test_missing_server_user_is_one_clear_line(monkeypatch, tmp_path) -> None:
    import pwd

    import pytest

    from pgferry.errors import PgferryError
    from pgferry.testing import cluster

    monkeypatch.setattr(cluster, "_is_root", lambda: True)
    monkeypatch.setattr(cluster, "RUN_AS", "pgferry-no-such-user")
    with pytest.raises(KeyError):
        pwd.getpwnam("pgferry-no-such-user")
    with pytest.raises(PgferryError, match="useradd --system --create-home pgferry-no-such"):
        cluster.LocalCluster(base_dir=tmp_path / "c").init()
