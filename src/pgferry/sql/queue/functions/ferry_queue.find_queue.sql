-- ---------------------------------------------------------------------------------------
-- Function: ferry_queue.find_queue(text)
--
--     The row of queue i_queue; raises SQLSTATE P0002 (Unknown queue) when there is none.
--
-- Parameters:
--     i_queue text
--
-- Returns:
--     ferry_queue.queue
--
-- Tables:
--     ferry_queue.queue
-- ---------------------------------------------------------------------------------------
create or replace function ferry_queue.find_queue(i_queue text) returns ferry_queue.queue
language plpgsql stable set search_path = pg_catalog, pg_temp as $$
declare
    q ferry_queue.queue;
begin
    select * into q from ferry_queue.queue where queue_name = i_queue;
    if not found then
        raise exception 'Unknown queue: %', i_queue using errcode = 'P0002';
    end if;
    return q;
end;
$$;
