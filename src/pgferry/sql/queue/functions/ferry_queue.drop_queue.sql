-- ---------------------------------------------------------------------------------------
-- Function: ferry_queue.drop_queue(text, boolean)
--
--     Drop queue i_queue with its ticks, partitions, sequences, capture triggers and capture
--     functions.  Refused while consumers are registered, unless i_force.  Returns 1.
--
-- Parameters:
--     i_queue text
--     i_force boolean default false
--
-- Returns:
--     integer
--
-- Tables:
--     ferry_queue.capture_function (written)
--     ferry_queue.queue (written)
--     ferry_queue.retry_queue (written)
--     ferry_queue.subscription (written)
--     ferry_queue.tick (written)
-- ---------------------------------------------------------------------------------------
create or replace function ferry_queue.drop_queue(i_queue text, i_force boolean default false)
returns integer
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
    q ferry_queue.queue;
    t record;
begin
    q := ferry_queue.lock_queue(i_queue, true);
    if not i_force then
        perform 1 from ferry_queue.subscription where sub_queue = q.queue_id;
        if found then
            raise exception 'Queue % has consumers, unregister them first (or force)', i_queue;
        end if;
    end if;
    -- Capture triggers that write into this queue would fail on every write otherwise.
    for t in
        select tg.tgrelid::regclass as tbl, tg.tgname
          from pg_trigger tg
         where tg.tgname in (format('_ferry_%s_capture', i_queue)::name,
                             format('_ferry_%s_capture_insert', i_queue)::name,
                             format('_ferry_%s_capture_delete', i_queue)::name,
                             format('_ferry_%s_truncate', i_queue)::name)
           and (tg.tgfoid in ('ferry_queue.capture_truncate()'::regprocedure,
                              'ferry_queue.deny_write()'::regprocedure)
                or tg.tgfoid = to_regprocedure('ferry_queue.plain_row_capture()')
                or tg.tgfoid in (select to_regprocedure(format('ferry_queue.%I()', cf_name))
                                   from ferry_queue.capture_function
                                  where cf_queue = q.queue_id))
    loop
        execute format('drop trigger %I on %s', t.tgname, t.tbl);
    end loop;
    delete from ferry_queue.retry_queue where ev_queue = q.queue_id;
    delete from ferry_queue.subscription where sub_queue = q.queue_id;
    delete from ferry_queue.tick where tick_queue = q.queue_id;
    for n in 0 .. q.queue_ntables - 1 loop
        execute format('drop table ferry_queue.%I', format('event_%s_%s', q.queue_id, n));
    end loop;
    for t in select cf_name from ferry_queue.capture_function where cf_queue = q.queue_id loop
        execute format('drop function ferry_queue.%I()', t.cf_name);
    end loop;
    delete from ferry_queue.capture_function where cf_queue = q.queue_id;
    delete from ferry_queue.queue where queue_id = q.queue_id;
    execute format('drop sequence %s', q.queue_event_seq);
    execute format('drop sequence %s', q.queue_tick_seq);
    return 1;
end;
$$;
