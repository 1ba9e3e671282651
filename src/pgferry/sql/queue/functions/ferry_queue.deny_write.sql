-- ---------------------------------------------------------------------------------------
-- Function: ferry_queue.deny_write()
--
--     Trigger on a subscriber's table: a direct write is refused (SQLSTATE 42501).  Replay runs
--     with session_replication_role = replica, where ordinary triggers do not fire.
--     Arguments: queue name, table.  It reads nothing, so it runs with the writer's rights
--     (search_path pinned all the same).
--
-- Returns:
--     trigger
-- ---------------------------------------------------------------------------------------
create or replace function ferry_queue.deny_write() returns trigger
language plpgsql set search_path = pg_catalog, pg_temp as $$
begin
    raise exception 'Table ''%'' to queue ''%'': change not allowed (%)',
        tg_argv[1], tg_argv[0], tg_op
        using errcode = '42501';
end;
$$;
