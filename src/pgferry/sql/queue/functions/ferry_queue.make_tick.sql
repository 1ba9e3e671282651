-- ---------------------------------------------------------------------------------------
-- Function: ferry_queue.make_tick(text, pg_snapshot)
--
--     Record a tick of i_queue whose snapshot is i_snapshot: the next tick id and the queue's
--     event position now.  The snapshot must contain the last tick's (everything visible then
--     is visible in it), or the batches on both sides of the last tick would overlap; such a
--     snapshot raises SQLSTATE 40001 (the caller takes a new snapshot and retries).  A queue
--     ticked from outside (a branch mirroring its provider) gets no ticks of its own.  The one
--     place a tick is made from a snapshot (the ticker, ferry.sync_tick).  Returns the tick id.
--
-- Parameters:
--     i_queue text
--     i_snapshot pg_snapshot
--
-- Returns:
--     bigint
--
-- Tables:
--     ferry_queue.tick (written)
--     ferry_queue.queue
-- ---------------------------------------------------------------------------------------
create or replace function ferry_queue.make_tick(i_queue text, i_snapshot pg_snapshot) returns bigint
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
    q      ferry_queue.queue;
    v_last pg_snapshot;
    v_id   bigint;
begin
    q := ferry_queue.own_ticks(ferry_queue.lock_queue(i_queue));
    select tick_snapshot into v_last from ferry_queue.tick
     where tick_queue = q.queue_id order by tick_id desc limit 1;
    if v_last is not null
       and (pg_snapshot_xmax(v_last) > pg_snapshot_xmax(i_snapshot)
            or exists (select 1 from pg_snapshot_xip(i_snapshot) x
                        where x < pg_snapshot_xmax(v_last)
                          and not pg_visible_in_snapshot(x, i_snapshot)
                          and pg_visible_in_snapshot(x, v_last))) then
        raise exception 'A tick was made after the snapshot was taken, retry'
            using errcode = '40001';
    end if;
    v_id := nextval(q.queue_tick_seq);
    insert into ferry_queue.tick (tick_queue, tick_id, tick_snapshot, tick_event_seq)
    values (q.queue_id, v_id, i_snapshot, ferry_queue.seq_position(q.queue_event_seq));
    return v_id;
end;
$$;
