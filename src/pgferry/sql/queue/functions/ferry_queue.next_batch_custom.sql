-- ---------------------------------------------------------------------------------------
-- Function: ferry_queue.next_batch_custom(text, text, interval, integer, interval)
--
--     Open the next batch of consumer i_consumer, or return the one it has open.  The batch
--     ends at the first tick after the consumer's position that is at least i_min_lag old and,
--     when i_min_count or i_min_interval is given, closes that many events or that long a span
--     (far behind consumers get one large batch instead of many small ones).  Returns the batch
--     id, or NULL when no such tick exists yet.
--
-- Parameters:
--     i_queue text
--     i_consumer text
--     i_min_lag interval
--     i_min_count integer
--     i_min_interval interval
--
-- Returns:
--     bigint
--
-- Tables:
--     ferry_queue.subscription (written)
--     ferry_queue.tick
-- ---------------------------------------------------------------------------------------
create or replace function ferry_queue.next_batch_custom(
    i_queue text, i_consumer text,
    i_min_lag interval, i_min_count integer, i_min_interval interval)
returns bigint
language plpgsql as $$
declare
    s       ferry_queue.subscription;
    v_prev  ferry_queue.tick;
    v_next  bigint;
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
    return ferry_queue.open_batch(s.sub_id, v_next);
end;
$$;
