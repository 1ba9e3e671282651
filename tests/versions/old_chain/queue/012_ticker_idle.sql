-- ferry_queue: an idle ticker round is one read.
--
-- * tick_due(queue) remembers, for the session, when the late-commit check of the queue's
--   last tick is settled, and skips it from then on.  The check looks for events of
--   transactions that were running at the last tick and have committed since.  Such a
--   transaction had its transaction id before any later snapshot was taken: it is below
--   the xmax X of the first check's snapshot.  Once no transaction below X runs any more,
--   one more complete check that finds nothing settles it: no such transaction can commit
--   later.  Until then (and after a reconnect, which forgets) every round checks, as
--   before.  One case remains, by choice: a writer that took its event id before the tick
--   but its transaction id only after the first check (stalled between the two halves of
--   one INSERT; a capture trigger has its transaction id before) gets its tick with the
--   next event or the idle tick, ticker_idle_period at most, as before version 10.  The
--   memory is a session setting (ferry_queue.late_<queue id> = '<tick id>:<X>' while
--   pending, '<tick id>:settled'): no write, no transaction id.
-- * ticker_round() reads every queue's state in one query first and returns at once when
--   no queue can be due and none has events waiting (no new event, no forced tick, idle
--   period not passed, last tick younger than ticker_max_lag or its late-commit check
--   settled); otherwise it goes on as before, queue by queue.  An idle daemon runs this
--   round every ticker_period: one statement instead of three nested functions a queue.

create or replace function ferry_queue.tick_due(q ferry_queue.queue, out due boolean, out waiting boolean)
language plpgsql set plan_cache_mode = force_generic_plan as $$
declare
    v_last  ferry_queue.tick;
    v_new   bigint;
    v_lag   interval;
    v_now   pg_snapshot;
    v_x     xid8;
    v_n     integer := 0;
    v_key   text := 'ferry_queue.late_' || q.queue_id;
    v_memo  text;
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
        due := v_new >= q.queue_ticker_max_count or v_lag >= q.queue_ticker_max_lag;
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
        -- Late commits: a transaction running at the last tick is in its snapshot's xip
        -- list or at or above its xmax.  Those in the list that have committed since are
        -- found from the snapshots and looked up in the ev_txid index; above xmax the
        -- index is walked one transaction at a time (few: the writers of that moment).
        v_now := pg_current_snapshot();
        for v_x in select x from pg_snapshot_xip(v_last.tick_snapshot) x
                    where pg_visible_in_snapshot(x, v_now) loop
            if exists (select 1 from ferry_queue.event e
                        where e.ev_part between q.queue_id * 10 and q.queue_id * 10 + 9
                          and e.ev_txid = v_x) then
                due := true;
                exit;
            end if;
        end loop;
        v_x := pg_snapshot_xmax(v_last.tick_snapshot);
        while not due and v_n < 100 loop
            select e.ev_txid into v_x from ferry_queue.event e
             where e.ev_part between q.queue_id * 10 and q.queue_id * 10 + 9
               and e.ev_txid >= v_x
             order by e.ev_txid limit 1;
            if not found then
                v_whole := true;
                exit;
            end if;
            -- Visible now: committed since the tick.  Otherwise still running (or rolled
            -- back): look past it.
            due := pg_visible_in_snapshot(v_x, v_now);
            v_later := v_later or not due;
            v_x := (v_x::text::bigint + 1)::text::xid8;
            v_n := v_n + 1;
        end loop;
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

create or replace function ferry_queue.ticker_round(out ticks integer, out waiting integer)
language plpgsql as $$
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
