-- ---------------------------------------------------------------------------------------
-- Function: ferry_queue.batch_tick(integer, bigint, interval, integer, interval, bigint, boolean)
--
--     The tick a batch after tick i_after of queue i_queue_id ends at: the one rule of a
--     batch's size, for every caller (opening a batch, the worker's read-ahead choosing the
--     next one before it is opened).  The batch ends at the first tick after i_after that
--     is at least i_min_lag old and
--       * with i_upto: is i_upto or closes i_min_count events, never after i_upto;
--       * with i_sized: when more than one such tick waits (the consumer is behind), closes
--         i_min_count events or all there are, whichever is fewer (one large batch instead
--         of many small ones: a batch has a fixed price, and a key's events collapse in
--         it); when one waits, that one;
--       * otherwise, with i_min_count or i_min_interval: closes that many events or that
--         long a span; without either, the next tick.
--     tick_id NULL: no such tick yet.  Every column NULL: tick i_after is gone.
--
-- Parameters:
--     i_queue_id     integer
--     i_after        bigint     the batch's opening tick (the consumer's position)
--     i_min_lag      interval
--     i_min_count    integer
--     i_min_interval interval
--     i_upto         bigint
--     i_sized        boolean
--
-- Returns:
--     one row of:
--         tick_id  bigint    the closing tick
--         events   bigint    events the batch closes (from the ticks' event positions)
--         waiting  integer   ticks after i_after, whatever their age
--
-- Tables:
--     ferry_queue.tick
-- ---------------------------------------------------------------------------------------
create or replace function ferry_queue.batch_tick(
    i_queue_id integer, i_after bigint, i_min_lag interval, i_min_count integer,
    i_min_interval interval, i_upto bigint, i_sized boolean,
    out tick_id bigint, out events bigint, out waiting integer)
language plpgsql stable set search_path = pg_catalog, pg_temp as $$
declare
    v_prev   ferry_queue.tick;
    v_count  integer := i_min_count;
    v_ticks  integer;
    v_events bigint;
begin
    select * into v_prev from ferry_queue.tick t
     where t.tick_queue = i_queue_id and t.tick_id = i_after;
    if not found then
        return;
    end if;
    select pg_catalog.count(*) into waiting from ferry_queue.tick t
     where t.tick_queue = i_queue_id and t.tick_id > i_after;
    if i_sized and i_upto is null then
        select pg_catalog.count(*), pg_catalog.max(t.tick_event_seq) - v_prev.tick_event_seq
          into v_ticks, v_events
          from ferry_queue.tick t
         where t.tick_queue = i_queue_id and t.tick_id > i_after
           and (i_min_lag is null or t.tick_time <= now() - i_min_lag);
        -- Idle ticks only (no event closed): the next tick, one at a time.
        v_count := case when v_ticks > 1 and i_min_count is not null
                        then greatest(0, least(v_events, i_min_count)) end;
    end if;
    select t.tick_id, t.tick_event_seq - v_prev.tick_event_seq into tick_id, events
      from ferry_queue.tick t
     where t.tick_queue = i_queue_id and t.tick_id > i_after
       and (i_upto is null or t.tick_id <= i_upto)
       and (i_min_lag is null or t.tick_time <= now() - i_min_lag)
       and case when i_upto is not null then
                    t.tick_id = i_upto or t.tick_event_seq - v_prev.tick_event_seq >= v_count
                when v_count is null and (i_sized or i_min_interval is null) then true
                else t.tick_event_seq - v_prev.tick_event_seq >= v_count
                     or t.tick_time - v_prev.tick_time >= i_min_interval
           end
     order by t.tick_id limit 1;
end;
$$;
