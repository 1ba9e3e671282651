"""A process that read a local Delta table exits cleanly.

With delta-rs's own file system handed to pyarrow's reader threads, deltalake 1.6 made about
two short processes of three abort at their exit (SIGABRT, "terminate called without an
active exception") after a read that succeeded: a ``pgferry compare`` of a lake table that
printed "equal" could then exit 134.  :func:`pgferry.lake.delta.rows_at` and the compare's
read go through pyarrow's local file system (a ``file://`` URI too); eight processes in a
row must all exit 0 (each would have survived the old read with a chance of about one in
three).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
from deltalake import write_deltalake

from pgferry.lake import delta

READER = """
import sys
from pgferry.lake import delta
from pgferry.lake.spec import LakeSpec

rows = delta.rows_at(sys.argv[1])
again = delta.read(LakeSpec("delta", sys.argv[2], "public", "t", "q:n:public.t"))
print(rows.num_rows, again.num_rows)
"""


def test_reading_processes_exit_zero(tmp_path: Path) -> None:
    path = tmp_path / "public" / "t"
    rows = pa.table({"id": list(range(1000)), "v": ["x"] * 1000})
    write_deltalake(str(path), rows)
    for start in range(0, 1000, 250):  # several files, as replay leaves them
        write_deltalake(str(path), rows.slice(start, 10), mode="append")
    for _ in range(8):
        done = subprocess.run(
            [sys.executable, "-c", READER, str(path), str(tmp_path)],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert (done.returncode, done.stdout.split()) == (0, ["1040", "1040"]), done.stderr


def test_local_locations_are_read_as_paths() -> None:
    """A ``file://`` URI (as ``DeltaTable.table_uri`` gives it) is a local path too."""
    assert delta.local_path("/lake/public/t") == "/lake/public/t"
    assert delta.local_path("file:///lake/my%20schema/t/") == "/lake/my schema/t"
    assert delta.local_path("lake/t") == os.path.abspath("lake/t")
    assert delta.local_path("s3://bucket/lake/t") is None
