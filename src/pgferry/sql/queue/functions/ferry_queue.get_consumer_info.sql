-- ---------------------------------------------------------------------------------------
-- Function: ferry_queue.get_consumer_info(text, text)
--
--     Position, lag and pending events of every consumer, or of those of queue i_queue, or of
--     consumer i_consumer there; an unknown queue or consumer raises SQLSTATE P0002.
--
-- Parameters:
--     i_queue text default null
--     i_consumer text default null
--
-- Returns:
--     setof records of:
--         queue_name text
--         consumer_name text
--         lag interval
--         last_seen interval
--         last_tick bigint
--         current_batch bigint
--         next_tick bigint
--         pending_events bigint
--         lag_seconds double precision
--
-- Tables:
--     ferry_queue.queue
--     ferry_queue.subscription
--     ferry_queue.tick
-- ---------------------------------------------------------------------------------------
create or replace function ferry_queue.get_consumer_info(
    i_queue text default null, i_consumer text default null,
    out queue_name text, out consumer_name text, out lag interval,
    out last_seen interval, out last_tick bigint, out current_batch bigint,
    out next_tick bigint, out pending_events bigint, out lag_seconds double precision)
returns setof record
language plpgsql stable set search_path = pg_catalog, pg_temp as $$
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
