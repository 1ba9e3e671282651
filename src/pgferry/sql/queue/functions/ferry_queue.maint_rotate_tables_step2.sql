-- ---------------------------------------------------------------------------------------
-- Function: ferry_queue.maint_rotate_tables_step2()
--
--     Second half of rotation: record the transaction after which every writer sees the new
--     current table.  Must run in a transaction of its own after step1 committed.  Returns 0.
--
-- Returns:
--     integer
--
-- Tables:
--     ferry_queue.queue (written)
-- ---------------------------------------------------------------------------------------
create or replace function ferry_queue.maint_rotate_tables_step2() returns integer
language plpgsql set search_path = pg_catalog, pg_temp as $$
begin
    update ferry_queue.queue set queue_switch_step2 = pg_current_xact_id()
     where queue_switch_step2 is null;
    return 0;
end;
$$;
