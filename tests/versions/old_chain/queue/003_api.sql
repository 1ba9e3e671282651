-- ferry_queue: what the queue hands to other layers, so that none of them writes its tables.
--
-- * make_tick: the one place a tick is made from a snapshot (the ticker, ferry.sync_tick).
-- * batch_event_sql(batch, ordered): a batch's events with or without "order by ev_id"; a
--   caller that wraps the query in its own aggregate or sort does not pay for a sort.
-- * forward_events: events read from a provider's batch, stored in this queue unchanged
--   (ev_id, time, retry count), in its current table.

-- Record a tick of i_queue whose snapshot is i_snapshot: the next tick id and the queue's
-- event position now.  The snapshot must contain the last tick's (everything visible then
-- is visible in it), or the batches on both sides of the last tick would overlap; such a
-- snapshot raises SQLSTATE 40001 (the caller takes a new snapshot and retries).  A queue
-- ticked from outside (a branch mirroring its provider) gets no ticks of its own.
create function ferry_queue.make_tick(i_queue text, i_snapshot pg_snapshot) returns bigint
language plpgsql as $$
declare
    q      ferry_queue.queue;
    v_last pg_snapshot;
    v_id   bigint;
begin
    -- The row lock serialises ticks of one queue, so tick ids and snapshots grow together.
    select * into q from ferry_queue.queue where queue_name = i_queue for no key update;
    if not found then
        raise exception 'Unknown queue: %', i_queue using errcode = 'P0002';
    end if;
    if q.queue_external_ticker then
        raise exception 'Queue % has an external ticker', i_queue;
    end if;
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

-- The ticker decides whether a tick is due; make_tick makes it.
create or replace function ferry_queue.ticker(i_queue text) returns bigint
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
    v_id := ferry_queue.make_tick(i_queue, v_snap);
    if q.queue_force_tick then
        update ferry_queue.queue set queue_force_tick = false where queue_id = q.queue_id;
    end if;
    return v_id;
end;
$$;

-- The SELECT that reads one batch's events, with every value inlined so that any
-- connection (a Spark executor, a second worker connection) can run it unchanged; with
-- i_ordered the events come in ev_id order.
create function ferry_queue.batch_event_sql(i_batch_id bigint, i_ordered boolean) returns text
language plpgsql stable as $$
declare
    s      ferry_queue.subscription;
    q      ferry_queue.queue;
    s1     pg_snapshot;
    s2     pg_snapshot;
    v_xips text;
    v_parts text;
begin
    select * into s from ferry_queue.subscription where sub_batch = i_batch_id;
    if not found then
        raise exception 'Batch not found: %', i_batch_id using errcode = 'P0002';
    end if;
    select * into q from ferry_queue.queue where queue_id = s.sub_queue;
    select tick_snapshot into s1 from ferry_queue.tick
     where tick_queue = s.sub_queue and tick_id = s.sub_last_tick;
    select tick_snapshot into s2 from ferry_queue.tick
     where tick_queue = s.sub_queue and tick_id = s.sub_next_tick;
    select string_agg((q.queue_id * 10 + n)::text, ',')
      into v_parts from generate_series(0, q.queue_ntables - 1) n;
    -- Transactions running at the previous tick and finished by this one (the rest of the
    -- batch is the txid range [xmax(prev), xmax(cur)) visible in cur).
    select string_agg(x::text, ',' order by x) into v_xips
      from pg_snapshot_xip(s1) x
     where pg_visible_in_snapshot(x, s2);
    return format(
        'select ev_id, ev_time, ev_txid::text::bigint as ev_txid, ev_retry, ev_type, ev_data,'
        ' ev_extra1, ev_extra2, ev_extra3, ev_extra4'
        ' from ferry_queue.event'
        ' where ev_part in (%s)'
        ' and (ev_owner is null or ev_owner = %s)'
        ' and ((ev_txid >= %L::xid8 and ev_txid < %L::xid8'
        ' and pg_visible_in_snapshot(ev_txid, %L::pg_snapshot))%s)%s',
        v_parts, s.sub_id,
        pg_snapshot_xmax(s1)::text, pg_snapshot_xmax(s2)::text, s2::text,
        case when v_xips is null then ''
             else format(' or ev_txid = any (%L::xid8[])', '{' || v_xips || '}') end,
        case when i_ordered then ' order by ev_id' else '' end);
end;
$$;

-- One definition of a batch's events: the ordered form is the two-argument one's.
create or replace function ferry_queue.batch_event_sql(i_batch_id bigint) returns text
language sql stable as $$
    select ferry_queue.batch_event_sql(i_batch_id, true)
$$;

-- Store events of another queue (a provider's batch, read in ev_id order) in i_queue's
-- current table with their ev_id, ev_time and ev_retry.  ev_txid is this transaction's:
-- the events belong to the batch of this queue that sees it commit.  The arrays are the
-- columns of the events, one element per event.  Returns how many were stored.
create function ferry_queue.forward_events(
    i_queue text, i_ev_id bigint[], i_ev_time timestamptz[], i_ev_retry integer[],
    i_ev_type text[], i_ev_data text[],
    i_ev_extra1 text[], i_ev_extra2 text[], i_ev_extra3 text[], i_ev_extra4 text[])
returns integer
language plpgsql as $$
declare
    q       ferry_queue.queue;
    v_count integer;
begin
    q := ferry_queue.find_queue(i_queue);
    insert into ferry_queue.event
        (ev_part, ev_id, ev_time, ev_retry, ev_type, ev_data,
         ev_extra1, ev_extra2, ev_extra3, ev_extra4)
    select q.queue_id * 10 + q.queue_cur_table, e.*
      from unnest(i_ev_id, i_ev_time, i_ev_retry, i_ev_type, i_ev_data,
                  i_ev_extra1, i_ev_extra2, i_ev_extra3, i_ev_extra4) as e;
    get diagnostics v_count = row_count;
    return v_count;
end;
$$;
