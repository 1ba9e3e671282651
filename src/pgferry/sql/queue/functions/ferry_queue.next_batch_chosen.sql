-- ---------------------------------------------------------------------------------------
-- Function: ferry_queue.next_batch_chosen(text, text, interval, integer, interval, bigint, boolean)
--
--     The next batch of consumer i_consumer, ending at the tick batch_tick chooses after
--     the consumer's position with the other arguments (see there), or the batch it has
--     open.  The consumer's row is locked: one open batch per consumer, even with racing
--     callers.  Raises when the consumer's last tick is gone.  Every opening of a batch
--     ends here (next_batch, next_batch_custom and next_batch_upto through
--     open_next_batch; the worker's sized batches).
--
-- Parameters:
--     i_queue        text
--     i_consumer     text
--     i_min_lag      interval
--     i_min_count    integer
--     i_min_interval interval
--     i_upto         bigint
--     i_sized        boolean
--
-- Returns:
--     one row of:
--         batch_id  bigint    NULL when no such tick exists yet
--         waiting   integer   ticks after the consumer's position
--
-- Tables:
--     ferry_queue.subscription (written, by open_batch)
--     ferry_queue.tick
-- ---------------------------------------------------------------------------------------
create or replace function ferry_queue.next_batch_chosen(
    i_queue text, i_consumer text, i_min_lag interval, i_min_count integer,
    i_min_interval interval, i_upto bigint, i_sized boolean,
    out batch_id bigint, out waiting integer)
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
    s ferry_queue.subscription;
    c record;
begin
    s := ferry_queue.find_subscription(i_queue, i_consumer);
    select * into s from ferry_queue.subscription where sub_id = s.sub_id for update;
    select * into c
      from ferry_queue.batch_tick(s.sub_queue, s.sub_last_tick, i_min_lag, i_min_count,
                                  i_min_interval, i_upto, i_sized);
    waiting := coalesce(c.waiting, 0);
    if s.sub_batch is not null then
        update ferry_queue.subscription set sub_active = now() where sub_id = s.sub_id;
        batch_id := s.sub_batch;
        return;
    end if;
    if c.waiting is null then
        raise exception 'Last tick % of consumer % on queue % is gone',
            s.sub_last_tick, i_consumer, i_queue;
    end if;
    batch_id := ferry_queue.open_batch(s.sub_id, c.tick_id);
end;
$$;
