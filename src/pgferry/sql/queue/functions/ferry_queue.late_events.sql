-- ---------------------------------------------------------------------------------------
-- Function: ferry_queue.late_events(integer, pg_snapshot, pg_snapshot, integer, integer)
--
--     The events of queue i_queue_id committed by i_now that a tick's snapshot
--     (i_tick_snapshot) does not see: a transaction that had taken its event ids but not
--     committed when the tick was made is counted in the tick's event position, so no event
--     shows as waiting after it commits, yet its events come only with the next tick.  Such
--     a transaction is in the tick snapshot's xip list or at or above its xmax.  Those in
--     the list that i_now sees are looked up in the ev_txid index; above xmax the index is
--     walked one transaction at a time (few: the writers of that moment), at most i_steps
--     of them (NULL: no bound).  Counting stops at i_limit events: with 1, it says whether
--     there is any.  Generic plans: the lookups are index probes whatever the values.
--
-- Parameters:
--     i_queue_id       integer
--     i_tick_snapshot  pg_snapshot  the tick's snapshot
--     i_now            pg_snapshot  what counts as committed (the caller's snapshot)
--     i_limit          integer      events counted at most
--     i_steps          integer      transactions above xmax looked at, at most
--
-- Returns:
--     one row of:
--         events  integer  the late events, counted up to i_limit
--         whole   boolean  the walk above xmax saw every event there
--         later   boolean  it met a transaction that committed after i_now was taken
--
-- Tables:
--     ferry_queue.event
-- ---------------------------------------------------------------------------------------
create or replace function ferry_queue.late_events(
    i_queue_id integer, i_tick_snapshot pg_snapshot, i_now pg_snapshot, i_limit integer,
    i_steps integer, out events integer, out whole boolean, out later boolean)
language plpgsql set plan_cache_mode = force_generic_plan set search_path = pg_catalog, pg_temp as $$
declare
    v_x xid8;
    v_n integer := 0;
    v_c integer;
begin
    events := 0;
    whole := false;
    later := false;
    for v_x in select x from pg_snapshot_xip(i_tick_snapshot) x
                where pg_visible_in_snapshot(x, i_now) loop
        select count(*) into v_c from (
            select 1 from ferry_queue.event e
             where e.ev_part between i_queue_id * 10 and i_queue_id * 10 + 9
               and e.ev_txid = v_x
             limit i_limit - events) c;
        events := events + v_c;
        if events >= i_limit then
            return;
        end if;
    end loop;
    v_x := pg_snapshot_xmax(i_tick_snapshot);
    while i_steps is null or v_n < i_steps loop
        select e.ev_txid into v_x from ferry_queue.event e
         where e.ev_part between i_queue_id * 10 and i_queue_id * 10 + 9
           and e.ev_txid >= v_x
         order by e.ev_txid limit 1;
        if not found then
            whole := true;
            return;
        end if;
        -- Visible in i_now: committed since the tick.  Otherwise it committed after i_now
        -- was taken: look past it.
        if pg_visible_in_snapshot(v_x, i_now) then
            if i_limit - events = 1 then
                v_c := 1;  -- the event just found
            else
                select count(*) into v_c from (
                    select 1 from ferry_queue.event e
                     where e.ev_part between i_queue_id * 10 and i_queue_id * 10 + 9
                       and e.ev_txid = v_x
                     limit i_limit - events) c;
            end if;
            events := events + v_c;
            if events >= i_limit then
                return;
            end if;
        else
            later := true;
        end if;
        v_x := (v_x::text::bigint + 1)::text::xid8;
        v_n := v_n + 1;
    end loop;
end;
$$;
