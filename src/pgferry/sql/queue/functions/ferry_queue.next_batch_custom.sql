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
--     ferry_queue.subscription (written, by open_next_batch)
--     ferry_queue.tick
-- ---------------------------------------------------------------------------------------
create or replace function ferry_queue.next_batch_custom(
    i_queue text, i_consumer text,
    i_min_lag interval, i_min_count integer, i_min_interval interval)
returns bigint
language sql set search_path = pg_catalog, pg_temp as $$
    select ferry_queue.open_next_batch(i_queue, i_consumer, i_min_lag, i_min_count, i_min_interval,
                                        null)
$$;
