"""The measured phases, written once for both systems: initial copy, steady lag, catch-up.

Each phase returns a dict of figures, including ``equal`` from a count + checksum
comparison of all four tables on both sides once the leaf has caught up.
"""

from __future__ import annotations

import math
import os
import statistics
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from bench.repl_env import (
    SEQUENCES,
    TABLES,
    BenchError,
    Load,
    compare_sides,
    qualified,
    raw_pipe,
    row_counts,
    run_load,
    wait_for,
)
from bench.repl_systems import QUEUE, Rig
from pgferry.db import connect

# Bound on the wait for the leaf worker's steady state before a copy (Spark's start takes
# from seconds to half a minute on a busy machine).
READY_TIMEOUT_S = 120


@dataclass
class Durations:
    backlog_s: int
    bench_s: int
    copy_timeout_s: int
    catchup_timeout_s: int


def percentile(values: list[float], pct: float) -> float:
    """Nearest-rank percentile (no interpolation: a value that was actually sampled)."""
    ordered = sorted(values)
    rank = max(1, math.ceil(pct / 100 * len(ordered)))
    return ordered[rank - 1]


def _settle(rig: Rig, d: Durations) -> None:
    if not rig.leaf_running():
        rig.start_leaf()
    rig.wait_caught_up(d.catchup_timeout_s)


def wait_ready(rig: Rig, timeout: float) -> dict:
    """Wait until the leaf worker runs (:meth:`Rig.leaf_ready`).

    A caught-up pgferry worker runs without Spark: the copy starts it, and its start is part
    of the copy's time, as in production.
    """
    t0 = time.monotonic()
    ready = rig.leaf_ready()
    while not ready and time.monotonic() - t0 < timeout:
        time.sleep(0.1)
        ready = rig.leaf_ready()
    res: dict = {"worker_ready_wait_s": round(time.monotonic() - t0, 3)}
    if not ready:
        res["worker_ready_note"] = f"leaf worker not ready after {timeout:g} s, copied anyway"
    return res


def checked(rig: Rig, d: Durations) -> dict:
    """Wait until the leaf has applied everything written so far, then compare both sides."""
    rig.wait_caught_up(d.catchup_timeout_s)
    result = compare_sides(rig.pair)
    if not result["equal"]:
        result["note"] = f"tables differ after catch-up: {', '.join(result['differing'])}"
    return result


# --- initial copy ----------------------------------------------------------------------------


def copy_tables(rig: Rig, d: Durations, outdir: Path, busy: bool, add_seqs: bool) -> dict:
    """add-table of the four tables on the leaf until all are ok, idle or under the load.

    Before it, the raw psql pipe of the same rows into the same (emptied) leaf tables.
    """
    _settle(rig, d)
    ready = wait_ready(rig, READY_TIMEOUT_S)
    if rig.leaf_states():
        rig.leaf("remove-table", *(qualified(t) for t in TABLES))
    counts = row_counts(rig.pair, "root")
    res: dict = {
        "queue": "busy" if busy else "idle",
        "ticker_idle_period": rig.idle_period(),
        "rows": sum(counts.values()),
        "rows_per_table": counts,
        **ready,
    }
    res["raw_pipe_s"] = raw_pipe(rig.pair)["seconds"]
    load = None
    if busy:
        # Long -T, stopped as soon as the copy is done.
        load = Load(rig.pair, d.copy_timeout_s + 120, outdir, f"{rig.name}_copy_busy").start()
        time.sleep(1.0)  # let pgbench connect so the copy really starts on a busy queue
    try:
        t0 = time.monotonic()
        rig.leaf("add-table", *(qualified(t) for t in TABLES))
        t_add = time.monotonic() - t0
        t_copied: float | None = None
        while True:
            states = rig.leaf_states()
            now = time.monotonic() - t0
            if t_copied is None and all(s not in (None, "in-copy") for s in states):
                t_copied = now
            if len(states) == len(TABLES) and all(s == "ok" for s in states):
                break
            if now > d.copy_timeout_s:
                shown = sorted(map(str, states))
                raise BenchError(f"copy not done after {d.copy_timeout_s} s, leaf states: {shown}")
            time.sleep(0.1)
        t_ok = time.monotonic() - t0
    finally:
        if load is not None:
            load.stop()
    res.update(
        add_table_cmd_s=round(t_add, 3),
        copy_done_s=round(t_copied if t_copied is not None else t_ok, 3),
        all_ok_s=round(t_ok, 3),
        ratio_to_raw=round(t_ok / res["raw_pipe_s"], 2) if res["raw_pipe_s"] else None,
        rows_at_ok=sum(row_counts(rig.pair, "root").values()),
    )
    if add_seqs:
        rig.leaf("add-seq", *(qualified(s) for s in SEQUENCES))
    res["check"] = checked(rig, d)
    return res


# --- steady-state lag ----------------------------------------------------------------------


class LagSampler(threading.Thread):
    """The leaf consumer's lag on the root, once a second, on its own connection.

    ``times`` holds the ``time.monotonic()`` of each sample, to split them by period.
    """

    def __init__(self, rig: Rig) -> None:
        super().__init__(daemon=True)
        self.rig = rig
        self.samples: list[float] = []
        self.times: list[float] = []
        self.errors: list[str] = []
        self._halt = threading.Event()

    def run(self) -> None:
        query = self.rig._q(
            "select extract(epoch from lag)::float8 from {q}.get_consumer_info(%s, %s)"
        )
        with connect(self.rig.pair.dsn("root"), autocommit=True) as conn:
            next_at = time.monotonic()
            while not self._halt.is_set():
                try:
                    row = conn.execute(query, (QUEUE, self.rig.consumer)).fetchone()
                    if row and row[0] is not None:
                        self.samples.append(round(float(row[0]), 3))
                        self.times.append(time.monotonic())
                except Exception as exc:  # keep sampling; report what went wrong
                    self.errors.append(str(exc).splitlines()[0])
                next_at += 1.0
                self._halt.wait(max(0.0, next_at - time.monotonic()))

    def stop(self) -> None:
        self._halt.set()
        self.join()


def steady_lag(rig: Rig, d: Durations, outdir: Path) -> dict:
    _settle(rig, d)
    sampler = LagSampler(rig)
    sampler.start()
    try:
        load = run_load(rig.pair, d.bench_s, outdir, f"{rig.name}_lag")
    finally:
        sampler.stop()
    samples = sampler.samples
    if not samples:
        raise BenchError(f"no lag samples ({'; '.join(sampler.errors[:2]) or 'none taken'})")
    res = {
        "load": load,
        "source_tps": load["tps"],
        "samples": len(samples),
        "lag_median_s": round(statistics.median(samples), 3),
        "lag_p95_s": round(percentile(samples, 95), 3),
        "lag_max_s": round(max(samples), 3),
        "lag_min_s": round(min(samples), 3),
        "sample_errors": sampler.errors[:5],
        "raw_samples": samples,
    }
    res["check"] = checked(rig, d)
    return res


# --- catch-up ----------------------------------------------------------------------------


def _cpu_ticks() -> tuple[int, int]:
    """(busy, total) jiffies of the whole machine so far (/proc/stat's first line)."""
    with open("/proc/stat") as f:
        fields = [int(v) for v in f.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return sum(fields[:8]) - idle, sum(fields[:8])


def catch_up(rig: Rig, d: Durations, outdir: Path) -> dict:
    """Stop the leaf worker, build a backlog with the load, start it, time the catch-up."""
    _settle(rig, d)
    rig.stop_leaf()
    load = run_load(rig.pair, d.backlog_s, outdir, f"{rig.name}_backlog")
    target = rig.force_tick()
    start_tick = rig.consumer_position()[0]
    pending = rig.pending_events()
    log_at = rig.log_size()
    wall0 = time.time()
    cpu0 = _cpu_ticks()
    t0 = time.monotonic()
    rig.start_leaf()
    t_started = time.monotonic() - t0
    first: list[float] = []

    def done() -> bool:
        tick = rig.consumer_position()[0]
        if not first and tick != start_tick:
            first.append(time.monotonic() - t0)
        return rig.reached(target)

    # Looked at every 0.02 s: a pgferry catch-up takes about 2 s, and a coarser poll adds
    # half its period to every system's figure on average.
    wait_for(f"{rig.name} catch-up to tick {target}", done, d.catchup_timeout_s, poll=0.02)
    elapsed = time.monotonic() - t0
    cpu1 = _cpu_ticks()
    busy_share = (cpu1[0] - cpu0[0]) / max(1, cpu1[1] - cpu0[1])
    res = {
        "load": load,
        "source_tps": load["tps"],
        "backlog_events": load["events"],
        "pending_events": pending,
        "backlog_ticks": target - start_tick,
        "worker_start_cmd_s": round(t_started, 3),
        "first_batch_s": round(first[0], 3) if first else round(elapsed, 3),
        "catchup_s": round(elapsed, 3),
        "events_per_s": round(load["events"] / elapsed, 1),
        # The whole machine's busy cores over the catch-up (every process, the poll too).
        "machine_busy_cores": round(busy_share * (os.cpu_count() or 1), 2),
    }
    spark_at = _logged_at(rig.log_since(log_at, keep=10**6), "Spark session started")
    if spark_at is not None:
        # Only logged with --pgferry-verbose: when the worker's Spark session came up (the
        # worker may start it in the background while it replays on its driver path).
        res["spark_started_s"] = round(spark_at - wall0, 3)
    res["check"] = checked(rig, d)
    return res


def _logged_at(lines: list[str], text: str) -> float | None:
    """Epoch time of the first log line containing ``text`` (log times are local time)."""
    for line in lines:
        if text in line:
            try:
                stamp = time.strptime(line[:19], "%Y-%m-%d %H:%M:%S")
                return time.mktime(stamp) + int(line[20:23]) / 1000
            except ValueError:
                return None
    return None
