-- ferry_queue: holds, and cutting a queue back to a tick.
--
-- A hold is a subscription that never reads: rotation keeps every tick from the lowest
-- subscription position on and empties no table that still has events after it, so a
-- hold at tick T keeps T and every event after T.  Other layers place holds for what is
-- needed elsewhere (the cascade's watermarks); the queue does not know why.
--
-- A tick is usable as a starting position when the queue holds it and every event after
-- it: rotation records in queue_rotated_xid the bound below which events may be gone (the
-- same test as rewind_consumer's).

create function ferry_queue.tick_usable(i_queue text, i_tick bigint) returns boolean
language sql stable as $$
    select exists (
        select 1
          from ferry_queue.queue q
          join ferry_queue.tick t on t.tick_queue = q.queue_id
         where q.queue_name = i_queue and t.tick_id = i_tick
           and (q.queue_rotated_xid is null
                or pg_snapshot_xmin(t.tick_snapshot) >= q.queue_rotated_xid))
$$;

-- The oldest usable tick and the newest tick of a queue (NULLs when it has none).
create function ferry_queue.usable_ticks(i_queue text, out oldest bigint, out newest bigint)
language sql stable as $$
    select min(t.tick_id) filter (where q.queue_rotated_xid is null
                                     or pg_snapshot_xmin(t.tick_snapshot) >= q.queue_rotated_xid),
           max(t.tick_id)
      from ferry_queue.queue q
      join ferry_queue.tick t on t.tick_queue = q.queue_id
     where q.queue_name = i_queue
$$;

-- The lowest position of the queue's subscriptions, except those named in i_except; the
-- newest tick when there are none.
create function ferry_queue.lowest_position(i_queue text, i_except text[] default '{}')
returns bigint
language sql stable as $$
    select coalesce(
        (select min(s.sub_last_tick)
           from ferry_queue.subscription s
           join ferry_queue.queue q on q.queue_id = s.sub_queue
          where q.queue_name = i_queue and s.sub_consumer <> all (i_except)),
        (select max(t.tick_id)
           from ferry_queue.tick t
           join ferry_queue.queue q on q.queue_id = t.tick_queue
          where q.queue_name = i_queue))
$$;

-- Place hold i_name so that the queue keeps what a reader at tick i_tick needs: at the
-- newest usable tick at or before i_tick (a tick this queue never had, skipped by a batch
-- spanning several ticks, is covered by the one before it), else at the oldest usable
-- tick, when what came before is gone already.  A hold moves either way, and is only
-- written when it moves.  Returns the tick it is at (NULL: the queue has no tick).
create function ferry_queue.set_hold(i_queue text, i_name text, i_tick bigint) returns bigint
language plpgsql as $$
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

-- Remove hold i_name; false when there was none.
create function ferry_queue.drop_hold(i_queue text, i_name text) returns boolean
language plpgsql as $$
declare
    q ferry_queue.queue;
begin
    q := ferry_queue.find_queue(i_queue);
    delete from ferry_queue.subscription
     where sub_queue = q.queue_id and sub_consumer = i_name and sub_batch is null;
    return found;
end;
$$;

-- Cut the queue back to tick i_tick: delete every event not visible in its snapshot (the
-- batches after it, and events not ticked yet) and every later tick.  Returns the deleted
-- events, first deliveries only (retries re-deliver events counted already), by ev_id.
-- New events wait for the caller's commit: the queue's tables are locked first.
create function ferry_queue.cut_after(
    i_queue text, i_tick bigint,
    out ev_id bigint, out ev_time timestamptz, out ev_txid bigint, out ev_retry integer,
    out ev_type text, out ev_data text,
    out ev_extra1 text, out ev_extra2 text, out ev_extra3 text, out ev_extra4 text)
returns setof record
language plpgsql as $$
#variable_conflict use_column
declare
    q      ferry_queue.queue;
    v_snap pg_snapshot;
begin
    select * into q from ferry_queue.queue where queue_name = i_queue for update;
    if not found then
        raise exception 'Unknown queue: %', i_queue using errcode = 'P0002';
    end if;
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
