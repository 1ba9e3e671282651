-- ---------------------------------------------------------------------------------------
-- Function: ferry_queue.ticker_step(text)
--
--     Tick queue i_queue if tick_due says so, deciding first without a lock and again under
--     the queue's row lock: a call on an idle queue writes nothing.  Returns the new tick id
--     (NULL: none) and whether events wait.
--
-- Parameters:
--     i_queue text
--
-- Returns:
--     one row of:
--         tick_id bigint
--         waiting boolean
--
-- Tables:
--     ferry_queue.queue (written)
--     ferry_queue.tick
-- ---------------------------------------------------------------------------------------
create or replace function ferry_queue.ticker_step(i_queue text, out tick_id bigint, out waiting boolean)
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
    q      ferry_queue.queue;
    v_due  boolean;
    v_last ferry_queue.tick;
    v_snap pg_snapshot;
begin
    q := ferry_queue.own_ticks(ferry_queue.find_queue(i_queue));
    if q.queue_ticker_paused then
        raise exception 'Ticker is paused for queue %', i_queue;
    end if;
    select d.due, d.waiting into v_due, waiting from ferry_queue.tick_due(q) d;
    if not v_due then
        return;
    end if;
    -- Due: the row lock serialises ticks of one queue (tick ids and snapshots grow
    -- together); another ticker may have ticked meanwhile, so decide again under it.
    q := ferry_queue.lock_queue(i_queue);
    select d.due, d.waiting into v_due, waiting from ferry_queue.tick_due(q) d;
    if not v_due then
        return;
    end if;
    select * into v_last from ferry_queue.tick
     where tick_queue = q.queue_id order by tick_id desc limit 1;
    v_snap := pg_current_snapshot();
    if v_last.tick_id is not null
       and pg_snapshot_xmax(v_snap) < pg_snapshot_xmax(v_last.tick_snapshot) then
        raise exception 'Snapshot older than the last tick of queue % (ticker must run in read committed)', i_queue;
    end if;
    tick_id := ferry_queue.make_tick(i_queue, v_snap);
    if q.queue_force_tick then
        update ferry_queue.queue set queue_force_tick = false where queue_id = q.queue_id;
    end if;
end;
$$;
