-- ---------------------------------------------------------------------------------------
-- Function: ferry_queue.tick_due(ferry_queue.queue)
--
--     Whether queue q needs a tick now, and whether events wait for one, read without any
--     lock.  With new events: a tick once ticker_max_count events wait, the last tick is
--     ticker_max_lag old, or a consumer waits for the next tick (it has finished the last one
--     and holds no open batch: its events are then taken at once).  Without: a tick every ticker_idle_period, and also, once
--     ticker_max_lag has passed, when a transaction that was running at the last tick has
--     committed events since (its events were counted before that tick but not visible in it:
--     ferry_queue.late_events).
--     That late-commit check is remembered for the session once settled (setting
--     ferry_queue.late_<queue id> = '<tick id>:<xmax>' while pending, '<tick id>:settled'): no
--     write, no transaction id.  Generic plans: the lookups are index probes whatever the
--     values, and a custom plan would be planned again at every call.
--
-- Parameters:
--     q ferry_queue.queue
--
-- Returns:
--     one row of:
--         due boolean
--         waiting boolean
--
-- Tables:
--     ferry_queue.event (through ferry_queue.late_events)
--     ferry_queue.queue
--     ferry_queue.subscription
--     ferry_queue.tick
-- ---------------------------------------------------------------------------------------
create or replace function ferry_queue.tick_due(q ferry_queue.queue, out due boolean, out waiting boolean)
language plpgsql set plan_cache_mode = force_generic_plan set search_path = pg_catalog, pg_temp as $$
declare
    v_last  ferry_queue.tick;
    v_new   bigint;
    v_lag   interval;
    v_now   pg_snapshot;
    v_key   text := 'ferry_queue.late_' || q.queue_id;
    v_memo  text;
    v_late  record;   -- ferry_queue.late_events' answer
    v_whole boolean := false;  -- the walk above xmax saw every event there
    v_later boolean := false;  -- it met a transaction that committed after v_now
begin
    select * into v_last from ferry_queue.tick
     where tick_queue = q.queue_id order by tick_id desc limit 1;
    if not found then
        due := true;
        waiting := false;
        return;
    end if;
    v_new := ferry_queue.seq_position(q.queue_event_seq) - v_last.tick_event_seq;
    v_lag := now() - v_last.tick_time;
    waiting := v_new > 0;
    if q.queue_force_tick then
        due := true;
    elsif waiting then
        -- A consumer that has finished the last tick and holds no batch is waiting for the
        -- next one: tick at once.  One that is busy with a batch gets a tick at max_lag (or
        -- max_count), or as soon as it finishes; a stopped one waits for one tick at most.
        due := v_new >= q.queue_ticker_max_count or v_lag >= q.queue_ticker_max_lag
               or exists (select 1 from ferry_queue.subscription s
                           where s.sub_queue = q.queue_id and s.sub_batch is null
                             and s.sub_last_tick = v_last.tick_id);
    elsif v_lag >= q.queue_ticker_idle_period then
        due := true;
    elsif v_lag < q.queue_ticker_max_lag then
        due := false;
    else
        due := false;
        v_memo := current_setting(v_key, true);
        if v_memo = v_last.tick_id || ':settled' then
            return;
        end if;
        -- Late commits (ferry_queue.late_events): is there one, looking at 100
        -- transactions above the tick's xmax at most.  Called as an expression: a SELECT
        -- from the function would take twice as long as the whole check.
        v_now := pg_current_snapshot();
        v_late := ferry_queue.late_events(q.queue_id, v_last.tick_snapshot, v_now, 1, 100);
        due := v_late.events > 0;
        v_whole := v_late.whole;
        v_later := v_late.later;
        waiting := due;
        if due then
            return;
        end if;
        -- Nothing late now.  The first check of this tick records X; a complete check once
        -- every transaction below X has ended settles it.
        if v_memo is null or split_part(v_memo, ':', 1) <> v_last.tick_id::text then
            perform set_config(v_key, v_last.tick_id || ':' || pg_snapshot_xmax(v_now), false);
        elsif v_whole and not v_later
              and pg_snapshot_xmin(v_now) >= split_part(v_memo, ':', 2)::xid8 then
            perform set_config(v_key, v_last.tick_id || ':settled', false);
        end if;
    end if;
end;
$$;
