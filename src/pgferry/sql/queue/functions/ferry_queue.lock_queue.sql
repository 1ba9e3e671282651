-- ---------------------------------------------------------------------------------------
-- Function: ferry_queue.lock_queue(text, boolean)
--
--     The row of queue i_queue, locked for the rest of the transaction: FOR NO KEY UPDATE,
--     which serialises those who tick or rotate the queue (so tick ids and snapshots grow
--     together), or with i_exclusive FOR UPDATE, which also holds off new ticks and
--     consumers of the queue (their rows reference it).  Raises SQLSTATE P0002 (Unknown
--     queue) when there is none.
--
-- Parameters:
--     i_queue text
--     i_exclusive boolean default false
--
-- Returns:
--     ferry_queue.queue
--
-- Tables:
--     ferry_queue.queue (locked)
-- ---------------------------------------------------------------------------------------
create or replace function ferry_queue.lock_queue(i_queue text, i_exclusive boolean default false)
returns ferry_queue.queue
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
    q ferry_queue.queue;
begin
    if i_exclusive then
        select * into q from ferry_queue.queue where queue_name = i_queue for update;
    else
        select * into q from ferry_queue.queue where queue_name = i_queue for no key update;
    end if;
    return ferry_queue.require_row(q, format('Unknown queue: %s', i_queue));
end;
$$;
