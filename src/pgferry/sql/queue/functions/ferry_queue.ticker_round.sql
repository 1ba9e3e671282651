-- ---------------------------------------------------------------------------------------
-- Function: ferry_queue.ticker_round()
--
--     ticker_step() of every queue that ticks itself, and how many queues have events waiting,
--     so that the daemon knows when to look again soon.  Reads every queue's state in one query
--     first and returns at once when none can be due and none has events waiting.
--
-- Returns:
--     one row of:
--         ticks integer
--         waiting integer
--
-- Tables:
--     ferry_queue.queue
--     ferry_queue.tick
-- ---------------------------------------------------------------------------------------
create or replace function ferry_queue.ticker_round(out ticks integer, out waiting integer)
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
    v_name text;
    v_step record;
begin
    ticks := 0;
    waiting := 0;
    -- Whether any queue may be due or have events waiting: the cases of tick_due that need
    -- more than this row and its last tick.
    perform 1
       from ferry_queue.queue q
       left join lateral (
            select t.tick_id, t.tick_time, t.tick_event_seq from ferry_queue.tick t
             where t.tick_queue = q.queue_id order by t.tick_id desc limit 1) t on true
      where not q.queue_external_ticker and not q.queue_ticker_paused
        and (t.tick_id is null
             or q.queue_force_tick
             or ferry_queue.seq_position(q.queue_event_seq) <> t.tick_event_seq
             or now() - t.tick_time >= q.queue_ticker_idle_period
             or (now() - t.tick_time >= q.queue_ticker_max_lag
                 and current_setting('ferry_queue.late_' || q.queue_id, true)
                     is distinct from t.tick_id || ':settled'));
    if not found then
        return;
    end if;
    -- Name order: concurrent callers lock queue rows in the same order (no deadlock).
    for v_name in
        select queue_name from ferry_queue.queue
         where not queue_external_ticker and not queue_ticker_paused
         order by queue_name
    loop
        select * into v_step from ferry_queue.ticker_step(v_name);
        if v_step.tick_id is not null then
            ticks := ticks + 1;
        end if;
        if v_step.waiting then
            waiting := waiting + 1;
        end if;
    end loop;
end;
$$;
