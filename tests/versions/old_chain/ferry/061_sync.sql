-- ferry: compare / repair at one logical point without locking the source.
--
-- sync_tick records a tick whose snapshot is a snapshot the caller holds open (exported in
-- a REPEATABLE READ transaction): the source is read in exactly that state, and every
-- subscriber that has applied through this tick holds the same data.  The snapshot must
-- contain the previous tick's, or batches would overlap; the caller retries otherwise.
--
-- sync_request lives on the subscriber: compare asks the worker to post a snapshot taken
-- right after it applied a given tick ('wait' -> 'ready'), and drops the row when done,
-- which lets the worker release the snapshot.  With pause (repair --apply) the worker also
-- applies nothing more until then, so fixes computed at that tick stay right.

create function ferry.sync_tick(i_queue text, i_snapshot pg_snapshot) returns bigint
language plpgsql as $$
declare
    q      ferry_queue.queue;
    v_last ferry_queue.tick;
    v_id   bigint;
begin
    select * into q from ferry_queue.queue where queue_name = i_queue for no key update;
    if not found then
        raise exception 'Unknown queue: %', i_queue using errcode = 'P0002';
    end if;
    if q.queue_external_ticker then
        raise exception 'Queue % is ticked by its provider: compare against the root', i_queue;
    end if;
    select * into v_last from ferry_queue.tick
     where tick_queue = q.queue_id order by tick_id desc limit 1;
    -- Everything visible at the last tick must be visible in the new snapshot.
    if pg_snapshot_xmax(v_last.tick_snapshot) > pg_snapshot_xmax(i_snapshot)
       or exists (select 1 from pg_snapshot_xip(i_snapshot) x
                   where x < pg_snapshot_xmax(v_last.tick_snapshot)
                     and not pg_visible_in_snapshot(x, i_snapshot)
                     and pg_visible_in_snapshot(x, v_last.tick_snapshot)) then
        raise exception 'A tick was made after the snapshot was taken, retry'
            using errcode = '40001';
    end if;
    v_id := nextval(q.queue_tick_seq);
    insert into ferry_queue.tick (tick_queue, tick_id, tick_snapshot, tick_event_seq)
    values (q.queue_id, v_id, i_snapshot, ferry_queue.seq_position(q.queue_event_seq));
    return v_id;
end;
$$;

create table ferry.sync_request (
    queue_name      text    not null,
    consumer_name   text    not null,
    tick_id         bigint  not null,
    state           text    not null default 'wait' check (state in ('wait', 'ready', 'missed')),
    pause           boolean not null default false,  -- hold replay at the tick until dropped
    snapshot_id     text,
    requested_at    timestamptz not null default now(),
    primary key (queue_name, consumer_name)
);
