-- ---------------------------------------------------------------------------------------
-- Function: ferry.ddl_capture_drop_table()
--
--     Event trigger on sql_drop of DROP TABLE, DROP SCHEMA and DROP OWNED on a root with
--     capture-ddl on: a command that drops a table some capturing queue still replicates
--     (directly or by CASCADE) fails, so the table leaves the root and the registry
--     together or not at all: remove-table first.  Without the refusal every subscriber's
--     replay and compare would meet a table their provider no longer has.  The dropped
--     table is known by its name only (its catalog rows are gone), which is the name the
--     registry writes (%I.%I).
--
-- Returns:
--     event_trigger
--
-- Tables:
--     ferry.ddl_capture
--     ferry.table_info
--     ferry_node.node_info
-- ---------------------------------------------------------------------------------------
create or replace function ferry.ddl_capture_drop_table() returns event_trigger
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
    v_tables text;
    v_queues text;
begin
    select pg_catalog.string_agg(distinct t.table_name, ', ' order by t.table_name),
           pg_catalog.string_agg(distinct t.queue_name, ', ' order by t.queue_name)
      into v_tables, v_queues
      from pg_catalog.pg_event_trigger_dropped_objects() o
      join ferry.table_info t
        on t.table_name = pg_catalog.format('%I.%I', o.schema_name, o.object_name) and t.local
      join ferry.ddl_capture d on d.queue_name = t.queue_name
      join ferry_node.node_info n on n.queue_name = t.queue_name and n.node_type = 'root'
     where o.object_type in ('table', 'foreign table') and not o.is_temporary;
    if v_tables is not null then
        raise exception 'pgferry: % would drop replicated table % (queue %); run remove-table % on the root first',
            tg_tag, v_tables, v_queues, v_tables
            using errcode = 'dependent_objects_still_exist';
    end if;
end;
$$;
