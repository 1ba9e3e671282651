-- ferry_queue: a tick as soon as events wait, nothing written while a queue is idle.
--
-- * tick_due(queue): whether the queue needs a tick now, and whether events wait for one,
--   read without any lock.  With new events: a tick once ticker_max_count events wait or
--   the last tick is ticker_max_lag old (default now 50 ms: the ticker daemon looks again
--   every ticker_busy_period while events wait, so an event waits about that long).
--   Without new events: a tick every ticker_idle_period (the lag a healthy idle queue
--   shows), and also, once ticker_max_lag has passed, when a transaction that was running
--   at the last tick has committed events since (its events were counted before that tick
--   but not visible in it, so no newer event would bring them).  This replaces the
--   doubling idle interval: an idle queue makes one tick per idle period.
-- * ticker(queue) decides without a lock and takes the queue's row lock only when a tick
--   is due, then decides again under it: a call on an idle queue writes nothing (no
--   transaction id, no WAL).
-- * ticker_round(): ticker() of every queue, and how many queues have events waiting, so
--   that the daemon knows when to look again soon.
-- * force_tick(queue) also wakes a listening ticker daemon (channel ferry_queue_ticker).

alter table ferry_queue.queue alter column queue_ticker_max_lag set default '50 milliseconds';

-- Generic plans: the late-commit lookups below are index probes whatever the values, and a
-- custom plan would be planned again at every call (an idle round a second).
create function ferry_queue.tick_due(q ferry_queue.queue, out due boolean, out waiting boolean)
language plpgsql set plan_cache_mode = force_generic_plan as $$
declare
    v_last ferry_queue.tick;
    v_new  bigint;
    v_lag  interval;
    v_now  pg_snapshot;
    v_x    xid8;
    v_n    integer := 0;
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
        -- Late commits: a transaction running at the last tick is in its snapshot's xip
        -- list or at or above its xmax.  Those in the list that have committed since are
        -- found from the snapshots and looked up in the ev_txid index; above xmax the
        -- index is walked one transaction at a time (few: the writers of that moment).
        due := false;
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
            exit when not found;
            -- Visible now: committed since the tick.  Otherwise still running (or rolled
            -- back): look past it.
            due := pg_visible_in_snapshot(v_x, v_now);
            v_x := (v_x::text::bigint + 1)::text::xid8;
            v_n := v_n + 1;
        end loop;
        waiting := due;
    end if;
end;
$$;

create function ferry_queue.ticker_step(i_queue text, out tick_id bigint, out waiting boolean)
language plpgsql as $$
declare
    q      ferry_queue.queue;
    v_due  boolean;
    v_last ferry_queue.tick;
    v_snap pg_snapshot;
begin
    select * into q from ferry_queue.queue where queue_name = i_queue;
    if not found then
        raise exception 'Unknown queue: %', i_queue using errcode = 'P0002';
    end if;
    if q.queue_external_ticker then
        raise exception 'Queue % has an external ticker', i_queue;
    end if;
    if q.queue_ticker_paused then
        raise exception 'Ticker is paused for queue %', i_queue;
    end if;
    select d.due, d.waiting into v_due, waiting from ferry_queue.tick_due(q) d;
    if not v_due then
        return;
    end if;
    -- Due: the row lock serialises ticks of one queue (tick ids and snapshots grow
    -- together); another ticker may have ticked meanwhile, so decide again under it.
    select * into q from ferry_queue.queue where queue_name = i_queue for no key update;
    select d.due, d.waiting into v_due, waiting from ferry_queue.tick_due(q) d;
    if not v_due then
        return;
    end if;
    select * into v_last from ferry_queue.tick
     where tick_queue = q.queue_id order by tick_id desc limit 1;
    v_snap := pg_current_snapshot();
    if v_last.tick_id is not null
       and pg_snapshot_xmax(v_snap) < pg_snapshot_xmax(v_last.tick_snapshot) then
        raise exception 'Snapshot older than the last tick of queue % (ticker must run in read committed)', i_queue;
    end if;
    tick_id := ferry_queue.make_tick(i_queue, v_snap);
    if q.queue_force_tick then
        update ferry_queue.queue set queue_force_tick = false where queue_id = q.queue_id;
    end if;
end;
$$;

create or replace function ferry_queue.ticker(i_queue text) returns bigint
language sql as $$
    select tick_id from ferry_queue.ticker_step(i_queue)
$$;

create function ferry_queue.ticker_round(out ticks integer, out waiting integer)
language plpgsql as $$
declare
    v_name text;
    v_step record;
begin
    ticks := 0;
    waiting := 0;
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

create or replace function ferry_queue.force_tick(i_queue text) returns bigint
language plpgsql as $$
declare
    q ferry_queue.queue;
begin
    q := ferry_queue.find_queue(i_queue);
    update ferry_queue.queue set queue_force_tick = true where queue_id = q.queue_id;
    perform pg_notify('ferry_queue_ticker', i_queue);
    return (select max(tick_id) from ferry_queue.tick where tick_queue = q.queue_id);
end;
$$;
