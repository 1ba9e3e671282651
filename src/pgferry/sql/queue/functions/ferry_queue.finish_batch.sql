-- ---------------------------------------------------------------------------------------
-- Function: ferry_queue.finish_batch(bigint)
--
--     Close batch i_batch_id: the consumer's position moves to the batch's closing tick.
--     Returns 1, or 0 (with a warning) when there is no such open batch.
--
-- Parameters:
--     i_batch_id bigint
--
-- Returns:
--     integer
--
-- Tables:
--     ferry_queue.subscription (written)
-- ---------------------------------------------------------------------------------------
create or replace function ferry_queue.finish_batch(i_batch_id bigint) returns integer
language plpgsql set search_path = pg_catalog, pg_temp as $$
begin
    update ferry_queue.subscription
       set sub_last_tick = sub_next_tick, sub_next_tick = null, sub_batch = null,
           sub_active = now()
     where sub_batch = i_batch_id;
    if not found then
        raise warning 'finish_batch: batch % not found', i_batch_id;
        return 0;
    end if;
    return 1;
end;
$$;
