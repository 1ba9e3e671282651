"""Figures of a replication benchmark run as a table: plain for the terminal, or Markdown.

    .venv/bin/python -m bench.repl_report bench/results/replication_vs_londiste_<when>.json
prints the Markdown table of a recorded run (for BENCHMARKS.md).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

# Goals of the replication issue.
GOAL_CATCHUP_FACTOR = 10.0
GOAL_NATIVE_FACTOR = 2.5
GOAL_LAG_P95_S = 2.5
GOAL_COPY_FACTOR = 3.0


def _get(results: dict, system: str, phase: str, key: str):
    res = results.get(system, {}).get("phases", {}).get(phase, {})
    if "error" in res:
        return "FAILED"
    return res.get(key)


def _fmt(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "NO"
    if isinstance(value, float):
        return f"{value:,.2f}" if value < 1000 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def _equal(results: dict, system: str, phase: str):
    res = results.get(system, {}).get("phases", {}).get(phase)
    if res is None:
        return None
    if "error" in res:
        return "FAILED"
    return (res.get("check") or {}).get("equal")


def report_rows(results: dict) -> list[tuple[str, str, str, str]]:
    rows: list[tuple[str, str, str, str]] = []

    def add(label: str, phase: str, key: str, goal: str = "") -> None:
        rows.append(
            (
                label,
                _fmt(_get(results, "pgferry", phase, key)),
                _fmt(_get(results, "londiste", phase, key)),
                goal,
            )
        )

    def add_equal(phase: str) -> None:
        rows.append(
            (
                f"{phase}: tables equal after catch-up",
                _fmt(_equal(results, "pgferry", phase)),
                _fmt(_equal(results, "londiste", phase)),
                "",
            )
        )

    ev_p = _get(results, "pgferry", "catchup", "events_per_s")
    ev_l = _get(results, "londiste", "catchup", "events_per_s")
    factor = ""
    if isinstance(ev_p, float) and isinstance(ev_l, float) and ev_l:
        factor = f"{ev_p / ev_l:.2f}x Londiste"
    add("catchup: backlog events", "catchup", "backlog_events")
    add("catchup: backlog ticks", "catchup", "backlog_ticks")
    add("catchup: source tps while building it", "catchup", "source_tps")
    add("catchup: worker start -> first batch done (s)", "catchup", "first_batch_s")
    add("catchup: worker start -> caught up (s)", "catchup", "catchup_s")
    add("catchup: events/s", "catchup", "events_per_s", f">= {GOAL_CATCHUP_FACTOR:g}x Londiste")
    add("catchup: machine busy (cores)", "catchup", "machine_busy_cores")
    if _get(results, "pgferry", "catchup", "spark_started_s") is not None:
        add("catchup: worker start -> Spark session up (s)", "catchup", "spark_started_s")
    if factor:
        rows.append(("catchup: pgferry / Londiste", factor, "", ""))
    ev_n = _get(results, "native", "catchup", "events_per_s")
    if ev_n is not None:
        rows.append(
            (
                "catchup: native LR backlog events",
                _fmt(_get(results, "native", "catchup", "backlog_events")),
                "",
                "",
            )
        )
        rows.append(
            (
                "catchup: native LR caught up (s)",
                _fmt(_get(results, "native", "catchup", "catchup_s")),
                "",
                "",
            )
        )
        rows.append(("catchup: native LR events/s", _fmt(ev_n), "", ""))
        if isinstance(ev_p, float) and isinstance(ev_n, float) and ev_n:
            rows.append(
                (
                    "catchup: pgferry / native LR",
                    f"{ev_p / ev_n:.2f}x",
                    "",
                    f">= {GOAL_NATIVE_FACTOR:g}x",
                )
            )
        rows.append(
            ("catchup: native LR tables equal", _fmt(_equal(results, "native", "catchup")), "", "")
        )
    add_equal("catchup")
    add("lag: source tps", "lag", "source_tps")
    add("lag: samples (1/s)", "lag", "samples")
    add("lag: median (s)", "lag", "lag_median_s")
    add("lag: p95 (s)", "lag", "lag_p95_s", f"<= {GOAL_LAG_P95_S}")
    add("lag: max (s)", "lag", "lag_max_s")
    add_equal("lag")
    for phase in ("copy-idle", "copy-busy"):
        add(f"{phase}: rows", phase, "rows")
        add(f"{phase}: worker ready wait, before the phase (s)", phase, "worker_ready_wait_s")
        add(f"{phase}: raw psql pipe (s)", phase, "raw_pipe_s")
        add(f"{phase}: add-table -> no table in-copy (s)", phase, "copy_done_s")
        add(f"{phase}: add-table -> all ok (s)", phase, "all_ok_s")
        add(f"{phase}: all ok / raw pipe", phase, "ratio_to_raw", f"<= {GOAL_COPY_FACTOR:g}")
        add_equal(phase)
    return rows


def print_report(results: dict) -> None:
    rows = report_rows(results)
    head = ("figure", "pgferry", "Londiste", "goal")
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(4)]
    line = "  ".join("-" * w for w in widths)
    print()
    print("  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)))
    print(line)
    for r in rows:
        print(
            "  ".join(
                (c.ljust(w) if i == 0 else c.rjust(w)) if i < 3 else c.ljust(w)
                for i, (c, w) in enumerate(zip(r, widths, strict=True))
            )
        )
    for system in ("pgferry", "londiste", "native"):
        res = results.get(system, {})
        if res.get("error"):
            print(f"\n{system} FAILED: {res['error']}")
        for phase, pres in res.get("phases", {}).items():
            if "error" in pres:
                print(f"\n{system} {phase} FAILED: {pres['error']}")
                for tail in pres.get("log_tail", [])[-8:]:
                    print(f"    {tail}")


def render_markdown(results: dict) -> str:
    rows = report_rows(results)
    out = ["| figure | pgferry | Londiste | goal |", "|---|---:|---:|---|"]
    out += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows]
    return "\n".join(out)


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not Path(argv[0]).is_file():
        print("usage: python -m bench.repl_report RESULTS.json", file=sys.stderr)
        return 2
    doc = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    print(render_markdown(doc["systems"]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
