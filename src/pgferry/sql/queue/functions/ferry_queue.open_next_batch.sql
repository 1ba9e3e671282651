-- ---------------------------------------------------------------------------------------
-- Function: ferry_queue.open_next_batch(text, text, interval, integer, interval, bigint)
--
--     The next batch of consumer i_consumer (next_batch_custom and next_batch_upto), or the
--     one it has open.  The consumer's row is locked: one open batch per consumer, even with
--     racing callers.  The batch ends at the first tick after the consumer's position that
--     is at least i_min_lag old and
--       * with i_upto: is i_upto or closes i_min_count events, never after i_upto (a copied
--         group's own consumer meets the main stream exactly at its tick);
--       * otherwise, with i_min_count or i_min_interval: closes that many events or that
--         long a span (far behind consumers get one large batch instead of many small
--         ones); without either, the next tick.
--     Raises when the consumer's last tick is gone.
--
-- Parameters:
--     i_queue text
--     i_consumer text
--     i_min_lag interval
--     i_min_count integer
--     i_min_interval interval
--     i_upto bigint
--
-- Returns:
--     bigint                 the batch id, or NULL when no such tick exists yet
--
-- Tables:
--     ferry_queue.subscription (written)
--     ferry_queue.tick
-- ---------------------------------------------------------------------------------------
create or replace function ferry_queue.open_next_batch(
    i_queue text, i_consumer text,
    i_min_lag interval, i_min_count integer, i_min_interval interval, i_upto bigint)
returns bigint
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
    s       ferry_queue.subscription;
    v_prev  ferry_queue.tick;
    v_next  bigint;
begin
    s := ferry_queue.find_subscription(i_queue, i_consumer);
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
    select tick_id into v_next from ferry_queue.tick
     where tick_queue = s.sub_queue and tick_id > s.sub_last_tick
       and (i_upto is null or tick_id <= i_upto)
       and (i_min_lag is null or tick_time <= now() - i_min_lag)
       and case when i_upto is not null then
                    tick_id = i_upto or tick_event_seq - v_prev.tick_event_seq >= i_min_count
                when i_min_count is null and i_min_interval is null then true
                else tick_event_seq - v_prev.tick_event_seq >= i_min_count
                     or tick_time - v_prev.tick_time >= i_min_interval
           end
     order by tick_id limit 1;
    return ferry_queue.open_batch(s.sub_id, v_next);
end;
$$;
