-- ---------------------------------------------------------------------------------------
-- Function: ferry_queue.event_retry(bigint, bigint, timestamptz)
--
--     Put event i_ev_id of batch i_batch_id in the retry queue, to come back to this consumer
--     only at i_retry_time.  Returns 1, or 0 when it is there already.
--
-- Parameters:
--     i_batch_id bigint
--     i_ev_id bigint
--     i_retry_time timestamptz
--
-- Returns:
--     integer
--
-- Tables:
--     ferry_queue.retry_queue (written)
--     ferry_queue.subscription
-- ---------------------------------------------------------------------------------------
create or replace function ferry_queue.event_retry(i_batch_id bigint, i_ev_id bigint,
                                                  i_retry_time timestamptz) returns integer
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
    s  ferry_queue.subscription;
    e  record;
begin
    s := ferry_queue.find_batch(i_batch_id);
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

-- ---------------------------------------------------------------------------------------
-- Function: ferry_queue.event_retry(bigint, bigint, integer)
--
--     event_retry with a delay of i_retry_seconds from now.
--
-- Parameters:
--     i_batch_id bigint
--     i_ev_id bigint
--     i_retry_seconds integer
--
-- Returns:
--     integer
-- ---------------------------------------------------------------------------------------
create or replace function ferry_queue.event_retry(i_batch_id bigint, i_ev_id bigint, i_retry_seconds integer)
returns integer
language sql set search_path = pg_catalog, pg_temp as $$
    select ferry_queue.event_retry(i_batch_id, i_ev_id,
                                   now() + make_interval(secs => i_retry_seconds))
$$;
