-- ---------------------------------------------------------------------------------------
-- Function: ferry_queue.maint_rotate_tables_step1(text)
--
--     Rotate queue i_queue when its rotation period has passed: empty the next partition
--     (once every consumer has passed every event in it) and make it the current one, point the
--     capture functions at it, and delete ticks nobody needs any more.  Does nothing while a
--     consumer lags or the table is in use (tried again next round).  Returns 0.
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
--     ferry_queue.subscription
-- ---------------------------------------------------------------------------------------
create or replace function ferry_queue.maint_rotate_tables_step1(i_queue text) returns integer
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
    q        ferry_queue.queue;
    v_xmin   xid8;
    v_next   integer;
    v_table  text;
    v_maxtx  xid8;
    v_keep   bigint;
begin
    q := ferry_queue.lock_queue(i_queue);
    if q.queue_switch_step2 is null
       or q.queue_switch_time + q.queue_rotation_period > now() then
        return 0;
    end if;
    -- Every consumer must have passed the previous switch: the table about to be emptied
    -- only holds events of transactions older than that.
    select min(pg_snapshot_xmin(t.tick_snapshot)) into v_xmin
      from ferry_queue.subscription s
      join ferry_queue.tick t on t.tick_queue = s.sub_queue and t.tick_id = s.sub_last_tick
     where s.sub_queue = q.queue_id;
    if v_xmin is not null and v_xmin <= q.queue_switch_step2 then
        return 0;
    end if;
    v_next := (q.queue_cur_table + 1) % q.queue_ntables;
    v_table := format('event_%s_%s', q.queue_id, v_next);
    begin
        -- Writers still adding to the table hold a lock on it until they end.
        execute format('lock table ferry_queue.%I in access exclusive mode nowait', v_table);
    exception when lock_not_available then
        return 0;  -- somebody uses it (a writer, a long batch, pg_dump): next round
    end;
    -- Belt and braces: every event in the table must be visible to every consumer's last
    -- tick (xid below its xmin), whatever path the event took into the table.
    if v_xmin is not null then
        execute format('select max(ev_txid) from ferry_queue.%I', v_table) into v_maxtx;
        if v_maxtx is not null and v_maxtx >= v_xmin then
            return 0;
        end if;
    end if;
    execute format('truncate ferry_queue.%I', v_table);
    update ferry_queue.queue
       set queue_cur_table = v_next, queue_switch_time = now(),
           queue_switch_step1 = pg_current_xact_id(), queue_switch_step2 = null
     where queue_id = q.queue_id;
    perform ferry_queue.refresh_capture_functions(q.queue_id);
    -- Old ticks: keep those of the last rotation period (for repositioning), every
    -- consumer's position and the latest tick.
    select least(min(s.sub_last_tick), (select max(tick_id) from ferry_queue.tick
                                          where tick_queue = q.queue_id))
      into v_keep from ferry_queue.subscription s where s.sub_queue = q.queue_id;
    if v_keep is null then
        select max(tick_id) into v_keep from ferry_queue.tick where tick_queue = q.queue_id;
    end if;
    delete from ferry_queue.tick
     where tick_queue = q.queue_id and tick_id < v_keep
       and pg_snapshot_xmin(tick_snapshot) < q.queue_switch_step2;
    return 0;
end;
$$;
