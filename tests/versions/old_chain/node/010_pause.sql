-- ferry_node: pause that holds, and the worker's acknowledgement of state changes.
--
-- Cascade operations (change-provider, takeover) pause a worker and then rely on its
-- position not moving.  A worker may be in the middle of a batch when the pause commits,
-- so waiting for it is not enough (it may not be running at all): instead, while a node is
-- paused, the worker's connection (application_name 'pgferry-worker') may not move
-- last_tick_id.  An in-flight batch then fails and rolls back as a whole, and the batch is
-- taken again after resume.  Admin commands connect under another name and may set the
-- position of a paused node (takeover does).
--
-- uptodate follows the original: a change of paused clears it, and the worker's next write
-- of its heartbeat (last_seen) sets it again, which tells the admin the change was seen.

create function ferry_node.local_state_guard() returns trigger
language plpgsql as $$
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

create trigger local_state_guard before update on ferry_node.local_state
    for each row execute function ferry_node.local_state_guard();
-- The worker applies with session_replication_role = replica: the guard must fire there too.
alter table ferry_node.local_state enable always trigger local_state_guard;
