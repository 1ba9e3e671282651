-- ---------------------------------------------------------------------------------------
-- Trigger function: ferry_queue.tick_durable()
--
--     Statement trigger on ferry_queue.tick: a transaction that inserts a tick commits with
--     synchronous_commit on, so that a tick is durable before anybody can read a batch that
--     ends at it (the WAL flush also covers every event committed before its snapshot).
-- ---------------------------------------------------------------------------------------
-- Its trigger is re-created by every apply: dropped here, created after the function.
drop trigger if exists tick_durable on ferry_queue.tick;

create or replace function ferry_queue.tick_durable() returns trigger
language plpgsql set search_path = pg_catalog, pg_temp as $$
begin
    perform set_config('synchronous_commit', 'on', true);
    return null;
end;
$$;

create trigger tick_durable before insert on ferry_queue.tick for each statement execute function ferry_queue.tick_durable();
