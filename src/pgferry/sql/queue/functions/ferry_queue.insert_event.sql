-- ---------------------------------------------------------------------------------------
-- Function: ferry_queue.insert_event(text, text, text, text, text, text, text)
--
--     Queue one event into the current table of i_queue.  Returns its ev_id.
--
--     It runs with the caller's rights, and EXECUTE is revoked from PUBLIC (by the installer):
--     only the queue's owner, who alone may write the event tables, queues events, of any
--     type.  That is how EXECUTE events enter a queue (execute, capture-ddl through
--     ferry.ddl_queue, a function of the owner's), and sequence and removal events, and a
--     handler's events on a subscriber (qsplitter).  A role that is not the owner cannot
--     call it, nor would a grant of EXECUTE alone let it insert an event.
--
-- Parameters:
--     i_queue text
--     i_ev_type text
--     i_ev_data text
--     i_extra1 text default null
--     i_extra2 text default null
--     i_extra3 text default null
--     i_extra4 text default null
--
-- Returns:
--     bigint
--
-- Tables:
--     ferry_queue.event (written)
--     ferry_queue.queue
-- ---------------------------------------------------------------------------------------
create or replace function ferry_queue.insert_event(
    i_queue text, i_ev_type text, i_ev_data text,
    i_extra1 text default null, i_extra2 text default null,
    i_extra3 text default null, i_extra4 text default null)
returns bigint
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
    q ferry_queue.queue;
    v_id bigint;
begin
    q := ferry_queue.find_queue(i_queue);
    v_id := pg_catalog.nextval(q.queue_event_seq);
    insert into ferry_queue.event
        (ev_part, ev_id, ev_type, ev_data, ev_extra1, ev_extra2, ev_extra3, ev_extra4)
    values (q.queue_id * 10 + q.queue_cur_table, v_id,
            i_ev_type, i_ev_data, i_extra1, i_extra2, i_extra3, i_extra4);
    return v_id;
end;
$$;
