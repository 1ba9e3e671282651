-- ---------------------------------------------------------------------------------------
-- Function: ferry_queue.get_batch_info(bigint)
--
--     The queue, consumer, ticks, times, event positions and snapshots of batch i_batch_id;
--     raises SQLSTATE P0002 when there is no such open batch.
--
-- Parameters:
--     i_batch_id bigint
--
-- Returns:
--     one row of:
--         queue_name text
--         consumer_name text
--         batch_start timestamptz
--         batch_end timestamptz
--         prev_tick_id bigint
--         tick_id bigint
--         lag interval
--         seq_start bigint
--         seq_end bigint
--         prev_snapshot text
--         snapshot text
--
-- Tables:
--     ferry_queue.queue
--     ferry_queue.subscription
--     ferry_queue.tick
-- ---------------------------------------------------------------------------------------
create or replace function ferry_queue.get_batch_info(
    i_batch_id bigint,
    out queue_name text, out consumer_name text,
    out batch_start timestamptz, out batch_end timestamptz,
    out prev_tick_id bigint, out tick_id bigint, out lag interval,
    out seq_start bigint, out seq_end bigint,
    out prev_snapshot text, out snapshot text)
language plpgsql stable set search_path = pg_catalog, pg_temp as $$
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
