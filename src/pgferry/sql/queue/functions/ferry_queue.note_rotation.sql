-- ---------------------------------------------------------------------------------------
-- Trigger function: ferry_queue.note_rotation()
--
--     Row trigger on ferry_queue.queue: when rotation switches the current table, record in
--     queue_rotated_xid the bound below which events may be gone (the oldest consumer
--     position's xmin, recomputed in the same transaction).  rewind_consumer, tick_usable and
--     set_hold refuse positions below it.
--
-- Tables:
--     ferry_queue.subscription
--     ferry_queue.tick
-- ---------------------------------------------------------------------------------------
-- Its trigger is re-created by every apply: dropped here, created after the function.
drop trigger if exists note_rotation on ferry_queue.queue;

create or replace function ferry_queue.note_rotation() returns trigger
language plpgsql set search_path = pg_catalog, pg_temp as $$
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

create trigger note_rotation before update of queue_cur_table on ferry_queue.queue for each row execute function ferry_queue.note_rotation();
