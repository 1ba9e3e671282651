-- ---------------------------------------------------------------------------------------
-- Function: ferry_queue.cut_after(text, bigint)
--
--     Cut the queue back to tick i_tick: delete every event not visible in its snapshot (the
--     batches after it, and events not ticked yet) and every later tick.  Returns the deleted
--     events, first deliveries only (retries re-deliver events counted already), by ev_id.
--     New events wait for the caller's commit: the queue's tables are locked first.
--
-- Parameters:
--     i_queue text
--     i_tick bigint
--
-- Returns:
--     setof records of:
--         ev_id bigint
--         ev_time timestamptz
--         ev_txid bigint
--         ev_retry integer
--         ev_type text
--         ev_data text
--         ev_extra1 text
--         ev_extra2 text
--         ev_extra3 text
--         ev_extra4 text
--
-- Tables:
--     ferry_queue.event (written)
--     ferry_queue.tick (written)
--     ferry_queue.queue
-- ---------------------------------------------------------------------------------------
create or replace function ferry_queue.cut_after(
    i_queue text, i_tick bigint,
    out ev_id bigint, out ev_time timestamptz, out ev_txid bigint, out ev_retry integer,
    out ev_type text, out ev_data text,
    out ev_extra1 text, out ev_extra2 text, out ev_extra3 text, out ev_extra4 text)
returns setof record
language plpgsql set search_path = pg_catalog, pg_temp as $$
#variable_conflict use_column
declare
    q      ferry_queue.queue;
    v_snap pg_snapshot;
begin
    q := ferry_queue.lock_queue(i_queue, true);
    select tick_snapshot into v_snap from ferry_queue.tick
     where tick_queue = q.queue_id and tick_id = i_tick;
    if not found then
        raise exception 'Tick % not found on queue %', i_tick, i_queue using errcode = 'P0002';
    end if;
    for n in 0 .. q.queue_ntables - 1 loop
        execute format('lock table ferry_queue.%I in exclusive mode',
                       format('event_%s_%s', q.queue_id, n));
    end loop;
    return query
    with gone as (
        delete from ferry_queue.event e
         where e.ev_part in (select q.queue_id * 10 + n
                               from generate_series(0, q.queue_ntables - 1) n)
           and not pg_visible_in_snapshot(e.ev_txid, v_snap)
        returning e.*
    )
    select g.ev_id, g.ev_time, g.ev_txid::text::bigint, g.ev_retry, g.ev_type, g.ev_data,
           g.ev_extra1, g.ev_extra2, g.ev_extra3, g.ev_extra4
      from gone g
     where g.ev_owner is null
     order by g.ev_id;
    delete from ferry_queue.tick where tick_queue = q.queue_id and tick_id > i_tick;
end;
$$;
