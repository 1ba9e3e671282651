-- ---------------------------------------------------------------------------------------
-- Function: ferry_queue.capture_truncate()
--
--     Statement trigger: TRUNCATE becomes one 'R' event.  Arguments: queue name, table.
--     As the row capture functions (install_capture_function): with its owner's rights and
--     a pinned search_path, EXECUTE revoked from PUBLIC by the installer, and only for the
--     table its second argument names (or a table that name no longer finds).
--
-- Returns:
--     trigger
--
-- Tables:
--     ferry_queue.event (written)
--     ferry_queue.queue
-- ---------------------------------------------------------------------------------------
create or replace function ferry_queue.capture_truncate() returns trigger
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
    v_part integer;
    v_seq  regclass;
begin
    if tg_relid is distinct from pg_catalog.to_regclass(tg_argv[1])
       and pg_catalog.to_regclass(tg_argv[1]) is not null then
        raise exception 'capture of %: trigger on %, another table', tg_argv[1], tg_relid::regclass
            using errcode = '42501';
    end if;
    select queue_id * 10 + queue_cur_table, queue_event_seq into v_part, v_seq
      from ferry_queue.queue where queue_name = tg_argv[0];
    if not found then
        raise exception 'Unknown queue: %', tg_argv[0] using errcode = 'P0002';
    end if;
    insert into ferry_queue.event (ev_part, ev_id, ev_type, ev_data, ev_extra1)
    values (v_part, pg_catalog.nextval(v_seq), 'R', null, tg_argv[1]);
    return null;
end;
$$;
