-- Queue version 1, part 7 of 9: rotation and maintenance (maint_rotate_tables_step1,
-- maint_rotate_tables_step2, maint_operations).

-- ---------------------------------------------------------------------------------------
-- rotation and maintenance

create function ferry_queue.maint_rotate_tables_step1(i_queue text) returns integer
language plpgsql as $$
declare
    q        ferry_queue.queue;
    v_xmin   xid8;
    v_next   integer;
    v_table  text;
    v_maxtx  xid8;
    v_keep   bigint;
begin
    select * into q from ferry_queue.queue where queue_name = i_queue for no key update;
    if not found then
        raise exception 'Unknown queue: %', i_queue using errcode = 'P0002';
    end if;
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

-- Must run in a transaction of its own after step1 committed.
create function ferry_queue.maint_rotate_tables_step2() returns integer
language plpgsql as $$
begin
    update ferry_queue.queue set queue_switch_step2 = pg_current_xact_id()
     where queue_switch_step2 is null;
    return 0;
end;
$$;

-- What the maintenance loop should call, in order: (function name, argument or NULL).
create function ferry_queue.maint_operations(out func_name text, out func_arg text)
returns setof record
language plpgsql as $$
declare
    q ferry_queue.queue;
    v_step2 boolean := false;
    v_fn text;
begin
    for q in select * from ferry_queue.queue order by queue_name loop
        if q.queue_switch_step2 is null then
            v_step2 := true;
        elsif q.queue_switch_time + q.queue_rotation_period <= now() then
            func_name := 'ferry_queue.maint_rotate_tables_step1';
            func_arg := q.queue_name;
            return next;
            v_step2 := true;
        end if;
    end loop;
    if v_step2 then
        func_name := 'ferry_queue.maint_rotate_tables_step2';
        func_arg := null;
        return next;
    end if;
    for q in select * from ferry_queue.queue where queue_extra_maint is not null
              order by queue_name loop
        foreach v_fn in array q.queue_extra_maint loop
            func_name := v_fn;
            func_arg := q.queue_name;
            return next;
        end loop;
    end loop;
end;
$$;
