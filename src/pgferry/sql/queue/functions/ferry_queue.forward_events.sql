-- ---------------------------------------------------------------------------------------
-- Function: ferry_queue.forward_events(text, bigint[], timestamptz[], integer[], text[], text[],
--         text[], text[], text[], text[])
--
--     Store events of another queue (a provider's batch, read in ev_id order) in i_queue's
--     current table with their ev_id, ev_time and ev_retry.  ev_txid is this transaction's:
--     the events belong to the batch of this queue that sees it commit.  The arrays are the
--     columns of the events, one element per event.  Returns how many were stored.
--
-- Parameters:
--     i_queue text
--     i_ev_id bigint[]
--     i_ev_time timestamptz[]
--     i_ev_retry integer[]
--     i_ev_type text[]
--     i_ev_data text[]
--     i_ev_extra1 text[]
--     i_ev_extra2 text[]
--     i_ev_extra3 text[]
--     i_ev_extra4 text[]
--
-- Returns:
--     integer
--
-- Tables:
--     ferry_queue.event (written)
--     ferry_queue.queue
-- ---------------------------------------------------------------------------------------
create or replace function ferry_queue.forward_events(
    i_queue text, i_ev_id bigint[], i_ev_time timestamptz[], i_ev_retry integer[],
    i_ev_type text[], i_ev_data text[],
    i_ev_extra1 text[], i_ev_extra2 text[], i_ev_extra3 text[], i_ev_extra4 text[])
returns integer
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
    q       ferry_queue.queue;
    v_count integer;
begin
    q := ferry_queue.find_queue(i_queue);
    insert into ferry_queue.event
        (ev_part, ev_id, ev_time, ev_retry, ev_type, ev_data,
         ev_extra1, ev_extra2, ev_extra3, ev_extra4)
    select q.queue_id * 10 + q.queue_cur_table, e.*
      from unnest(i_ev_id, i_ev_time, i_ev_retry, i_ev_type, i_ev_data,
                  i_ev_extra1, i_ev_extra2, i_ev_extra3, i_ev_extra4) as e;
    get diagnostics v_count = row_count;
    return v_count;
end;
$$;
