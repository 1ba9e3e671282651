-- Queue version 1, part 3 of 9: the ticker (ticks of every queue, external ticks of a
-- branch node, force_tick).

-- ---------------------------------------------------------------------------------------
-- ticker

create function ferry_queue.ticker(i_queue text) returns bigint
language plpgsql as $$
declare
    q        ferry_queue.queue;
    v_last   ferry_queue.tick;
    v_prev   timestamptz;
    v_seq    bigint;
    v_new    bigint;
    v_lag    interval;
    v_snap   pg_snapshot;
    v_id     bigint;
begin
    -- The row lock serialises ticks of one queue, so tick ids and snapshots grow together.
    select * into q from ferry_queue.queue where queue_name = i_queue for no key update;
    if not found then
        raise exception 'Unknown queue: %', i_queue using errcode = 'P0002';
    end if;
    if q.queue_external_ticker then
        raise exception 'Queue % has an external ticker', i_queue;
    end if;
    if q.queue_ticker_paused then
        raise exception 'Ticker is paused for queue %', i_queue;
    end if;
    select * into v_last from ferry_queue.tick
     where tick_queue = q.queue_id order by tick_id desc limit 1;
    v_seq := ferry_queue.seq_position(q.queue_event_seq);
    if found and not q.queue_force_tick then
        v_new := v_seq - v_last.tick_event_seq;
        v_lag := now() - v_last.tick_time;
        if v_new > 0 then
            if v_new < q.queue_ticker_max_count and v_lag < q.queue_ticker_max_lag then
                return null;
            end if;
        else
            -- Idle queue: tick with a doubling interval, at most every idle_period.
            if v_lag < q.queue_ticker_max_lag / 2 then
                return null;
            end if;
            select tick_time into v_prev from ferry_queue.tick
             where tick_queue = q.queue_id and tick_id < v_last.tick_id
             order by tick_id desc limit 1;
            if v_lag < q.queue_ticker_idle_period
               and (v_prev is null or v_lag < 2 * (v_last.tick_time - v_prev)) then
                return null;
            end if;
        end if;
    end if;
    v_snap := pg_current_snapshot();
    if v_last.tick_id is not null
       and pg_snapshot_xmax(v_snap) < pg_snapshot_xmax(v_last.tick_snapshot) then
        raise exception 'Snapshot older than the last tick of queue % (ticker must run in read committed)', i_queue;
    end if;
    v_id := nextval(q.queue_tick_seq);
    insert into ferry_queue.tick (tick_queue, tick_id, tick_snapshot, tick_event_seq)
    values (q.queue_id, v_id, v_snap, v_seq);
    if q.queue_force_tick then
        update ferry_queue.queue set queue_force_tick = false where queue_id = q.queue_id;
    end if;
    return v_id;
end;
$$;

create function ferry_queue.ticker() returns integer
language plpgsql as $$
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

-- External ticks (branch nodes): copy the provider's tick id, time and event position.
create function ferry_queue.ticker(
    i_queue text, i_tick_id bigint, i_tick_time timestamptz, i_event_seq bigint)
returns bigint
language plpgsql as $$
declare
    q ferry_queue.queue;
begin
    select * into q from ferry_queue.queue where queue_name = i_queue for no key update;
    if not found then
        raise exception 'Unknown queue: %', i_queue using errcode = 'P0002';
    end if;
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

-- Make the next ticker() call tick; returns the current last tick id (poll until it moves).
create function ferry_queue.force_tick(i_queue text) returns bigint
language plpgsql as $$
declare
    q ferry_queue.queue;
begin
    q := ferry_queue.find_queue(i_queue);
    update ferry_queue.queue set queue_force_tick = true where queue_id = q.queue_id;
    return (select max(tick_id) from ferry_queue.tick where tick_queue = q.queue_id);
end;
$$;
