-- Queue version 1, part 2 of 9: lookup helpers (version, find_queue, find_subscription,
-- seq_position), queue management (create_queue, drop_queue, set_queue_config) and
-- insert_event.

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
