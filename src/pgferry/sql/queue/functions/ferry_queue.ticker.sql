-- ---------------------------------------------------------------------------------------
-- Function: ferry_queue.ticker(text)
--
--     Tick queue i_queue when a tick is due (ticker_step decides; make_tick makes it).
--     Returns the new tick's id, or NULL when no tick was due.
--
-- Parameters:
--     i_queue text
--
-- Returns:
--     bigint
-- ---------------------------------------------------------------------------------------
create or replace function ferry_queue.ticker(i_queue text) returns bigint
language sql set search_path = pg_catalog, pg_temp as $$
    select tick_id from ferry_queue.ticker_step(i_queue)
$$;

-- ---------------------------------------------------------------------------------------
-- Function: ferry_queue.ticker()
--
--     Tick every queue that ticks itself (not external, not paused) when due, in name order
--     so that concurrent callers lock the queue rows in one order.  Returns how many ticked.
--
-- Returns:
--     integer
--
-- Tables:
--     ferry_queue.queue
-- ---------------------------------------------------------------------------------------
create or replace function ferry_queue.ticker() returns integer
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
    v_name text;
    v_count integer := 0;
begin
    -- Name order: concurrent callers lock queue rows in the same order (no deadlock).
    for v_name in
        select queue_name from ferry_queue.queue
         where not queue_external_ticker and not queue_ticker_paused
         order by queue_name
    loop
        if ferry_queue.ticker(v_name) is not null then
            v_count := v_count + 1;
        end if;
    end loop;
    return v_count;
end;
$$;

-- ---------------------------------------------------------------------------------------
-- Function: ferry_queue.ticker(text, bigint, timestamptz, bigint)
--
--     External tick (a branch mirroring its provider): record the provider's tick id, time and
--     event position, and move the local sequences forward to them.  Returns i_tick_id.
--
-- Parameters:
--     i_queue text
--     i_tick_id bigint
--     i_tick_time timestamptz
--     i_event_seq bigint
--
-- Returns:
--     bigint
--
-- Tables:
--     ferry_queue.tick (written)
--     ferry_queue.queue
-- ---------------------------------------------------------------------------------------
create or replace function ferry_queue.ticker(
    i_queue text, i_tick_id bigint, i_tick_time timestamptz, i_event_seq bigint)
returns bigint
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
    q ferry_queue.queue;
begin
    q := ferry_queue.lock_queue(i_queue);
    if not q.queue_external_ticker then
        raise exception 'Queue % does not have an external ticker', i_queue;
    end if;
    if q.queue_ticker_paused then
        raise exception 'Ticker is paused for queue %', i_queue;
    end if;
    insert into ferry_queue.tick (tick_queue, tick_id, tick_time, tick_event_seq)
    values (q.queue_id, i_tick_id, i_tick_time, i_event_seq);
    -- Sequences only move forward, so local ids never fall behind the provider's.
    if coalesce(pg_sequence_last_value(q.queue_tick_seq), 0) < i_tick_id then
        perform setval(q.queue_tick_seq, i_tick_id);
    end if;
    if i_event_seq > 0 and ferry_queue.seq_position(q.queue_event_seq) < i_event_seq then
        perform setval(q.queue_event_seq, i_event_seq);
    end if;
    return i_tick_id;
end;
$$;
