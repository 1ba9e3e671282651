"""An object store that stalls during a lake commit: the S3-protocol server of the test
(moto's, a process of its own) is stopped with SIGSTOP as the batch's MERGE begins, so the
commit's requests are never answered.  The worker gives up within about twice
``lake_timeout`` (the batch fails, nothing is recorded in PostgreSQL); once the store
answers again the next attempt commits the tick exactly once."""

from __future__ import annotations

import os
import signal
import time

import pytest
from conftest import s3_rows, sorted_rows

from pgferry.lake import delta, storage
from pgferry.testing.s3 import moto_server


def _ticks(location: str, options) -> list[int]:
    from deltalake import DeltaTable

    history = DeltaTable(location, storage_options=options).history()
    return [int(h["pgferry.tick"]) for h in reversed(history) if h.get("pgferry.tick") is not None]


def test_store_stalls_during_the_commit(make_pair, monkeypatch) -> None:
    with moto_server() as server:
        server.client.create_bucket(Bucket="lake")
        path = "s3://lake/p"
        pair = make_pair(lake_path=path, **server.settings(lake_timeout="3"))
        for side in (pair.root, pair.leaf):
            side("create table public.t (id int primary key, v int)")
        pair.root("insert into t select g, g from generate_series(1, 50) g")
        pair.add_tables("public.t", handler="lake")
        worker = pair.catch_up()
        location = f"{path}/public/t"
        options = storage.delta_options(server.options())
        real = delta.merge

        def stalled(*args, **kwargs):
            os.kill(server.pid, signal.SIGSTOP)
            return real(*args, **kwargs)

        monkeypatch.setattr(delta, "merge", stalled)
        pair.root("update t set v = -v where id <= 10")
        tick = pair.tick()
        started = time.monotonic()
        try:
            with pytest.raises(Exception):  # noqa: B017 - the store's timeout as the worker meets it
                worker.work()
            took = time.monotonic() - started
        finally:
            os.kill(server.pid, signal.SIGCONT)
        assert took < 30, took  # lake_timeout 3 s, the retries within 3 s more
        assert pair.last_tick() < tick

        monkeypatch.setattr(delta, "merge", real)
        pair.catch_up(pair.worker())
        assert _ticks(location, options).count(tick) == 1
        assert s3_rows(server, location) == sorted_rows(pair.root("select id, v from t"))
