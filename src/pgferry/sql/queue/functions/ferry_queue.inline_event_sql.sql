-- ---------------------------------------------------------------------------------------
-- Function: ferry_queue.inline_event_sql(boolean, integer, integer, xid8, xid8, pg_snapshot, xid8[])
--
--     The event query of a tick range (event_range_sql) with the range's values
--     (tick_range_args) inlined as literals: a text any connection can run unchanged.
--
-- Parameters:
--     i_ordered       boolean
--     i_queue_id      integer
--     i_sub_id        integer
--     i_prev_xmax     xid8
--     i_next_xmax     xid8
--     i_next_snapshot pg_snapshot
--     i_running       xid8[]
--
-- Returns:
--     text (null when the range is: a tick is gone)
--
-- Calls:
--     ferry_queue.event_range_sql
-- ---------------------------------------------------------------------------------------
create or replace function ferry_queue.inline_event_sql(
    i_ordered boolean, i_queue_id integer, i_sub_id integer, i_prev_xmax xid8,
    i_next_xmax xid8, i_next_snapshot pg_snapshot, i_running xid8[]) returns text
language plpgsql immutable set search_path = pg_catalog, pg_temp as $$
begin
    if i_queue_id is null then
        return null;
    end if;
    return ferry_queue.event_range_sql(
        i_ordered, i_queue_id::text, i_sub_id::text,
        pg_catalog.quote_literal(i_prev_xmax::text) || '::xid8',
        pg_catalog.quote_literal(i_next_xmax::text) || '::xid8',
        pg_catalog.quote_literal(i_next_snapshot::text) || '::pg_snapshot',
        case when pg_catalog.cardinality(i_running) > 0
             then pg_catalog.quote_literal(i_running::text) || '::xid8[]' end);
end;
$$;
