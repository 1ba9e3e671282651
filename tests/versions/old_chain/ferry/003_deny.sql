-- ferry.attach_deny: refuse direct writes to a subscriber's copy of a replicated table.
--
-- A leaf has no queue of its own, so this does not go through ferry_queue.attach_capture
-- (which needs one); it installs the queue layer's deny_write() under the same trigger
-- names, so ferry_queue.detach_capture removes them like any capture trigger.  The worker
-- applies with session_replication_role = replica, where these triggers do not fire.

create function ferry.attach_deny(i_queue text, i_table regclass) returns integer
language plpgsql as $$
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
