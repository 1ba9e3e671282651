-- ---------------------------------------------------------------------------------------
-- Function: ferry_queue.set_hold(text, text, bigint)
--
--     Place hold i_name (a subscription that never reads, which rotation respects like any
--     consumer) so that the queue keeps what a reader at tick i_tick needs: at the newest
--     usable tick at or before i_tick (a tick this queue never had, skipped by a batch spanning
--     several ticks, is covered by the one before it), else at the oldest usable tick, when
--     what came before is gone already.  A hold moves either way, and is only written when it
--     moves.  Returns the tick it is at (NULL: the queue has no tick).
--
-- Parameters:
--     i_queue text
--     i_name text
--     i_tick bigint
--
-- Returns:
--     bigint
--
-- Tables:
--     ferry_queue.subscription (written)
--     ferry_queue.queue
--     ferry_queue.tick
-- ---------------------------------------------------------------------------------------
create or replace function ferry_queue.set_hold(i_queue text, i_name text, i_tick bigint) returns bigint
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
    q      ferry_queue.queue;
    v_tick bigint;
    v_at   bigint;
begin
    q := ferry_queue.find_queue(i_queue);
    if i_name is null or i_name = '' then
        raise exception 'Hold name must not be empty';
    end if;
    select coalesce(max(t.tick_id) filter (where t.tick_id <= i_tick), min(t.tick_id))
      into v_tick
      from ferry_queue.tick t
     where t.tick_queue = q.queue_id
       and (q.queue_rotated_xid is null
            or pg_snapshot_xmin(t.tick_snapshot) >= q.queue_rotated_xid);
    if v_tick is null then
        return null;
    end if;
    select sub_last_tick into v_at from ferry_queue.subscription
     where sub_queue = q.queue_id and sub_consumer = i_name;
    if not found then
        insert into ferry_queue.subscription (sub_queue, sub_consumer, sub_last_tick)
        values (q.queue_id, i_name, v_tick);
    elsif v_at <> v_tick then
        update ferry_queue.subscription set sub_last_tick = v_tick, sub_active = now()
         where sub_queue = q.queue_id and sub_consumer = i_name;
    end if;
    return v_tick;
end;
$$;
