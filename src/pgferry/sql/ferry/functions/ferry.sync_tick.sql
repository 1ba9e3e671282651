-- ---------------------------------------------------------------------------------------
-- Function: ferry.sync_tick(text, pg_snapshot)
--
--     A tick whose snapshot is i_snapshot, a snapshot the caller holds open, made through
--     ferry_queue.make_tick: compare / repair read the source in exactly that state, and every
--     subscriber that has applied through this tick holds the same data.  A snapshot that does
--     not contain the previous tick's raises SQLSTATE 40001 (the caller retries).  Refused on a
--     queue ticked by its provider.  Returns the tick id.
--
-- Parameters:
--     i_queue text
--     i_snapshot pg_snapshot
--
-- Returns:
--     bigint
-- ---------------------------------------------------------------------------------------
create or replace function ferry.sync_tick(i_queue text, i_snapshot pg_snapshot) returns bigint
language plpgsql set search_path = pg_catalog, pg_temp as $$
begin
    if (ferry_queue.find_queue(i_queue)).queue_external_ticker then
        raise exception 'Queue % is ticked by its provider: compare against the root', i_queue;
    end if;
    return ferry_queue.make_tick(i_queue, i_snapshot);
end;
$$;
