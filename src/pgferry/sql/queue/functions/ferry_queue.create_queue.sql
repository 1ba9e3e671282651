-- ---------------------------------------------------------------------------------------
-- Function: ferry_queue.create_queue(text)
--
--     Create queue i_queue: its row, event and tick sequences, its rotation partitions of
--     ferry_queue.event (insert-only, emptied by TRUNCATE) and a first tick, so that a consumer
--     can register at once.  Returns 1, or 0 when the queue exists already.
--
-- Parameters:
--     i_queue text
--
-- Returns:
--     integer
--
-- Tables:
--     ferry_queue.queue (written)
--     ferry_queue.tick (written)
--     ferry_queue.event
-- ---------------------------------------------------------------------------------------
create or replace function ferry_queue.create_queue(i_queue text) returns integer
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
    v_id  integer;
    v_ev  text;
    v_tk  text;
begin
    if i_queue is null or i_queue = '' then
        raise exception 'Queue name must not be empty';
    end if;
    perform 1 from ferry_queue.queue where queue_name = i_queue;
    if found then
        return 0;
    end if;
    v_id := nextval(pg_get_serial_sequence('ferry_queue.queue', 'queue_id'));
    v_ev := format('event_%s_id_seq', v_id);
    v_tk := format('event_%s_tick_seq', v_id);
    execute format('create sequence ferry_queue.%I', v_ev);
    execute format('create sequence ferry_queue.%I', v_tk);
    insert into ferry_queue.queue (queue_id, queue_name, queue_event_seq, queue_tick_seq)
    values (v_id, i_queue,
            format('ferry_queue.%I', v_ev)::regclass, format('ferry_queue.%I', v_tk)::regclass);
    for n in 0 .. 2 loop
        -- Insert-only tables emptied by TRUNCATE: no free space needed, nothing to vacuum.
        execute format(
            'create table ferry_queue.%I partition of ferry_queue.event for values in (%s)'
            ' with (fillfactor = 100, autovacuum_enabled = off)',
            format('event_%s_%s', v_id, n), v_id * 10 + n);
    end loop;
    -- The first tick: a consumer registers at the latest tick.
    insert into ferry_queue.tick (tick_queue, tick_id, tick_event_seq)
    values (v_id, nextval(format('ferry_queue.%I', v_tk)::regclass), 0);
    return 1;
end;
$$;
