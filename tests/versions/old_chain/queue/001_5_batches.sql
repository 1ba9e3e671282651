-- Queue version 1, part 5 of 9: batches (next_batch_custom, next_batch, get_batch_info,
-- batch_event_sql, get_batch_events, get_batch_cursor, finish_batch).

-- ---------------------------------------------------------------------------------------
-- batches

create function ferry_queue.next_batch_custom(
    i_queue text, i_consumer text,
    i_min_lag interval, i_min_count integer, i_min_interval interval)
returns bigint
language plpgsql as $$
declare
    s       ferry_queue.subscription;
    v_prev  ferry_queue.tick;
    v_next  bigint;
    v_batch bigint;
begin
    s := ferry_queue.find_subscription(i_queue, i_consumer);
    -- Lock the subscription: one open batch per consumer, even with racing callers.
    select * into s from ferry_queue.subscription where sub_id = s.sub_id for update;
    if s.sub_batch is not null then
        update ferry_queue.subscription set sub_active = now() where sub_id = s.sub_id;
        return s.sub_batch;
    end if;
    select * into v_prev from ferry_queue.tick
     where tick_queue = s.sub_queue and tick_id = s.sub_last_tick;
    if not found then
        raise exception 'Last tick % of consumer % on queue % is gone',
            s.sub_last_tick, i_consumer, i_queue;
    end if;
    if i_min_count is null and i_min_interval is null then
        select tick_id into v_next from ferry_queue.tick
         where tick_queue = s.sub_queue and tick_id > s.sub_last_tick
           and (i_min_lag is null or tick_time <= now() - i_min_lag)
         order by tick_id limit 1;
    else
        -- The first tick that closes a batch big enough (events or time span): far
        -- behind consumers get one large batch instead of many small ones.
        select tick_id into v_next from ferry_queue.tick
         where tick_queue = s.sub_queue and tick_id > s.sub_last_tick
           and (i_min_lag is null or tick_time <= now() - i_min_lag)
           and ((i_min_count is not null
                 and tick_event_seq - v_prev.tick_event_seq >= i_min_count)
             or (i_min_interval is not null
                 and tick_time - v_prev.tick_time >= i_min_interval))
         order by tick_id limit 1;
    end if;
    update ferry_queue.subscription set sub_active = now() where sub_id = s.sub_id;
    if v_next is null then
        return null;
    end if;
    v_batch := nextval('ferry_queue.batch_id_seq');
    update ferry_queue.subscription
       set sub_batch = v_batch, sub_next_tick = v_next
     where sub_id = s.sub_id;
    return v_batch;
end;
$$;

create function ferry_queue.next_batch(i_queue text, i_consumer text) returns bigint
language sql as $$
    select ferry_queue.next_batch_custom(i_queue, i_consumer, null, null, null)
$$;

create function ferry_queue.get_batch_info(
    i_batch_id bigint,
    out queue_name text, out consumer_name text,
    out batch_start timestamptz, out batch_end timestamptz,
    out prev_tick_id bigint, out tick_id bigint, out lag interval,
    out seq_start bigint, out seq_end bigint,
    out prev_snapshot text, out snapshot text)
language plpgsql stable as $$
begin
    select q.queue_name, s.sub_consumer, t1.tick_time, t2.tick_time,
           t1.tick_id, t2.tick_id, now() - t2.tick_time,
           t1.tick_event_seq, t2.tick_event_seq,
           t1.tick_snapshot::text, t2.tick_snapshot::text
      into queue_name, consumer_name, batch_start, batch_end,
           prev_tick_id, tick_id, lag, seq_start, seq_end, prev_snapshot, snapshot
      from ferry_queue.subscription s
      join ferry_queue.queue q on q.queue_id = s.sub_queue
      join ferry_queue.tick t1 on t1.tick_queue = s.sub_queue and t1.tick_id = s.sub_last_tick
      join ferry_queue.tick t2 on t2.tick_queue = s.sub_queue and t2.tick_id = s.sub_next_tick
     where s.sub_batch = i_batch_id;
    if not found then
        raise exception 'Batch not found: %', i_batch_id using errcode = 'P0002';
    end if;
end;
$$;

-- The SELECT that reads one batch's events, with every value inlined so that any
-- connection (a Spark executor, a second worker connection) can run it unchanged.
create function ferry_queue.batch_event_sql(i_batch_id bigint) returns text
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
        ' and pg_visible_in_snapshot(ev_txid, %L::pg_snapshot))%s)'
        ' order by ev_id',
        v_parts, s.sub_id,
        pg_snapshot_xmax(s1)::text, pg_snapshot_xmax(s2)::text, s2::text,
        case when v_xips is null then ''
             else format(' or ev_txid = any (%L::xid8[])', '{' || v_xips || '}') end);
end;
$$;

create function ferry_queue.get_batch_events(
    i_batch_id bigint,
    out ev_id bigint, out ev_time timestamptz, out ev_txid bigint, out ev_retry integer,
    out ev_type text, out ev_data text,
    out ev_extra1 text, out ev_extra2 text, out ev_extra3 text, out ev_extra4 text)
returns setof record
language plpgsql stable as $$
begin
    return query execute ferry_queue.batch_event_sql(i_batch_id);
end;
$$;

-- Open cursor i_cursor_name over the batch (optionally filtered by i_extra_where, an SQL
-- condition on the event columns) and return its first i_quick_limit rows; the caller
-- fetches the rest with FETCH in the same transaction.
create function ferry_queue.get_batch_cursor(
    i_batch_id bigint, i_cursor_name text, i_quick_limit integer,
    i_extra_where text default null,
    out ev_id bigint, out ev_time timestamptz, out ev_txid bigint, out ev_retry integer,
    out ev_type text, out ev_data text,
    out ev_extra1 text, out ev_extra2 text, out ev_extra3 text, out ev_extra4 text)
returns setof record
language plpgsql as $$
declare
    v_sql text;
    v_cur refcursor := i_cursor_name;
    v_n   integer := 0;
begin
    v_sql := ferry_queue.batch_event_sql(i_batch_id);
    if i_extra_where is not null and i_extra_where <> '' then
        v_sql := format('select * from (%s) e where (%s) order by ev_id', v_sql, i_extra_where);
    end if;
    open v_cur no scroll for execute v_sql;
    while v_n < i_quick_limit loop
        fetch v_cur into ev_id, ev_time, ev_txid, ev_retry, ev_type, ev_data,
                         ev_extra1, ev_extra2, ev_extra3, ev_extra4;
        exit when not found;
        v_n := v_n + 1;
        return next;
    end loop;
end;
$$;

create function ferry_queue.finish_batch(i_batch_id bigint) returns integer
language plpgsql as $$
begin
    update ferry_queue.subscription
       set sub_last_tick = sub_next_tick, sub_next_tick = null, sub_batch = null,
           sub_active = now()
     where sub_batch = i_batch_id;
    if not found then
        raise warning 'finish_batch: batch % not found', i_batch_id;
        return 0;
    end if;
    return 1;
end;
$$;
