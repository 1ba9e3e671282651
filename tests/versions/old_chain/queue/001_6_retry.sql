-- Queue version 1, part 6 of 9: retry (event_retry, maint_retry_events).

-- ---------------------------------------------------------------------------------------
-- retry

create function ferry_queue.event_retry(
    i_batch_id bigint, i_ev_id bigint, i_retry_time timestamptz)
returns integer
language plpgsql as $$
declare
    s  ferry_queue.subscription;
    e  record;
begin
    select * into s from ferry_queue.subscription where sub_batch = i_batch_id;
    if not found then
        raise exception 'Batch not found: %', i_batch_id using errcode = 'P0002';
    end if;
    execute format('select * from (%s) e where ev_id = $1',
                   ferry_queue.batch_event_sql(i_batch_id))
       into e using i_ev_id;
    if e.ev_id is null then
        raise exception 'Event % not in batch %', i_ev_id, i_batch_id;
    end if;
    insert into ferry_queue.retry_queue
        (ev_retry_after, ev_queue, ev_owner, ev_id, ev_time, ev_txid, ev_retry,
         ev_type, ev_data, ev_extra1, ev_extra2, ev_extra3, ev_extra4)
    values (i_retry_time, s.sub_queue, s.sub_id, e.ev_id, e.ev_time, e.ev_txid::text::xid8,
            coalesce(e.ev_retry, 0) + 1,
            e.ev_type, e.ev_data, e.ev_extra1, e.ev_extra2, e.ev_extra3, e.ev_extra4)
    on conflict do nothing;
    return case when found then 1 else 0 end;
end;
$$;

create function ferry_queue.event_retry(i_batch_id bigint, i_ev_id bigint, i_retry_seconds integer)
returns integer
language sql as $$
    select ferry_queue.event_retry(i_batch_id, i_ev_id,
                                   now() + make_interval(secs => i_retry_seconds))
$$;

-- Move due retry events back into their queue (for their owner only); returns how many.
create function ferry_queue.maint_retry_events() returns integer
language plpgsql as $$
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
