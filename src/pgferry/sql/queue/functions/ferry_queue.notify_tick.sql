-- ---------------------------------------------------------------------------------------
-- Trigger function: ferry_queue.notify_tick()
--
--     Row trigger on ferry_queue.tick: every tick sends a notification on channel
--     ferry_queue_tick with the queue's name as payload (delivered at commit), so that an idle
--     worker takes a batch as soon as it exists.  It fires always, also in the replica-role
--     session of a branch's worker that mirrors its provider's ticks.
--
-- Tables:
--     ferry_queue.queue
-- ---------------------------------------------------------------------------------------
-- Its trigger is re-created by every apply: dropped here, created after the function.
-- It fires always: a branch's worker mirrors its provider's ticks in
-- session_replication_role = replica, where an ordinary trigger does not fire.
drop trigger if exists notify_tick on ferry_queue.tick;

create or replace function ferry_queue.notify_tick() returns trigger
language plpgsql set search_path = pg_catalog, pg_temp as $$
begin
    perform pg_notify('ferry_queue_tick',
                      (select queue_name from ferry_queue.queue where queue_id = new.tick_queue));
    return null;
end;
$$;

create trigger notify_tick after insert on ferry_queue.tick for each row execute function ferry_queue.notify_tick();
alter table ferry_queue.tick enable always trigger notify_tick;
