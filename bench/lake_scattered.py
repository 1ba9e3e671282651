"""Scattered updates on a large table: Delta and Iceberg lake leaves beside a PostgreSQL
leaf of the same root.

On a throw-away cluster, ``t (id bigint primary key, i int, n numeric(12,2), s text)``
(``s`` 40 characters) of ROWS rows is loaded into the leaves: Delta, Iceberg written
copy-on-write, Iceberg written merge-on-read (``iceberg_mor``: handler argument
``deletes=merge-on-read``), each a lake leaf with ``lake_compact_interval = 0`` so that every byte
written is replay's, and PostgreSQL (handler bulk).  Their workers loop in threads, the
root ticks every TICK seconds, and a writer changes RATE rows a second for SECONDS, keys
drawn over the whole table: 90 % updates, 5 % inserts (new keys), 5 % deletes, in commits
of RATE / 10 rows.

Figures per leaf: the lag when the writer stops (seconds until the leaf holds the root's
tick made then), the lake's commits and bytes added during the run (every file in the
table's folder, nothing vacuumed) per changed row, beside the stored row size (the lake
table's bytes after the load / ROWS); Delta's MERGE times from its log
(``execution_time_ms``), the files they rewrote and the rows copied unchanged into new
files; each lake's commit times (the handler's merge call, the lake write of one batch
part: median, 90th percentile, max) and batch sizes; and whether each lake table holds the
same rows as the PostgreSQL leaf at the end.

    .venv/bin/python -m bench.lake_scattered --rows 2000000 --rate 1000 --seconds 60
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench.common import machine, write_results
from pgferry.db import connect
from pgferry.testing.cascade import Cascade
from pgferry.testing.cluster import make_cluster

DDL = "create table public.t (id bigint primary key, i int, n numeric(12,2), s text)"
FILL = ("insert into public.t select g, g %% 1000, g / 7.0, md5(g::text) || lpad(g::text, 8, '0')"
        " from generate_series(1, %s) g")  # fmt: skip
# leaf name -> (lake format, the table's handler arguments; per table, not in the ini:
# the workers of one process share one handler config)
LAKES = {
    "delta": ("delta", []),
    "iceberg": ("iceberg", ["deletes=copy-on-write"]),
    "iceberg_mor": ("iceberg", ["deletes=merge-on-read"]),
}


def _timed_merges(lakes: dict[str, Path]) -> dict[str, list[tuple[float, int]]]:
    """Wrap each format's merge: (seconds, rows of the batch part) per leaf, found by the
    lake folder its spec names (the workers run in this process's threads)."""
    from pgferry.lake import delta, iceberg

    found: dict[str, list[tuple[float, int]]] = {name: [] for name in lakes}
    by_root = {str(path): name for name, path in lakes.items()}
    for module in (delta, iceberg):
        real = module.merge

        def timed(spec, source, *args, _real=real, **kwargs):
            began = time.monotonic()
            done = _real(spec, source, *args, **kwargs)
            if spec.root in by_root:
                found[by_root[spec.root]].append((time.monotonic() - began, source.num_rows))
            return done

        module.merge = timed  # type: ignore[assignment]
    return found


def _times(merges: list[tuple[float, int]]) -> dict:
    if not merges:
        return {}
    secs = sorted(t for t, _ in merges)
    return {
        "merges": len(merges),
        "merge_s_median": round(statistics.median(secs), 3),
        "merge_s_p90": round(secs[int(0.9 * (len(secs) - 1))], 3),
        "merge_s_max": round(secs[-1], 3),
        "rows_per_merge_median": statistics.median(n for _, n in merges),
    }


def _folder_bytes(path: Path) -> tuple[int, int]:
    files = [p for p in path.rglob("*") if p.is_file()]
    return len(files), sum(p.stat().st_size for p in files)


def _writer(dsn: str, rows: int, rate: float, stop: threading.Event, done: dict) -> None:
    """Commits of rate / 10 changes every 100 ms: 90 % updates, 5 % inserts, 5 % deletes."""
    per = max(20, int(rate / 10))
    next_id = rows + 1
    rng = random.Random(45)
    with connect(dsn, autocommit=True) as conn:
        while not stop.is_set():
            began = time.monotonic()
            ups = [rng.randint(1, next_id - 1) for _ in range(per * 90 // 100)]
            dels = [rng.randint(1, next_id - 1) for _ in range(per * 5 // 100)]
            ins = list(range(next_id, next_id + per * 5 // 100))
            next_id += len(ins)
            with conn.transaction():
                conn.execute("update public.t set i = i + 1, n = n + 0.01, s = md5(s) || '-updated'"
                             " where id = any(%s)", (ups,))  # fmt: skip
                conn.execute("delete from public.t where id = any(%s)", (dels,))
                conn.execute("insert into public.t select g, 1, 0.5, md5(g::text) || '+inserted'"
                             " from unnest(%s::bigint[]) g", (ins,))  # fmt: skip
            done["changes"] = done.get("changes", 0) + len(ups) + len(dels) + len(ins)
            time.sleep(max(0.0, 0.1 - (time.monotonic() - began)))


def _rows(name: str, cascade: Cascade, lakes: dict[str, Path]):
    import pyarrow as pa

    from pgferry.lake import formats
    from pgferry.lake.spec import LakeSpec

    if name == "pg":
        found = cascade.sql("pg", "select id, i, n, s from public.t")
        return sorted(found)
    fmt = LAKES[name][0]
    table: pa.Table = formats.module(fmt).read(LakeSpec(fmt, str(lakes[name]), "public", "t", ""))
    return sorted(zip(*(table[c].to_pylist() for c in ("id", "i", "n", "s")), strict=True))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--rate", type=float, default=1000)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--tick", type=float, default=0.5)
    parser.add_argument("--lakes", default="delta,iceberg,iceberg_mor")
    parser.add_argument(
        "--lag-limit",
        type=float,
        default=1800,
        help="seconds to wait for the leaves once the writer stopped",
    )
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    started = dt.datetime.now(dt.UTC)
    work = Path(tempfile.mkdtemp(prefix="pgferry-lake-scattered-"))
    cluster = make_cluster("lake-scattered")
    names = [n for n in args.lakes.split(",") if n in LAKES]
    lakes = {n: work / f"lake_{n}" for n in names}
    doc: dict = {"machine": machine(), "started": started.isoformat(), "args": vars(args),
                 "loadavg_start": os.getloadavg()}  # fmt: skip
    try:
        cascade = Cascade("scat", work)
        for name in ("root", *names, "pg"):
            cascade.dsns[name] = cluster.createdb(f"scat_{name}")
        cascade.node("root", cascade.dsns["root"], "root")
        for name in names:
            cascade.node(name, cascade.dsns[name], "leaf", "root", lake_path=str(lakes[name]),
                         lake_format=LAKES[name][0], lake_compact_interval="0")  # fmt: skip
        cascade.node("pg", cascade.dsns["pg"], "leaf", "root")
        cascade.sql("root", DDL)
        cascade.sql("root", FILL, (args.rows,))
        cascade.sql("root", "vacuum analyze public.t")
        cascade.add("root", "public.t")
        for name in names:
            cascade.add(name, "public.t", handler="lake", create=True,
                        handler_args=LAKES[name][1])  # fmt: skip
        cascade.add("pg", "public.t", create=True)
        t0 = time.monotonic()
        cascade.catch_up(*names, "pg", timeout=7200)
        doc["load_s"] = round(time.monotonic() - t0, 1)
        before = {n: _folder_bytes(lakes[n] / "public" / "t") for n in names}
        doc["stored_row_bytes"] = {n: round(before[n][1] / args.rows, 1) for n in names}
        stop, done = threading.Event(), {}
        merges = _timed_merges(lakes)
        with cascade.running(*names, "pg", every=args.tick):
            writer = threading.Thread(target=_writer, args=(cascade.dsns["root"], args.rows,
                                                            args.rate, stop, done))  # fmt: skip
            writer.start()
            time.sleep(args.seconds)
            stop.set()
            writer.join()
            stopped = time.monotonic()
            target = cascade.tick()
            lag: dict[str, float] = {}
            while len(lag) < len(names) + 1 and time.monotonic() - stopped < args.lag_limit:
                for name in (*names, "pg"):
                    if name not in lag and (cascade.last_tick(name) or 0) >= target:
                        lag[name] = round(time.monotonic() - stopped, 1)
                time.sleep(0.1)
        doc["changes"] = done.get("changes", 0)
        doc["lag_at_stop_s"] = lag
        per: dict[str, dict] = {}
        for name in names:
            files, size = _folder_bytes(lakes[name] / "public" / "t")
            added = size - before[name][1]
            per[name] = {
                "files_added": files - before[name][0], "bytes_added": added,
                "bytes_per_changed_row": round(added / max(doc["changes"], 1)),
                "times_stored_row": round(added / max(doc["changes"], 1)
                                          / doc["stored_row_bytes"][name], 1),
                **_times(merges[name]),
            }  # fmt: skip
        if "delta" in names:
            from deltalake import DeltaTable

            history = DeltaTable(str(lakes["delta"] / "public" / "t")).history()
            merges = [h for h in history if h.get("operation") == "MERGE"]
            times = [h["operationMetrics"].get("execution_time_ms", 0) for h in merges]
            per["delta"]["files_rewritten"] = sum(
                h["operationMetrics"].get("num_target_files_removed", 0) for h in merges
            )
            per["delta"]["rows_copied"] = sum(
                h["operationMetrics"].get("num_target_rows_copied", 0) for h in merges
            )
            per["delta"]["commits"] = len(merges)
            if times:
                per["delta"]["merge_ms_median"] = statistics.median(times)
                per["delta"]["merge_ms_max"] = max(times)
        for name in names:
            if LAKES[name][0] != "iceberg":
                continue
            from pgferry.lake import iceberg
            from pgferry.lake.spec import LakeSpec

            table = iceberg._table(LakeSpec("iceberg", str(lakes[name]), "public", "t", ""))
            per[name]["snapshots"] = len(table.snapshots())
            summary = table.current_snapshot().summary
            per[name]["delete_files"] = summary.get("total-delete-files")
            per[name]["data_files"] = summary.get("total-data-files")
        doc["lakes"] = per
        pg_rows = _rows("pg", cascade, lakes)
        doc["equal_to_pg_leaf"] = {n: _rows(n, cascade, lakes) == pg_rows for n in names}
        doc["root_equal_pg_leaf"] = (
            sorted(cascade.sql("root", "select id, i, n, s from public.t")) == pg_rows
        )
        cascade.close()
    finally:
        cluster.destroy()
    doc["loadavg_end"] = os.getloadavg()
    path = write_results(doc, "lake_scattered", started, args.out)
    for key in (
        "load_s",
        "stored_row_bytes",
        "changes",
        "lag_at_stop_s",
        "lakes",
        "equal_to_pg_leaf",
        "root_equal_pg_leaf",
        "loadavg_start",
        "loadavg_end",
    ):
        print(f"{key}: {doc.get(key)}")
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
