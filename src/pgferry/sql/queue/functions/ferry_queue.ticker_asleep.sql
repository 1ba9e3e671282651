-- ---------------------------------------------------------------------------------------
-- Function: ferry_queue.ticker_asleep()
--
--     The key of the advisory lock a sleeping ticker holds in each database it ticks (its
--     session, exclusive) and every capture trigger tries in shared mode: failing to get it
--     means the ticker sleeps, and the trigger wakes it (wake_ticker).  A writer holding it
--     keeps the ticker awake until its commit.  Two int4 halves, as
--     pg_try_advisory_xact_lock_shared(int, int) takes them.
--
-- Returns:
--     one row of:
--         k1 integer
--         k2 integer
-- ---------------------------------------------------------------------------------------
create or replace function ferry_queue.ticker_asleep(out k1 integer, out k2 integer)
language sql immutable set search_path = pg_catalog, pg_temp as $$
    select hashtext('pgferry-ticker'), hashtext('asleep')
$$;
