-- ---------------------------------------------------------------------------------------
-- Function: ferry_queue.detach_capture(text, regclass)
--
--     Drop the queue's capture (or deny) triggers of tbl, and the templated capture functions
--     that no trigger uses any more.  Returns 1.
--
-- Parameters:
--     queue text
--     tbl regclass
--
-- Returns:
--     integer
--
-- Tables:
--     ferry_queue.queue
-- ---------------------------------------------------------------------------------------
create or replace function ferry_queue.detach_capture(queue text, tbl regclass)
returns integer
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
    v_id integer;
begin
    perform ferry_queue.drop_capture_triggers(detach_capture.queue, tbl);
    select queue_id into v_id from ferry_queue.queue where queue_name = detach_capture.queue;
    if found then
        perform ferry_queue.prune_capture_functions(v_id);
    end if;
    return 1;
end;
$$;
