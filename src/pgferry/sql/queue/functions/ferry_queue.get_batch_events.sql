-- ---------------------------------------------------------------------------------------
-- Function: ferry_queue.get_batch_events(bigint)
--
--     The events of batch i_batch_id, in ev_id order.
--
-- Parameters:
--     i_batch_id bigint
--
-- Returns:
--     setof records of:
--         ev_id bigint
--         ev_time timestamptz
--         ev_txid bigint
--         ev_retry integer
--         ev_type text
--         ev_data text
--         ev_extra1 text
--         ev_extra2 text
--         ev_extra3 text
--         ev_extra4 text
-- ---------------------------------------------------------------------------------------
create or replace function ferry_queue.get_batch_events(
    i_batch_id bigint,
    out ev_id bigint, out ev_time timestamptz, out ev_txid bigint, out ev_retry integer,
    out ev_type text, out ev_data text,
    out ev_extra1 text, out ev_extra2 text, out ev_extra3 text, out ev_extra4 text)
returns setof record
language plpgsql stable set search_path = pg_catalog, pg_temp as $$
begin
    return query execute ferry_queue.batch_event_sql(i_batch_id);
end;
$$;
