-- ferry_queue: the transactional event queue (ticks, batches, consumers, retry, rotation).
--
-- Events of every queue live in one partitioned table, ferry_queue.event, partitioned by
-- ev_part = queue_id * 10 + table number.  Each queue owns three rotation partitions; a
-- writer inserts through the parent with static SQL (a cached plan), and rotation empties
-- a partition with TRUNCATE once every consumer has passed it.
--
-- A tick stores the snapshot of the transaction that made it.  A batch is the span between
-- two ticks (prev, cur] and holds the events whose transaction is visible in cur's snapshot
-- and not in prev's: membership by visibility, never by commit time or event id.

create schema if not exists ferry_queue;

create table ferry_queue.queue (
    queue_id                 serial      primary key,
    queue_name               text        not null unique,
    queue_ntables            integer     not null default 3 check (queue_ntables between 2 and 10),
    queue_cur_table          integer     not null default 0,
    queue_rotation_period    interval    not null default '2 hours',
    queue_switch_step1       xid8        not null default pg_current_xact_id(),
    queue_switch_step2       xid8                 default pg_current_xact_id(),
    queue_switch_time        timestamptz not null default now(),
    queue_external_ticker    boolean     not null default false,
    queue_ticker_paused      boolean     not null default false,
    queue_ticker_max_count   integer     not null default 500,
    queue_ticker_max_lag     interval    not null default '3 seconds',
    queue_ticker_idle_period interval    not null default '1 minute',
    queue_force_tick         boolean     not null default false,
    queue_event_seq          regclass    not null,
    queue_tick_seq           regclass    not null,
    queue_extra_maint        text[]
);

-- Parent of every queue's event partitions.  ev_txid is the writer's xid8, compared with
-- tick snapshots through pg_visible_in_snapshot().
create table ferry_queue.event (
    ev_part     integer     not null,
    ev_id       bigint      not null,
    ev_time     timestamptz not null default now(),
    ev_txid     xid8        not null default pg_current_xact_id(),
    ev_owner    integer,                 -- subscription id for retried events, NULL = everybody
    ev_retry    integer,                 -- NULL on first delivery, then the retry count
    ev_type     text,
    ev_data     text,
    ev_extra1   text,
    ev_extra2   text,
    ev_extra3   text,
    ev_extra4   text
) partition by list (ev_part);

create index event_txid_idx on ferry_queue.event (ev_txid);

create table ferry_queue.tick (
    tick_queue      integer     not null references ferry_queue.queue on delete cascade,
    tick_id         bigint      not null,
    tick_time       timestamptz not null default now(),
    tick_snapshot   pg_snapshot not null default pg_current_snapshot(),
    tick_event_seq  bigint      not null,
    primary key (tick_queue, tick_id)
);

create table ferry_queue.subscription (
    sub_id          serial      primary key,
    sub_queue       integer     not null references ferry_queue.queue on delete cascade,
    sub_consumer    text        not null,
    sub_last_tick   bigint      not null,   -- last finished tick
    sub_active      timestamptz not null default now(),
    sub_batch       bigint      unique,     -- open batch, NULL when none
    sub_next_tick   bigint,                 -- closing tick of the open batch
    unique (sub_queue, sub_consumer)
);

create table ferry_queue.retry_queue (
    ev_retry_after  timestamptz not null,
    ev_queue        integer     not null references ferry_queue.queue on delete cascade,
    ev_owner        integer     not null references ferry_queue.subscription on delete cascade,
    ev_id           bigint      not null,
    ev_time         timestamptz not null,
    ev_txid         xid8,
    ev_retry        integer,
    ev_type         text,
    ev_data         text,
    ev_extra1       text,
    ev_extra2       text,
    ev_extra3       text,
    ev_extra4       text,
    primary key (ev_owner, ev_id)
);
create index retry_queue_after_idx on ferry_queue.retry_queue (ev_retry_after);

create sequence ferry_queue.batch_id_seq;

-- ---------------------------------------------------------------------------------------
-- helpers

create function ferry_queue.version() returns text
language sql immutable as $$ select '1.0' $$;

create function ferry_queue.find_queue(i_queue text) returns ferry_queue.queue
language plpgsql stable as $$
declare
    q ferry_queue.queue;
begin
    select * into q from ferry_queue.queue where queue_name = i_queue;
    if not found then
        raise exception 'Unknown queue: %', i_queue using errcode = 'P0002';
    end if;
    return q;
end;
$$;

create function ferry_queue.find_subscription(i_queue text, i_consumer text)
returns ferry_queue.subscription
language plpgsql stable as $$
declare
    s ferry_queue.subscription;
begin
    select s2.* into s
      from ferry_queue.subscription s2
      join ferry_queue.queue q on q.queue_id = s2.sub_queue
     where q.queue_name = i_queue and s2.sub_consumer = i_consumer;
    if not found then
        perform ferry_queue.find_queue(i_queue);
        raise exception 'Consumer % not registered on queue %', i_consumer, i_queue
            using errcode = 'P0002';
    end if;
    return s;
end;
$$;

-- Event count of a queue so far (the sequence position); 0 before the first event.
create function ferry_queue.seq_position(i_seq regclass) returns bigint
language sql volatile as $$ select coalesce(pg_sequence_last_value(i_seq), 0) $$;

-- ---------------------------------------------------------------------------------------
-- queue management

create function ferry_queue.create_queue(i_queue text) returns integer
language plpgsql as $$
declare
    v_id  integer;
    v_ev  text;
    v_tk  text;
begin
    if i_queue is null or i_queue = '' then
        raise exception 'Queue name must not be empty';
    end if;
    perform 1 from ferry_queue.queue where queue_name = i_queue;
    if found then
        return 0;
    end if;
    v_id := nextval(pg_get_serial_sequence('ferry_queue.queue', 'queue_id'));
    v_ev := format('event_%s_id_seq', v_id);
    v_tk := format('event_%s_tick_seq', v_id);
    execute format('create sequence ferry_queue.%I', v_ev);
    execute format('create sequence ferry_queue.%I', v_tk);
    insert into ferry_queue.queue (queue_id, queue_name, queue_event_seq, queue_tick_seq)
    values (v_id, i_queue,
            format('ferry_queue.%I', v_ev)::regclass, format('ferry_queue.%I', v_tk)::regclass);
    for n in 0 .. 2 loop
        -- Insert-only tables emptied by TRUNCATE: no free space needed, nothing to vacuum.
        execute format(
            'create table ferry_queue.%I partition of ferry_queue.event for values in (%s)'
            ' with (fillfactor = 100, autovacuum_enabled = off)',
            format('event_%s_%s', v_id, n), v_id * 10 + n);
    end loop;
    -- The first tick: a consumer registers at the latest tick.
    insert into ferry_queue.tick (tick_queue, tick_id, tick_event_seq)
    values (v_id, nextval(format('ferry_queue.%I', v_tk)::regclass), 0);
    return 1;
end;
$$;

create function ferry_queue.drop_queue(i_queue text, i_force boolean default false)
returns integer
language plpgsql as $$
declare
    q ferry_queue.queue;
    t record;
begin
    select * into q from ferry_queue.queue where queue_name = i_queue for update;
    if not found then
        raise exception 'Unknown queue: %', i_queue using errcode = 'P0002';
    end if;
    if not i_force then
        perform 1 from ferry_queue.subscription where sub_queue = q.queue_id;
        if found then
            raise exception 'Queue % has consumers, unregister them first (or force)', i_queue;
        end if;
    end if;
    -- Capture triggers that write into this queue would fail on every write otherwise.
    for t in
        select tg.tgrelid::regclass as tbl, tg.tgname
          from pg_trigger tg
         where tg.tgname in (format('_ferry_%s_capture', i_queue)::name,
                             format('_ferry_%s_truncate', i_queue)::name)
           and (tg.tgfoid in ('ferry_queue.capture_truncate()'::regprocedure,
                              'ferry_queue.deny_write()'::regprocedure)
                or tg.tgfoid in (select to_regprocedure(format('ferry_queue.%I()', cf_name))
                                   from ferry_queue.capture_function
                                  where cf_queue = q.queue_id))
    loop
        execute format('drop trigger %I on %s', t.tgname, t.tbl);
    end loop;
    delete from ferry_queue.retry_queue where ev_queue = q.queue_id;
    delete from ferry_queue.subscription where sub_queue = q.queue_id;
    delete from ferry_queue.tick where tick_queue = q.queue_id;
    for n in 0 .. q.queue_ntables - 1 loop
        execute format('drop table ferry_queue.%I', format('event_%s_%s', q.queue_id, n));
    end loop;
    for t in select cf_name from ferry_queue.capture_function where cf_queue = q.queue_id loop
        execute format('drop function ferry_queue.%I()', t.cf_name);
    end loop;
    delete from ferry_queue.capture_function where cf_queue = q.queue_id;
    delete from ferry_queue.queue where queue_id = q.queue_id;
    execute format('drop sequence %s', q.queue_event_seq);
    execute format('drop sequence %s', q.queue_tick_seq);
    return 1;
end;
$$;

create function ferry_queue.set_queue_config(i_queue text, i_param text, i_value text)
returns integer
language plpgsql as $$
declare
    q ferry_queue.queue;
    v_col text;
begin
    q := ferry_queue.find_queue(i_queue);
    v_col := case when i_param like 'queue\_%' then i_param else 'queue_' || i_param end;
    if v_col not in ('queue_ticker_max_count', 'queue_ticker_max_lag',
                     'queue_ticker_idle_period', 'queue_ticker_paused',
                     'queue_rotation_period', 'queue_external_ticker') then
        raise exception 'Unknown queue setting: %', i_param;
    end if;
    execute format('update ferry_queue.queue set %I = %L where queue_id = %s',
                   v_col, i_value, q.queue_id);
    return 1;
end;
$$;

-- ---------------------------------------------------------------------------------------
-- producing events

create function ferry_queue.insert_event(
    i_queue text, i_ev_type text, i_ev_data text,
    i_extra1 text default null, i_extra2 text default null,
    i_extra3 text default null, i_extra4 text default null)
returns bigint
language plpgsql as $$
declare
    q ferry_queue.queue;
    v_id bigint;
begin
    q := ferry_queue.find_queue(i_queue);
    v_id := nextval(q.queue_event_seq);
    insert into ferry_queue.event
        (ev_part, ev_id, ev_type, ev_data, ev_extra1, ev_extra2, ev_extra3, ev_extra4)
    values (q.queue_id * 10 + q.queue_cur_table, v_id,
            i_ev_type, i_ev_data, i_extra1, i_extra2, i_extra3, i_extra4);
    return v_id;
end;
$$;

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

-- ---------------------------------------------------------------------------------------
-- consumers

create function ferry_queue.register_consumer_at(i_queue text, i_consumer text, i_tick_id bigint)
returns integer
language plpgsql as $$
declare
    q ferry_queue.queue;
begin
    q := ferry_queue.find_queue(i_queue);
    if i_consumer is null or i_consumer = '' then
        raise exception 'Consumer name must not be empty';
    end if;
    perform 1 from ferry_queue.tick where tick_queue = q.queue_id and tick_id = i_tick_id;
    if not found then
        raise exception 'Tick % not found on queue %', i_tick_id, i_queue;
    end if;
    update ferry_queue.subscription
       set sub_last_tick = i_tick_id, sub_batch = null, sub_next_tick = null,
           sub_active = now()
     where sub_queue = q.queue_id and sub_consumer = i_consumer;
    if found then
        return 0;
    end if;
    insert into ferry_queue.subscription (sub_queue, sub_consumer, sub_last_tick)
    values (q.queue_id, i_consumer, i_tick_id);
    return 1;
end;
$$;

create function ferry_queue.register_consumer(i_queue text, i_consumer text) returns integer
language plpgsql as $$
declare
    q ferry_queue.queue;
    v_tick bigint;
begin
    q := ferry_queue.find_queue(i_queue);
    perform 1 from ferry_queue.subscription
     where sub_queue = q.queue_id and sub_consumer = i_consumer;
    if found then
        return 0;
    end if;
    select max(tick_id) into v_tick from ferry_queue.tick where tick_queue = q.queue_id;
    if v_tick is null then
        raise exception 'No ticks for this queue: %', i_queue;
    end if;
    return ferry_queue.register_consumer_at(i_queue, i_consumer, v_tick);
end;
$$;

create function ferry_queue.unregister_consumer(i_queue text, i_consumer text) returns integer
language plpgsql as $$
declare
    s ferry_queue.subscription;
begin
    s := ferry_queue.find_subscription(i_queue, i_consumer);
    delete from ferry_queue.retry_queue where ev_owner = s.sub_id;
    delete from ferry_queue.subscription where sub_id = s.sub_id;
    return 1;
end;
$$;

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

-- ---------------------------------------------------------------------------------------
-- retry

create function ferry_queue.event_retry(
    i_batch_id bigint, i_ev_id bigint, i_retry_time timestamptz)
returns integer
language plpgsql as $$
declare
    s  ferry_queue.subscription;
    e  record;
begin
    select * into s from ferry_queue.subscription where sub_batch = i_batch_id;
    if not found then
        raise exception 'Batch not found: %', i_batch_id using errcode = 'P0002';
    end if;
    execute format('select * from (%s) e where ev_id = $1',
                   ferry_queue.batch_event_sql(i_batch_id))
       into e using i_ev_id;
    if e.ev_id is null then
        raise exception 'Event % not in batch %', i_ev_id, i_batch_id;
    end if;
    insert into ferry_queue.retry_queue
        (ev_retry_after, ev_queue, ev_owner, ev_id, ev_time, ev_txid, ev_retry,
         ev_type, ev_data, ev_extra1, ev_extra2, ev_extra3, ev_extra4)
    values (i_retry_time, s.sub_queue, s.sub_id, e.ev_id, e.ev_time, e.ev_txid::text::xid8,
            coalesce(e.ev_retry, 0) + 1,
            e.ev_type, e.ev_data, e.ev_extra1, e.ev_extra2, e.ev_extra3, e.ev_extra4)
    on conflict do nothing;
    return case when found then 1 else 0 end;
end;
$$;

create function ferry_queue.event_retry(i_batch_id bigint, i_ev_id bigint, i_retry_seconds integer)
returns integer
language sql as $$
    select ferry_queue.event_retry(i_batch_id, i_ev_id,
                                   now() + make_interval(secs => i_retry_seconds))
$$;

-- Move due retry events back into their queue (for their owner only); returns how many.
create function ferry_queue.maint_retry_events() returns integer
language plpgsql as $$
declare
    v_count integer;
begin
    -- One mover at a time; writers of new retry events are not blocked.
    lock table ferry_queue.retry_queue in share update exclusive mode;
    with due as (
        delete from ferry_queue.retry_queue r
         where (r.ev_owner, r.ev_id) in (
                select ev_owner, ev_id from ferry_queue.retry_queue
                 where ev_retry_after <= now()
                 order by ev_retry_after limit 100)
        returning r.*
    )
    insert into ferry_queue.event
        (ev_part, ev_id, ev_time, ev_owner, ev_retry,
         ev_type, ev_data, ev_extra1, ev_extra2, ev_extra3, ev_extra4)
    select q.queue_id * 10 + q.queue_cur_table, d.ev_id, d.ev_time, d.ev_owner, d.ev_retry,
           d.ev_type, d.ev_data, d.ev_extra1, d.ev_extra2, d.ev_extra3, d.ev_extra4
      from due d join ferry_queue.queue q on q.queue_id = d.ev_queue;
    get diagnostics v_count = row_count;
    return v_count;
end;
$$;

-- ---------------------------------------------------------------------------------------
-- rotation and maintenance

create function ferry_queue.maint_rotate_tables_step1(i_queue text) returns integer
language plpgsql as $$
declare
    q        ferry_queue.queue;
    v_xmin   xid8;
    v_next   integer;
    v_table  text;
    v_maxtx  xid8;
    v_keep   bigint;
begin
    select * into q from ferry_queue.queue where queue_name = i_queue for no key update;
    if not found then
        raise exception 'Unknown queue: %', i_queue using errcode = 'P0002';
    end if;
    if q.queue_switch_step2 is null
       or q.queue_switch_time + q.queue_rotation_period > now() then
        return 0;
    end if;
    -- Every consumer must have passed the previous switch: the table about to be emptied
    -- only holds events of transactions older than that.
    select min(pg_snapshot_xmin(t.tick_snapshot)) into v_xmin
      from ferry_queue.subscription s
      join ferry_queue.tick t on t.tick_queue = s.sub_queue and t.tick_id = s.sub_last_tick
     where s.sub_queue = q.queue_id;
    if v_xmin is not null and v_xmin <= q.queue_switch_step2 then
        return 0;
    end if;
    v_next := (q.queue_cur_table + 1) % q.queue_ntables;
    v_table := format('event_%s_%s', q.queue_id, v_next);
    begin
        -- Writers still adding to the table hold a lock on it until they end.
        execute format('lock table ferry_queue.%I in access exclusive mode nowait', v_table);
    exception when lock_not_available then
        return 0;  -- somebody uses it (a writer, a long batch, pg_dump): next round
    end;
    -- Belt and braces: every event in the table must be visible to every consumer's last
    -- tick (xid below its xmin), whatever path the event took into the table.
    if v_xmin is not null then
        execute format('select max(ev_txid) from ferry_queue.%I', v_table) into v_maxtx;
        if v_maxtx is not null and v_maxtx >= v_xmin then
            return 0;
        end if;
    end if;
    execute format('truncate ferry_queue.%I', v_table);
    update ferry_queue.queue
       set queue_cur_table = v_next, queue_switch_time = now(),
           queue_switch_step1 = pg_current_xact_id(), queue_switch_step2 = null
     where queue_id = q.queue_id;
    perform ferry_queue.refresh_capture_functions(q.queue_id);
    -- Old ticks: keep those of the last rotation period (for repositioning), every
    -- consumer's position and the latest tick.
    select least(min(s.sub_last_tick), (select max(tick_id) from ferry_queue.tick
                                          where tick_queue = q.queue_id))
      into v_keep from ferry_queue.subscription s where s.sub_queue = q.queue_id;
    if v_keep is null then
        select max(tick_id) into v_keep from ferry_queue.tick where tick_queue = q.queue_id;
    end if;
    delete from ferry_queue.tick
     where tick_queue = q.queue_id and tick_id < v_keep
       and pg_snapshot_xmin(tick_snapshot) < q.queue_switch_step2;
    return 0;
end;
$$;

-- Must run in a transaction of its own after step1 committed.
create function ferry_queue.maint_rotate_tables_step2() returns integer
language plpgsql as $$
begin
    update ferry_queue.queue set queue_switch_step2 = pg_current_xact_id()
     where queue_switch_step2 is null;
    return 0;
end;
$$;

-- What the maintenance loop should call, in order: (function name, argument or NULL).
create function ferry_queue.maint_operations(out func_name text, out func_arg text)
returns setof record
language plpgsql as $$
declare
    q ferry_queue.queue;
    v_step2 boolean := false;
    v_fn text;
begin
    for q in select * from ferry_queue.queue order by queue_name loop
        if q.queue_switch_step2 is null then
            v_step2 := true;
        elsif q.queue_switch_time + q.queue_rotation_period <= now() then
            func_name := 'ferry_queue.maint_rotate_tables_step1';
            func_arg := q.queue_name;
            return next;
            v_step2 := true;
        end if;
    end loop;
    if v_step2 then
        func_name := 'ferry_queue.maint_rotate_tables_step2';
        func_arg := null;
        return next;
    end if;
    for q in select * from ferry_queue.queue where queue_extra_maint is not null
              order by queue_name loop
        foreach v_fn in array q.queue_extra_maint loop
            func_name := v_fn;
            func_arg := q.queue_name;
            return next;
        end loop;
    end loop;
end;
$$;

-- ---------------------------------------------------------------------------------------
-- information

create function ferry_queue.get_queue_info(
    out queue_name text, out queue_ntables integer, out queue_cur_table integer,
    out queue_rotation_period interval, out queue_switch_time timestamptz,
    out queue_external_ticker boolean, out queue_ticker_paused boolean,
    out queue_ticker_max_count integer, out queue_ticker_max_lag interval,
    out queue_ticker_idle_period interval, out ticker_lag interval,
    out ev_per_sec double precision, out ev_new bigint, out last_tick_id bigint)
returns setof record
language sql stable as $$
    select q.queue_name, q.queue_ntables, q.queue_cur_table, q.queue_rotation_period,
           q.queue_switch_time, q.queue_external_ticker, q.queue_ticker_paused,
           q.queue_ticker_max_count, q.queue_ticker_max_lag, q.queue_ticker_idle_period,
           now() - t.tick_time,
           case when t.tick_time > t2.tick_time then
               (t.tick_event_seq - t2.tick_event_seq)
               / extract(epoch from t.tick_time - t2.tick_time)::double precision
           end,
           ferry_queue.seq_position(q.queue_event_seq) - t.tick_event_seq,
           t.tick_id
      from ferry_queue.queue q
      left join lateral (select * from ferry_queue.tick
                          where tick_queue = q.queue_id
                          order by tick_id desc limit 1) t on true
      left join lateral (select * from ferry_queue.tick
                          where tick_queue = q.queue_id and tick_id < t.tick_id
                          order by tick_id desc limit 1) t2 on true
     order by q.queue_name
$$;

create function ferry_queue.get_queue_info(
    i_queue text,
    out queue_name text, out queue_ntables integer, out queue_cur_table integer,
    out queue_rotation_period interval, out queue_switch_time timestamptz,
    out queue_external_ticker boolean, out queue_ticker_paused boolean,
    out queue_ticker_max_count integer, out queue_ticker_max_lag interval,
    out queue_ticker_idle_period interval, out ticker_lag interval,
    out ev_per_sec double precision, out ev_new bigint, out last_tick_id bigint)
returns setof record
language plpgsql stable as $$
begin
    perform ferry_queue.find_queue(i_queue);
    return query select * from ferry_queue.get_queue_info() i where i.queue_name = i_queue;
end;
$$;

create function ferry_queue.get_consumer_info(
    i_queue text default null, i_consumer text default null,
    out queue_name text, out consumer_name text, out lag interval,
    out last_seen interval, out last_tick bigint, out current_batch bigint,
    out next_tick bigint, out pending_events bigint, out lag_seconds double precision)
returns setof record
language plpgsql stable as $$
begin
    if i_queue is not null then
        perform ferry_queue.find_queue(i_queue);
        if i_consumer is not null then
            perform ferry_queue.find_subscription(i_queue, i_consumer);
        end if;
    end if;
    return query
    select q.queue_name, s.sub_consumer, now() - t.tick_time, now() - s.sub_active,
           s.sub_last_tick, s.sub_batch, s.sub_next_tick,
           ferry_queue.seq_position(q.queue_event_seq) - t.tick_event_seq,
           extract(epoch from now() - t.tick_time)::double precision
      from ferry_queue.subscription s
      join ferry_queue.queue q on q.queue_id = s.sub_queue
      join ferry_queue.tick t on t.tick_queue = s.sub_queue and t.tick_id = s.sub_last_tick
     where (i_queue is null or q.queue_name = i_queue)
       and (i_consumer is null or s.sub_consumer = i_consumer)
     order by q.queue_name, s.sub_consumer;
end;
$$;

-- ---------------------------------------------------------------------------------------
-- capture triggers (event format: docs/events.md)
--
-- Row trigger arguments, computed once by attach_capture so the per-row work is small:
--   0 queue name, 1 table as %I.%I (ev_extra1), 2 primary-key list for ev_type.
--
-- Row-trigger functions are generated: ferry_queue.capture_<queue_id>_<n>(), one per queue
-- and primary-key column list (PL/pgSQL compiles a trigger function per trigger, so tables
-- with the same key columns share one).  Each names the queue's *current* rotation table,
-- its sequence and the key columns in static SQL, so a row costs one cached-plan INSERT
-- straight into that table: no EXECUTE, no lookup of the current table, no tuple routing
-- through the partitioned parent, and a key-change test on typed columns (testing keys
-- generically through jsonb would cost more than all the rest).  Every rotation rewrites
-- the functions; a writer picks up the new one at its next transaction or lock, and one
-- that still adds to the previous table is safe because rotation only truncates a table
-- whose every event all consumers have passed (see maint_rotate_tables_step1).

create table ferry_queue.capture_function (
    cf_queue    integer not null references ferry_queue.queue on delete cascade,
    cf_pkey     text[]  not null,
    cf_name     text    not null unique,
    primary key (cf_queue, cf_pkey)
);

-- (Re)write the capture function of a queue for a primary-key column list.
create function ferry_queue.capture_function(i_queue_id integer, i_pkey text[])
returns text
language plpgsql as $$
declare
    q      ferry_queue.queue;
    v_name text;
    v_body text;
begin
    select * into q from ferry_queue.queue where queue_id = i_queue_id;
    select cf_name into v_name from ferry_queue.capture_function
     where cf_queue = i_queue_id and cf_pkey = i_pkey;
    if v_name is null then
        v_name := format('capture_%s_%s', i_queue_id,
                         (select count(*) + 1 from ferry_queue.capture_function
                           where cf_queue = i_queue_id));
        insert into ferry_queue.capture_function (cf_queue, cf_pkey, cf_name)
        values (i_queue_id, i_pkey, v_name);
    end if;
    v_body := $template$
begin
    if tg_op = 'INSERT' then
        insert into @TABLE@ (ev_part, ev_id, ev_type, ev_data, ev_extra1)
        values (@PART@, nextval(@SEQ@), 'I:' || tg_argv[2], row_to_json(new)::text, tg_argv[1]);
    elsif tg_op = 'DELETE' then
        insert into @TABLE@ (ev_part, ev_id, ev_type, ev_data, ev_extra1)
        values (@PART@, nextval(@SEQ@), 'D:' || tg_argv[2], row_to_json(old)::text, tg_argv[1]);
    elsif @KEY_CHANGED@ then
        -- Key change: a delete of the old key, then an insert of the new row.
        insert into @TABLE@ (ev_part, ev_id, ev_type, ev_data, ev_extra1)
        values (@PART@, nextval(@SEQ@), 'D:' || tg_argv[2], row_to_json(old)::text, tg_argv[1]);
        insert into @TABLE@ (ev_part, ev_id, ev_type, ev_data, ev_extra1)
        values (@PART@, nextval(@SEQ@), 'I:' || tg_argv[2], row_to_json(new)::text, tg_argv[1]);
    else
        insert into @TABLE@ (ev_part, ev_id, ev_type, ev_data, ev_extra1)
        values (@PART@, nextval(@SEQ@), 'U:' || tg_argv[2], row_to_json(new)::text, tg_argv[1]);
    end if;
    return null;
end;
$template$;
    v_body := replace(v_body, '@KEY_CHANGED@',
        (select string_agg(format('old.%I is distinct from new.%I', k, k), ' or ')
           from unnest(i_pkey) k));
    v_body := replace(v_body, '@TABLE@',
        format('ferry_queue.%I', format('event_%s_%s', q.queue_id, q.queue_cur_table)));
    v_body := replace(v_body, '@PART@', (q.queue_id * 10 + q.queue_cur_table)::text);
    v_body := replace(v_body, '@SEQ@', quote_literal(q.queue_event_seq::text) || '::regclass');
    execute format('create or replace function ferry_queue.%I() returns trigger'
                   ' language plpgsql as %L', v_name, v_body);
    return v_name;
end;
$$;

-- Point every capture function of a queue at its current rotation table.
create function ferry_queue.refresh_capture_functions(i_queue_id integer) returns integer
language plpgsql as $$
declare
    v_pkey text[];
    v_count integer := 0;
begin
    for v_pkey in select cf_pkey from ferry_queue.capture_function where cf_queue = i_queue_id
    loop
        perform ferry_queue.capture_function(i_queue_id, v_pkey);
        v_count := v_count + 1;
    end loop;
    return v_count;
end;
$$;

-- Statement trigger: TRUNCATE becomes one 'R' event.  Arguments: queue name, table.
create function ferry_queue.capture_truncate() returns trigger
language plpgsql as $$
declare
    v_part integer;
    v_seq  regclass;
begin
    select queue_id * 10 + queue_cur_table, queue_event_seq into v_part, v_seq
      from ferry_queue.queue where queue_name = tg_argv[0];
    if not found then
        raise exception 'Unknown queue: %', tg_argv[0] using errcode = 'P0002';
    end if;
    insert into ferry_queue.event (ev_part, ev_id, ev_type, ev_data, ev_extra1)
    values (v_part, nextval(v_seq), 'R', null, tg_argv[1]);
    return null;
end;
$$;

-- Subscriber tables: direct writes are refused.  Replay runs with
-- session_replication_role = replica, where ordinary triggers do not fire.
create function ferry_queue.deny_write() returns trigger
language plpgsql as $$
begin
    raise exception 'Table ''%'' to queue ''%'': change not allowed (%)',
        tg_argv[1], tg_argv[0], tg_op
        using errcode = '42501';
end;
$$;

create function ferry_queue.detach_capture(queue text, tbl regclass) returns integer
language plpgsql as $$
declare
    v_queue text := detach_capture.queue;
begin
    execute format('drop trigger if exists %I on %s', '_ferry_' || v_queue || '_capture', tbl);
    execute format('drop trigger if exists %I on %s', '_ferry_' || v_queue || '_truncate', tbl);
    return 1;
end;
$$;

-- (Re)create the capture triggers of queue on tbl; deny => true makes them refuse writes.
create function ferry_queue.attach_capture(
    queue text, tbl regclass, deny boolean default false)
returns integer
language plpgsql as $$
declare
    v_queue text := attach_capture.queue;
    v_row   text := '_ferry_' || attach_capture.queue || '_capture';
    v_trunc text := '_ferry_' || attach_capture.queue || '_truncate';
    v_name  text;
    v_pk    text[];
    q       ferry_queue.queue;
begin
    q := ferry_queue.find_queue(v_queue);
    select format('%I.%I', n.nspname, c.relname) into v_name
      from pg_class c join pg_namespace n on n.oid = c.relnamespace
     where c.oid = tbl;
    select array_agg(a.attname::text order by k.ord) into v_pk
      from pg_index i
      cross join lateral unnest(i.indkey) with ordinality k(attnum, ord)
      join pg_attribute a on a.attrelid = i.indrelid and a.attnum = k.attnum
     where i.indrelid = tbl and i.indisprimary;
    if v_pk is null and not deny then
        raise exception 'Primary key missing on table: %', v_name;
    end if;
    perform ferry_queue.detach_capture(v_queue, tbl);
    if deny then
        execute format('create trigger %I after insert or update or delete on %s'
                       ' for each row execute function ferry_queue.deny_write(%L, %L)',
                       v_row, tbl, v_queue, v_name);
        execute format('create trigger %I after truncate on %s'
                       ' for each statement execute function ferry_queue.deny_write(%L, %L)',
                       v_trunc, tbl, v_queue, v_name);
        return 1;
    end if;
    execute format('create trigger %I after insert or update or delete on %s'
                   ' for each row execute function ferry_queue.%I(%L, %L, %L)',
                   v_row, tbl, ferry_queue.capture_function(q.queue_id, v_pk), v_queue, v_name,
                   (select string_agg(quote_ident(x), ',') from unnest(v_pk) x));
    execute format('create trigger %I after truncate on %s'
                   ' for each statement execute function ferry_queue.capture_truncate(%L, %L)',
                   v_trunc, tbl, v_queue, v_name);
    return 1;
end;
$$;
