-- ---------------------------------------------------------------------------------------
-- Function: ferry_queue.rewind_consumer(text, text, bigint)
--
--     Put consumer i_consumer back at tick i_tick_id (its own durable position), provided the
--     tick and every event after it are still held by the queue.  Returns the previous
--     position.  Raises with SQLSTATE 55000 when the events are gone.
--
-- Parameters:
--     i_queue text
--     i_consumer text
--     i_tick_id bigint
--
-- Returns:
--     bigint
--
-- Tables:
--     ferry_queue.queue
--     ferry_queue.subscription
--     ferry_queue.tick
-- ---------------------------------------------------------------------------------------
create or replace function ferry_queue.rewind_consumer(i_queue text, i_consumer text, i_tick_id bigint)
returns bigint
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
    q      ferry_queue.queue;
    s      ferry_queue.subscription;
    v_snap pg_snapshot;
begin
    s := ferry_queue.find_subscription(i_queue, i_consumer);
    select * into q from ferry_queue.queue where queue_id = s.sub_queue;
    select tick_snapshot into v_snap from ferry_queue.tick
     where tick_queue = q.queue_id and tick_id = i_tick_id;
    if not found then
        raise exception 'Tick % is no longer in queue %', i_tick_id, i_queue
            using errcode = '55000';
    end if;
    if q.queue_rotated_xid is not null
       and pg_snapshot_xmin(v_snap) < q.queue_rotated_xid then
        raise exception 'Events after tick % are no longer in queue % (rotated away)',
            i_tick_id, i_queue using errcode = '55000';
    end if;
    perform ferry_queue.register_consumer_at(i_queue, i_consumer, i_tick_id);
    return s.sub_last_tick;
end;
$$;
