-- ---------------------------------------------------------------------------------------
-- Trigger function: ferry_node.local_state_guard()
--
--     Row trigger on ferry_node.local_state.  While a node is paused, the worker's connection
--     (application_name 'pgferry-worker') may not move last_tick_id: an in-flight batch fails
--     and rolls back as a whole (SQLSTATE 55000).  A change of paused clears uptodate, and the
--     worker's next heartbeat (last_seen) sets it again, which tells the admin the change was
--     seen.  It fires always, also in the worker's replica-role session.
-- ---------------------------------------------------------------------------------------
-- Its trigger is re-created by every apply: dropped here, created after the function.
-- The worker applies with session_replication_role = replica: the guard fires always.
drop trigger if exists local_state_guard on ferry_node.local_state;

create or replace function ferry_node.local_state_guard() returns trigger
language plpgsql set search_path = pg_catalog, pg_temp as $$
begin
    if new.paused is distinct from old.paused then
        new.uptodate := false;
    elsif old.paused and new.paused
          and new.last_tick_id is distinct from old.last_tick_id
          and current_setting('application_name', true) = 'pgferry-worker' then
        raise exception 'Node is paused: position not moved (consumer %)', old.consumer_name
            using errcode = '55000';
    elsif not new.uptodate and new.last_seen is distinct from old.last_seen then
        new.uptodate := true;
    end if;
    return new;
end;
$$;

create trigger local_state_guard before update on ferry_node.local_state for each row execute function ferry_node.local_state_guard();
alter table ferry_node.local_state enable always trigger local_state_guard;
