-- ---------------------------------------------------------------------------------------
-- Function: ferry_queue.open_next_batch(text, text, interval, integer, interval, bigint)
--
--     The next batch of consumer i_consumer (next_batch_custom and next_batch_upto), or the
--     one it has open: next_batch_chosen with a fixed i_min_count (not sized).  The batch
--     ends at the first tick after the consumer's position that is at least i_min_lag old
--     and
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
-- Calls:
--     ferry_queue.next_batch_chosen
-- ---------------------------------------------------------------------------------------
create or replace function ferry_queue.open_next_batch(
    i_queue text, i_consumer text,
    i_min_lag interval, i_min_count integer, i_min_interval interval, i_upto bigint)
returns bigint
language sql set search_path = pg_catalog, pg_temp as $$
    select c.batch_id
      from ferry_queue.next_batch_chosen(i_queue, i_consumer, i_min_lag, i_min_count,
                                         i_min_interval, i_upto, false) c
$$;
