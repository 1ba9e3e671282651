"""``queues`` and ``consumers``: ``--json`` parses, rates print with one decimal."""

from __future__ import annotations

import json
import re

import psycopg


def test_queues_and_consumers_json_and_rates(db_a, write_ini, cli) -> None:
    ini = write_ini("node", db_a, queue="q")
    assert cli(ini, "install").code == 0
    with psycopg.connect(db_a, autocommit=True) as conn:
        conn.execute("select ferry_queue.create_queue('q')")
        conn.execute("select ferry_queue.register_consumer('q', 'reader')")
        for events in (1, 2):  # two ticks with events between: a rate like 1234.56789...
            for n in range(events):
                conn.execute("select ferry_queue.insert_event('q', 'x', %s)", (str(n),))
            conn.execute("select ferry_queue.force_tick('q')")
            conn.execute("select ferry_queue.ticker('q')")
        exact = conn.execute("select ev_per_sec from ferry_queue.get_queue_info('q')").fetchone()
    assert exact is not None and exact[0] is not None

    res = cli(ini, "queues")
    assert res.code == 0, res.err
    header, _dashes, row = res.out.splitlines()[:3]
    rate = row.split()[header.split().index("ev_per_sec")]
    assert re.fullmatch(r"\d+\.\d", rate), rate
    assert float(rate) == round(exact[0], 1)

    res = cli(ini, "queues", "--json")
    assert res.code == 0, res.err
    (queue,) = json.loads(res.out)
    assert queue["queue_name"] == "q" and queue["ev_per_sec"] == round(exact[0], 1)
    assert isinstance(queue["ticker_lag"], float)  # intervals in seconds
    assert isinstance(queue["queue_ticker_max_lag"], float)
    assert queue["queue_external_ticker"] is False

    res = cli(ini, "consumers", "q", "--json")
    assert res.code == 0, res.err
    (consumer,) = json.loads(res.out)
    assert consumer["consumer_name"] == "reader" and consumer["pending_events"] == 3
    assert isinstance(consumer["lag"], float) and consumer["last_tick"] == 1
