-- ---------------------------------------------------------------------------------------
-- Function: ferry_queue.get_batch_cursor(bigint, text, integer, text)
--
--     Open cursor i_cursor_name over the batch (optionally filtered by i_extra_where, an SQL
--     condition on the event columns) and return its first i_quick_limit rows; the caller
--     fetches the rest with FETCH in the same transaction.
--
-- Parameters:
--     i_batch_id bigint
--     i_cursor_name text
--     i_quick_limit integer
--     i_extra_where text default null
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
create or replace function ferry_queue.get_batch_cursor(
    i_batch_id bigint, i_cursor_name text, i_quick_limit integer,
    i_extra_where text default null,
    out ev_id bigint, out ev_time timestamptz, out ev_txid bigint, out ev_retry integer,
    out ev_type text, out ev_data text,
    out ev_extra1 text, out ev_extra2 text, out ev_extra3 text, out ev_extra4 text)
returns setof record
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
    v_sql text;
    v_cur refcursor := i_cursor_name;
    v_n   integer := 0;
begin
    v_sql := ferry_queue.batch_event_sql(i_batch_id);
    if i_extra_where is not null and i_extra_where <> '' then
        v_sql := format('select * from (%s) e where (%s) order by ev_id', v_sql, i_extra_where);
    end if;
    open v_cur no scroll for execute v_sql;
    while v_n < i_quick_limit loop
        fetch v_cur into ev_id, ev_time, ev_txid, ev_retry, ev_type, ev_data,
                         ev_extra1, ev_extra2, ev_extra3, ev_extra4;
        exit when not found;
        v_n := v_n + 1;
        return next;
    end loop;
end;
$$;
