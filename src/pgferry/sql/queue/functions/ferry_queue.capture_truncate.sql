-- ---------------------------------------------------------------------------------------
-- Function: ferry_queue.capture_truncate()
--
--     Statement trigger: TRUNCATE becomes one 'R' event.  Arguments: queue name, table.
--
-- Returns:
--     trigger
--
-- Tables:
--     ferry_queue.event (written)
--     ferry_queue.queue
-- ---------------------------------------------------------------------------------------
create or replace function ferry_queue.capture_truncate() returns trigger
language plpgsql as $$
declare
    v_part integer;
    v_seq  regclass;
begin
    select queue_id * 10 + queue_cur_table, queue_event_seq into v_part, v_seq
      from ferry_queue.queue where queue_name = tg_argv[0];
    if not found then
        raise exception 'Unknown queue: %', tg_argv[0] using errcode = 'P0002';
    end if;
    insert into ferry_queue.event (ev_part, ev_id, ev_type, ev_data, ev_extra1)
    values (v_part, nextval(v_seq), 'R', null, tg_argv[1]);
    return null;
end;
$$;
