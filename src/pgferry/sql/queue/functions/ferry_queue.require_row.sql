-- ---------------------------------------------------------------------------------------
-- Function: ferry_queue.require_row(anyelement, text)
--
--     i_row when there is one; SQLSTATE P0002 with i_message when it is NULL (a lookup that
--     found no row).  The lookups of pgferry's SQL (find_batch, lock_queue,
--     ferry_node.find_node) raise through it.
--
-- Parameters:
--     i_row anyelement
--     i_message text
--
-- Returns:
--     anyelement             i_row
-- ---------------------------------------------------------------------------------------
create or replace function ferry_queue.require_row(i_row anyelement, i_message text)
returns anyelement
language plpgsql set search_path = pg_catalog, pg_temp as $$
begin
    if i_row is null then
        raise exception '%', i_message using errcode = 'P0002';
    end if;
    return i_row;
end;
$$;
