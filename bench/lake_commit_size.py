"""How an Iceberg lake commit's cost grows with the table: merge-on-read against
copy-on-write, at several table sizes, without PostgreSQL.

For each size N, an Iceberg table of the scattered benchmark's shape
(``id bigint, i int, n numeric(12,2), s text``, ``s`` 40 characters; made by
:func:`pgferry.lake.iceberg.prepare`, filled in key order by appends of at most 1,000,000
rows, as the initial load writes files) takes BATCHES batch parts through
:func:`pgferry.lake.iceberg.merge`, as replay hands them: BATCH changed keys drawn over the
whole table (90 % updates, 5 % deletes, 5 % inserts of new keys).  Figures per size and
way: the merge's time (the first batch apart: merge-on-read reads the key columns once
there, to build its index), and the bytes the batches added to the table's folder per
changed row.

    .venv/bin/python -m bench.lake_commit_size --sizes 2000000,20000000 --batch 1000
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench.common import machine, write_results
from pgferry.lake import iceberg, key_index
from pgferry.lake.spec import COPY_ON_WRITE, MERGE_ON_READ, OP, LakeSpec

FILE_ROWS = 1_000_000  # the initial load's rows per file


def _schema():
    import pyarrow as pa

    return pa.schema([pa.field("id", pa.int64(), nullable=False), ("i", pa.int32()),
                      ("n", pa.decimal128(12, 2)), ("s", pa.string())])  # fmt: skip


def _rows(first: int, count: int):
    import pyarrow as pa
    import pyarrow.compute as pc

    ids = pa.array(range(first, first + count), pa.int64())
    pad = "-padded-to-forty-characters-xxxxxxxxx"
    text = pc.binary_join_element_wise(pc.cast(ids, pa.string()), pad, "")
    small = pc.cast(ids, pa.int32())
    amount = pc.cast(pc.cast(small, pa.decimal128(10, 0)), pa.decimal128(12, 2))
    return pa.table([ids, pc.divide(small, 1000), amount, text], schema=_schema())


def _batch(rng: random.Random, top: int, size: int, fresh: int):
    import pyarrow as pa

    ups = rng.sample(range(1, top + 1), size * 90 // 100 + size * 5 // 100)
    dels, ups = ups[: size * 5 // 100], ups[size * 5 // 100 :]
    ins = list(range(fresh, fresh + size * 5 // 100))
    keys = ups + ins
    rows = _rows(0, len(keys)).set_column(0, "id", pa.array(keys, pa.int64()))
    rows = rows.add_column(0, OP, pa.array(["U"] * len(ups) + ["I"] * len(ins)))
    gone = _rows(0, len(dels)).set_column(0, "id", pa.array(dels, pa.int64()))
    gone = gone.add_column(0, OP, pa.array(["D"] * len(dels)))
    return pa.concat_tables([rows, gone]), len(ins)


def _folder_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def run(size: int, mode: str, batches: int, batch: int, work: Path) -> dict:
    spec = LakeSpec("iceberg", str(work / f"{mode}-{size}"), "public", "t", "b:b:public.t",
                    deletes=mode)  # fmt: skip
    os.makedirs(spec.root)
    iceberg.prepare(spec, _schema(), ["id"])
    for first in range(1, size + 1, FILE_ROWS):
        iceberg.append(spec, _rows(first, min(FILE_ROWS, size + 1 - first)), 0, 1)
    before = _folder_bytes(Path(spec.location))
    rng = random.Random(45)
    fresh, times, changed = size + 1, [], 0
    key_index._INDEXES.clear()
    for n in range(batches):
        source, added = _batch(rng, size, batch, fresh)
        fresh += added
        began = time.monotonic()
        iceberg.merge(spec, source, ["id"], (n + 2) * 1000, n + 2)
        times.append(time.monotonic() - began)
        changed += source.num_rows
    added_bytes = _folder_bytes(Path(spec.location)) - before
    rest = sorted(times[1:])
    return {
        "size": size, "mode": mode, "first_merge_s": round(times[0], 3),
        "merge_s_median": round(statistics.median(rest), 3),
        "merge_s_max": round(rest[-1], 3), "batches": batches,
        "bytes_per_changed_row": round(added_bytes / changed),
        "stored_row_bytes": round(before / size, 1),
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="200000,2000000")
    parser.add_argument("--modes", default=f"{MERGE_ON_READ},{COPY_ON_WRITE}")
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--cow-batches", type=int, help="copy-on-write's (default: --batches)")
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    started = dt.datetime.now(dt.UTC)
    doc: dict = {"machine": machine(), "started": started.isoformat(), "args": vars(args),
                 "loadavg_start": os.getloadavg(), "runs": []}  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="pgferry-lake-commit-") as work:
        for size in (int(s) for s in args.sizes.split(",")):
            for mode in args.modes.split(","):
                count = args.batches
                if mode == COPY_ON_WRITE and args.cow_batches:
                    count = args.cow_batches  # each rewrites the table: fewer at large sizes
                found = run(size, mode, count, args.batch, Path(work))
                shutil.rmtree(Path(work) / f"{mode}-{size}")
                doc["runs"].append(found)
                print(found, flush=True)
    doc["loadavg_end"] = os.getloadavg()
    print(f"results: {write_results(doc, 'lake_commit_size', started, args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
