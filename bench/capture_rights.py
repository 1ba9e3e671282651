"""Capture with the queue owner's rights: what each form of the plain capture function costs.

One throw-away cluster, one captured table ``t (id int primary key, v text, n int)``; the
trigger's function is swapped between forms of the same body, and each form times one
INSERT of ``--rows`` rows and one UPDATE of all of them, in a rotating order, ``--reps``
times.  The figure is the backend's CPU time per row (``/proc/<pid>/stat``, user + system):
on a machine shared with other work, wall time moves by more than the differences sought.

Forms: ``before`` (the writer's rights, unqualified names: the capture function before the
queue became a trust boundary), ``path`` (SECURITY DEFINER with ``SET search_path``, no
table check), ``path+regclass`` (the same with the table checked through ``to_regclass``),
``path+name`` (checked by name first), ``qualified`` (SECURITY DEFINER, every name with its
schema, no ``SET``, no check) and ``current`` (what ``install_capture_function`` makes now:
qualified, checked by name first).

    .venv/bin/python -m bench.capture_rights [--rows 100000] [--reps 6]
"""

from __future__ import annotations

import argparse
import os
import statistics

import psycopg

from pgferry import schema
from pgferry.testing.cluster import make_cluster

BEFORE = """
begin
    if not pg_try_advisory_xact_lock_shared(K1, K2)
       and current_setting('ferry_queue.ticker_woken', true) is distinct from '1' then
        perform ferry_queue.wake_ticker();
    end if;
    if tg_op = 'INSERT' then
        insert into ferry_queue.event_1_0 (ev_part, ev_id, ev_type, ev_data, ev_extra1)
        values (10, nextval('ferry_queue.event_1_id_seq'::regclass), 'I:' || tg_argv[2],
                row_to_json(new)::text, tg_argv[1]);
    elsif tg_op = 'DELETE' then
        insert into ferry_queue.event_1_0 (ev_part, ev_id, ev_type, ev_data, ev_extra1)
        values (10, nextval('ferry_queue.event_1_id_seq'::regclass), 'D:' || tg_argv[2],
                row_to_json(old)::text, tg_argv[1]);
    elsif old.id is distinct from new.id then
        insert into ferry_queue.event_1_0 (ev_part, ev_id, ev_type, ev_data, ev_extra1)
        values (10, nextval('ferry_queue.event_1_id_seq'::regclass), 'D:' || tg_argv[2],
                row_to_json(old)::text, tg_argv[1]);
        insert into ferry_queue.event_1_0 (ev_part, ev_id, ev_type, ev_data, ev_extra1)
        values (10, nextval('ferry_queue.event_1_id_seq'::regclass), 'I:' || tg_argv[2],
                row_to_json(new)::text, tg_argv[1]);
    else
        insert into ferry_queue.event_1_0 (ev_part, ev_id, ev_type, ev_data, ev_extra1)
        values (10, nextval('ferry_queue.event_1_id_seq'::regclass), 'U:' || tg_argv[2],
                row_to_json(new)::text, tg_argv[1]);
    end if;
    return null;
end;
"""
REGCLASS_CHECK = """    if tg_relid is distinct from pg_catalog.to_regclass(tg_argv[1]) then
        if pg_catalog.to_regclass(tg_argv[1]) is not null and not exists (
               select from pg_catalog.pg_partition_ancestors(tg_relid) a
                where a.relid = pg_catalog.to_regclass(tg_argv[1])) then
            raise exception 'another table';
        end if;
    end if;
"""
PATH = "security definer set search_path = pg_catalog, pg_temp"
END_CHECK = "    end if;\n    end if;\n"


def forms(conn: psycopg.Connection) -> dict[str, tuple[str, str]]:
    """(function options, body) of each form, from the body the queue made for ``t``."""
    k1, k2 = conn.execute("select * from ferry_queue.ticker_asleep()").fetchone()  # type: ignore[misc]
    (current,) = conn.execute(
        "select p.prosrc from pg_trigger t join pg_proc p on p.oid = t.tgfoid"
        " where t.tgrelid = 't'::regclass and t.tgname like '%capture'"
    ).fetchone()  # type: ignore[misc]
    before = BEFORE.replace("K1", str(k1)).replace("K2", str(k2))
    start = current.index("    if tg_argv[1] operator")
    end = current.index(END_CHECK, start) + len(END_CHECK)
    name_check = current[start:end]
    at = before.index("    if tg_op")
    return {
        "before": ("", before),
        "path": (PATH, before),
        "path+regclass": (PATH, before[:at] + REGCLASS_CHECK + before[at:]),
        "path+name": (PATH, before[:at] + name_check + before[at:]),
        "qualified": ("security definer", current[:start] + current[end:]),
        "current": ("security definer", current),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--reps", type=int, default=6)
    args = parser.parse_args()
    cluster = make_cluster("bench")
    try:
        connstr = cluster.createdb("rights")
        with psycopg.connect(connstr, autocommit=True) as conn:
            schema.install(conn, ("queue",))
            conn.execute("select ferry_queue.create_queue('q')")
            conn.execute("create table t (id int primary key, v text, n int)")
            conn.execute("select ferry_queue.attach_capture('q', 't')")
            made = forms(conn)
            names = {form: f"bench_form_{i}" for i, form in enumerate(made)}
            for form, (options, body) in made.items():
                conn.execute(
                    f"create function ferry_queue.{names[form]}() returns trigger"  # type: ignore[arg-type]
                    f" language plpgsql {options} as $body${body}$body$"
                )
            pid = conn.info.backend_pid

            def cpu() -> float:
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

            times: dict[str, list[tuple[float, float]]] = {form: [] for form in made}
            order = list(made)
            for rep in range(args.reps):
                for form in order[rep % len(order) :] + order[: rep % len(order)]:
                    conn.execute("drop trigger _ferry_q_capture on t")
                    conn.execute(
                        "create trigger _ferry_q_capture after insert or update or delete on t"  # type: ignore[arg-type]
                        f" for each row execute function ferry_queue.{names[form]}"
                        "('q', 'public.t', 'id')"
                    )
                    conn.execute("truncate t")
                    started = cpu()
                    conn.execute(
                        "insert into t select g, 'v', g from generate_series(1, %s) g",
                        (args.rows,),
                    )
                    inserted = cpu()
                    conn.execute("update t set n = n + 1")
                    updated = cpu()
                    times[form].append(
                        (
                            1e6 * (inserted - started) / args.rows,
                            1e6 * (updated - inserted) / args.rows,
                        )
                    )
                conn.execute("truncate ferry_queue.event")
    finally:
        cluster.destroy()
    print(f"{'form':<15}{'insert µs/row':>15}{'min':>8}{'update µs/row':>15}{'min':>8}")
    for form, runs in times.items():
        ins, upd = [r[0] for r in runs], [r[1] for r in runs]
        print(
            f"{form:<15}{statistics.median(ins):>15.2f}{min(ins):>8.2f}"
            f"{statistics.median(upd):>15.2f}{min(upd):>8.2f}"
        )


if __name__ == "__main__":
    main()
