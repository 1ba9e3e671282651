-- ---------------------------------------------------------------------------------------
-- Function: ferry_queue.drop_capture_triggers(text, regclass)
--
--     Drop the queue's capture triggers of tbl (row or statement, truncate, or deny), keeping
--     functions.
--
-- Parameters:
--     i_queue text
--     i_table regclass
--
-- Returns:
--     integer
-- ---------------------------------------------------------------------------------------
create or replace function ferry_queue.drop_capture_triggers(i_queue text, i_table regclass)
returns integer
language plpgsql set search_path = pg_catalog, pg_temp as $$
begin
    execute format('drop trigger if exists %I on %s', '_ferry_' || i_queue || '_capture', i_table);
    execute format('drop trigger if exists %I on %s', '_ferry_' || i_queue || '_truncate', i_table);
    execute format('drop trigger if exists %I on %s', '_ferry_' || i_queue || '_capture_insert',
                   i_table);
    execute format('drop trigger if exists %I on %s', '_ferry_' || i_queue || '_capture_delete',
                   i_table);
    return 1;
end;
$$;
