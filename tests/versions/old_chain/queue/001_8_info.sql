-- Queue version 1, part 8 of 9: information (get_queue_info, get_consumer_info).

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
