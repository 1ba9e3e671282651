-- ---------------------------------------------------------------------------------------
-- Function: ferry_queue.open_batch(integer, bigint)
--
--     The batch of a locked consumer up to tick i_next, written with sub_active in one update
--     (NULL i_next: no batch, only the call recorded).  Returns the batch id or NULL.
--
-- Parameters:
--     i_sub_id integer
--     i_next bigint
--
-- Returns:
--     bigint
--
-- Tables:
--     ferry_queue.subscription (written)
-- ---------------------------------------------------------------------------------------
create or replace function ferry_queue.open_batch(i_sub_id integer, i_next bigint) returns bigint
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
    v_batch bigint;
begin
    if i_next is null then
        update ferry_queue.subscription set sub_active = now() where sub_id = i_sub_id;
        return null;
    end if;
    v_batch := nextval('ferry_queue.batch_id_seq');
    update ferry_queue.subscription
       set sub_batch = v_batch, sub_next_tick = i_next, sub_active = now()
     where sub_id = i_sub_id;
    return v_batch;
end;
$$;
