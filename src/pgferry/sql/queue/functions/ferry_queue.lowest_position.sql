-- ---------------------------------------------------------------------------------------
-- Function: ferry_queue.lowest_position(text, text[])
--
--     The lowest position of the queue's subscriptions, except those named in i_except; the
--     newest tick when there are none.
--
-- Parameters:
--     i_queue text
--     i_except text[] default '{}'
--
-- Returns:
--     bigint
--
-- Tables:
--     ferry_queue.queue
--     ferry_queue.subscription
--     ferry_queue.tick
-- ---------------------------------------------------------------------------------------
create or replace function ferry_queue.lowest_position(i_queue text, i_except text[] default '{}')
returns bigint
language sql stable set search_path = pg_catalog, pg_temp as $$
    select coalesce(
        (select min(s.sub_last_tick)
           from ferry_queue.subscription s
           join ferry_queue.queue q on q.queue_id = s.sub_queue
          where q.queue_name = i_queue and s.sub_consumer <> all (i_except)),
        (select max(t.tick_id)
           from ferry_queue.tick t
           join ferry_queue.queue q on q.queue_id = t.tick_queue
          where q.queue_name = i_queue))
$$;
