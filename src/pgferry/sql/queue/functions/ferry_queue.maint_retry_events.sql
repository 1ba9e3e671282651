-- ---------------------------------------------------------------------------------------
-- Function: ferry_queue.maint_retry_events()
--
--     Move due retry events back into their queue (for their owner only), 100 at most a call;
--     returns how many.
--
-- Returns:
--     integer
--
-- Tables:
--     ferry_queue.event (written)
--     ferry_queue.retry_queue (written)
--     ferry_queue.queue
-- ---------------------------------------------------------------------------------------
create or replace function ferry_queue.maint_retry_events() returns integer
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
    v_count integer;
begin
    -- One mover at a time; writers of new retry events are not blocked.
    lock table ferry_queue.retry_queue in share update exclusive mode;
    with due as (
        delete from ferry_queue.retry_queue r
         where (r.ev_owner, r.ev_id) in (
                select ev_owner, ev_id from ferry_queue.retry_queue
                 where ev_retry_after <= now()
                 order by ev_retry_after limit 100)
        returning r.*
    )
    insert into ferry_queue.event
        (ev_part, ev_id, ev_time, ev_owner, ev_retry,
         ev_type, ev_data, ev_extra1, ev_extra2, ev_extra3, ev_extra4)
    select q.queue_id * 10 + q.queue_cur_table, d.ev_id, d.ev_time, d.ev_owner, d.ev_retry,
           d.ev_type, d.ev_data, d.ev_extra1, d.ev_extra2, d.ev_extra3, d.ev_extra4
      from due d join ferry_queue.queue q on q.queue_id = d.ev_queue;
    get diagnostics v_count = row_count;
    return v_count;
end;
$$;
