-- ferry_queue: positions that survive a crash under synchronous_commit = off.
--
-- A subscriber applies the events of a batch, records the batch's tick and only then asks
-- the provider to finish the batch.  Two things must hold whatever the servers' default:
--
-- * A tick is durable before anybody can read a batch that ends at it: a transaction that
--   inserts a tick commits with synchronous_commit on (the WAL flush also covers every
--   event committed before the tick's snapshot).  A provider that crashes never loses a
--   tick that a subscriber has already applied.
-- * A consumer whose own recorded position lies behind (or ahead of) the queue's
--   subscription position is moved back to it with rewind_consumer, as long as the events
--   after that tick are still in the queue.  Rotation records in queue_rotated_xid the
--   bound below which events may be gone, so a rewind that would skip events is refused.

alter table ferry_queue.queue add column queue_rotated_xid xid8;

create function ferry_queue.tick_durable() returns trigger
language plpgsql as $$
begin
    perform set_config('synchronous_commit', 'on', true);
    return null;
end;
$$;

create trigger tick_durable before insert on ferry_queue.tick
    for each statement execute function ferry_queue.tick_durable();

-- Rotation switches the current table after emptying the one it moves to: every event
-- removed had an xid below the oldest consumer position's xmin (step1 checks it), which
-- is recomputed here in the same transaction.
create function ferry_queue.note_rotation() returns trigger
language plpgsql as $$
declare
    v_xmin xid8;
begin
    if new.queue_cur_table is distinct from old.queue_cur_table then
        select min(pg_snapshot_xmin(t.tick_snapshot)) into v_xmin
          from ferry_queue.subscription s
          join ferry_queue.tick t on t.tick_queue = s.sub_queue and t.tick_id = s.sub_last_tick
         where s.sub_queue = new.queue_id;
        new.queue_rotated_xid := greatest(old.queue_rotated_xid,
                                          coalesce(v_xmin, pg_current_xact_id()));
    end if;
    return new;
end;
$$;

create trigger note_rotation before update of queue_cur_table on ferry_queue.queue
    for each row execute function ferry_queue.note_rotation();

-- Put consumer i_consumer back at tick i_tick_id (its own durable position), provided the
-- tick and every event after it are still held by the queue.  Returns the previous
-- position.  Raises with SQLSTATE 55000 when the events are gone.
create function ferry_queue.rewind_consumer(i_queue text, i_consumer text, i_tick_id bigint)
returns bigint
language plpgsql as $$
declare
    q      ferry_queue.queue;
    s      ferry_queue.subscription;
    v_snap pg_snapshot;
begin
    s := ferry_queue.find_subscription(i_queue, i_consumer);
    select * into q from ferry_queue.queue where queue_id = s.sub_queue;
    select tick_snapshot into v_snap from ferry_queue.tick
     where tick_queue = q.queue_id and tick_id = i_tick_id;
    if not found then
        raise exception 'Tick % is no longer in queue %', i_tick_id, i_queue
            using errcode = '55000';
    end if;
    if q.queue_rotated_xid is not null
       and pg_snapshot_xmin(v_snap) < q.queue_rotated_xid then
        raise exception 'Events after tick % are no longer in queue % (rotated away)',
            i_tick_id, i_queue using errcode = '55000';
    end if;
    perform ferry_queue.register_consumer_at(i_queue, i_consumer, i_tick_id);
    return s.sub_last_tick;
end;
$$;
