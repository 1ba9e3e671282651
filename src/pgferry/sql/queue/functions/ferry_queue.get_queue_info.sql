-- ---------------------------------------------------------------------------------------
-- Function: ferry_queue.get_queue_info()
--
--     Every queue's settings, ticker lag, events per second between its last two ticks, events
--     not ticked yet and last tick id, by queue name.
--
-- Returns:
--     setof records of:
--         queue_name text
--         queue_ntables integer
--         queue_cur_table integer
--         queue_rotation_period interval
--         queue_switch_time timestamptz
--         queue_external_ticker boolean
--         queue_ticker_paused boolean
--         queue_ticker_max_count integer
--         queue_ticker_max_lag interval
--         queue_ticker_idle_period interval
--         ticker_lag interval
--         ev_per_sec double precision
--         ev_new bigint
--         last_tick_id bigint
--
-- Tables:
--     ferry_queue.queue
--     ferry_queue.tick
-- ---------------------------------------------------------------------------------------
create or replace function ferry_queue.get_queue_info(
    out queue_name text, out queue_ntables integer, out queue_cur_table integer,
    out queue_rotation_period interval, out queue_switch_time timestamptz,
    out queue_external_ticker boolean, out queue_ticker_paused boolean,
    out queue_ticker_max_count integer, out queue_ticker_max_lag interval,
    out queue_ticker_idle_period interval, out ticker_lag interval,
    out ev_per_sec double precision, out ev_new bigint, out last_tick_id bigint)
returns setof record
language sql stable set search_path = pg_catalog, pg_temp as $$
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

-- ---------------------------------------------------------------------------------------
-- Function: ferry_queue.get_queue_info(text)
--
--     get_queue_info() of queue i_queue; raises SQLSTATE P0002 when it is unknown.
--
-- Parameters:
--     i_queue text
--
-- Returns:
--     setof records of:
--         queue_name text
--         queue_ntables integer
--         queue_cur_table integer
--         queue_rotation_period interval
--         queue_switch_time timestamptz
--         queue_external_ticker boolean
--         queue_ticker_paused boolean
--         queue_ticker_max_count integer
--         queue_ticker_max_lag interval
--         queue_ticker_idle_period interval
--         ticker_lag interval
--         ev_per_sec double precision
--         ev_new bigint
--         last_tick_id bigint
-- ---------------------------------------------------------------------------------------
create or replace function ferry_queue.get_queue_info(
    i_queue text,
    out queue_name text,
    out queue_ntables integer,
    out queue_cur_table integer,
    out queue_rotation_period interval,
    out queue_switch_time timestamptz,
    out queue_external_ticker boolean,
    out queue_ticker_paused boolean,
    out queue_ticker_max_count integer,
    out queue_ticker_max_lag interval,
    out queue_ticker_idle_period interval,
    out ticker_lag interval,
    out ev_per_sec double precision,
    out ev_new bigint,
    out last_tick_id bigint)
returns setof record
language plpgsql stable set search_path = pg_catalog, pg_temp as $$
begin
    perform ferry_queue.find_queue(i_queue);
    return query select * from ferry_queue.get_queue_info() i where i.queue_name = i_queue;
end;
$$;
