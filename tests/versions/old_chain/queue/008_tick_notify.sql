-- ferry_queue: subscribers hear of a new tick at once.
--
-- Every tick sends a notification on channel ferry_queue_tick with the queue's name as
-- payload (delivered when the ticking transaction commits).  A worker that has nothing to
-- do waits for it instead of sleeping loop_delay, so a batch is taken as soon as it exists.

create function ferry_queue.notify_tick() returns trigger
language plpgsql as $$
begin
    perform pg_notify('ferry_queue_tick',
                      (select queue_name from ferry_queue.queue where queue_id = new.tick_queue));
    return null;
end;
$$;

create trigger notify_tick after insert on ferry_queue.tick
    for each row execute function ferry_queue.notify_tick();
