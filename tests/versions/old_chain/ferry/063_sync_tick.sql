-- ferry: sync_tick makes its tick through the queue (ferry_queue.make_tick), like the
-- ticker, instead of writing ferry_queue.tick itself.  Same contract as before: the tick
-- carries the caller's open snapshot, and a snapshot that does not contain the previous
-- tick's raises SQLSTATE 40001 (the caller retries with a new one).

create or replace function ferry.sync_tick(i_queue text, i_snapshot pg_snapshot) returns bigint
language plpgsql as $$
begin
    if (ferry_queue.find_queue(i_queue)).queue_external_ticker then
        raise exception 'Queue % is ticked by its provider: compare against the root', i_queue;
    end if;
    return ferry_queue.make_tick(i_queue, i_snapshot);
end;
$$;
