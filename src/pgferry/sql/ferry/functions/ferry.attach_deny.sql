-- ---------------------------------------------------------------------------------------
-- Function: ferry.attach_deny(text, regclass)
--
--     Refuse direct writes to a subscriber's copy of a replicated table.  A leaf has no queue
--     of its own, so this does not go through ferry_queue.attach_capture (which needs one); it
--     installs ferry_queue.deny_write() under the same trigger names, so
--     ferry_queue.detach_capture removes them like any capture trigger.  Returns 1.
--
-- Parameters:
--     i_queue text
--     i_table regclass
--
-- Returns:
--     integer
-- ---------------------------------------------------------------------------------------
create or replace function ferry.attach_deny(i_queue text, i_table regclass) returns integer
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
    v_name text;
begin
    select format('%I.%I', n.nspname, c.relname) into v_name
      from pg_class c join pg_namespace n on n.oid = c.relnamespace
     where c.oid = i_table;
    perform ferry_queue.detach_capture(i_queue, i_table);
    execute format('create trigger %I after insert or update or delete on %s'
                   ' for each row execute function ferry_queue.deny_write(%L, %L)',
                   format('_ferry_%s_capture', i_queue), i_table, i_queue, v_name);
    execute format('create trigger %I after truncate on %s'
                   ' for each statement execute function ferry_queue.deny_write(%L, %L)',
                   format('_ferry_%s_truncate', i_queue), i_table, i_queue, v_name);
    return 1;
end;
$$;
