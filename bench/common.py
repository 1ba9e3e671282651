"""What the benchmark scripts share beyond their set-ups: where results go, the machine, errors.

Every script writes its JSON under :data:`RESULTS_DIR` (:func:`write_results`) with
:func:`machine` beside the figures, and reports a failed phase as :func:`one_line` of its exception.
"""

from __future__ import annotations

import argparse
import compileall
import datetime as dt
import json
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import psycopg

import pgferry
from bench.repl_env import BenchError
from pgferry.errors import PgferryError

RESULTS_DIR = Path(__file__).resolve().parent / "results"


def machine() -> dict:
    """The machine a run measures, and pgferry's modules compiled (:func:`compile_pgferry`)."""
    info: dict = {"nproc": os.cpu_count(), "platform": platform.platform()}
    info["pgferry_bytecode"] = compile_pgferry()
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                info["mem_gib"] = round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    lscpu = shutil.which("lscpu")
    if lscpu:
        out = subprocess.run([lscpu], capture_output=True, text=True).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                info["cpu_model"] = line.split(":", 1)[1].strip()
    return info


def result_head(name: str, started: dt.datetime, argv: list[str] | None) -> dict:
    """The first keys of a result document: the benchmark, its start, its command line."""
    return {
        "benchmark": name,
        "started": started.isoformat(timespec="seconds"),
        "command": " ".join([Path(sys.argv[0]).name, *(argv or sys.argv[1:])]),
    }


def compile_pgferry() -> str:
    """Compile pgferry's modules to bytecode, as an installation from a wheel has them.

    Run from a checkout with ``PYTHONDONTWRITEBYTECODE`` set, every pgferry process would
    compile each module it imports again (about 0.1 s of a worker's start here), which no
    installed pgferry pays and the anchors, installed as packages, do not pay either.
    """
    source = Path(pgferry.__file__).resolve().parent
    done = compileall.compile_dir(source, quiet=1)
    return f"compiled ({source})" if done else f"not compiled ({source})"


def one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    known = (BenchError, PgferryError, psycopg.Error, subprocess.SubprocessError)
    first = text[0] if text else ""
    return first if isinstance(exc, known) and first else f"{exc.__class__.__name__}: {first}"


def write_results(doc: dict, name: str, started: dt.datetime, out: Path | None) -> Path:
    """Stamp ``doc`` finished and write it as JSON to ``out`` (default: the results
    folder's ``<name>_<started>.json``); the path written."""
    doc["finished"] = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    out = out or RESULTS_DIR / f"{name}_{started:%Y%m%dT%H%M%SZ}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=2, default=str) + "\n", encoding="utf-8")
    return out


def add_pgferry_setting(parser: argparse.ArgumentParser) -> None:
    """``--pgferry-setting KEY=VALUE`` (repeatable): one more setting of pgferry's leaf ini."""
    parser.add_argument(
        "--pgferry-setting",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="one more setting of pgferry's leaf worker ini (repeatable)",
    )


def pgferry_settings(args: argparse.Namespace) -> dict[str, str]:
    """The ``--pgferry-setting`` values as ini keys and values."""
    return dict(kv.split("=", 1) for kv in args.pgferry_setting)
