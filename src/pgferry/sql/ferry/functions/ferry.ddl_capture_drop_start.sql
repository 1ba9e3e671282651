-- ---------------------------------------------------------------------------------------
-- Function: ferry.ddl_capture_drop_start()
--
--     Event trigger on ddl_command_start of DROP INDEX on a root with capture-ddl on: note,
--     for the statement's sql_drop trigger (ferry.ddl_capture_drop), which indexes belong to
--     replicated tables of queues that capture indexes.  Once dropped, an index no longer
--     says what table it was on.  The note is a transaction-local setting.
--
-- Returns:
--     event_trigger
--
-- Tables:
--     ferry.ddl_capture
--     ferry.table_info
-- ---------------------------------------------------------------------------------------
create or replace function ferry.ddl_capture_drop_start() returns event_trigger
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
    v_map jsonb;
begin
    select pg_catalog.jsonb_object_agg(i.indexrelid::text, pg_catalog.jsonb_build_array(t.queue_name, t.table_name))
      into v_map
      from ferry.ddl_capture d
      join ferry_node.node_info n on n.queue_name = d.queue_name and n.node_type = 'root'
      join ferry.table_info t on t.queue_name = d.queue_name and t.local
      join pg_catalog.pg_index i on i.indrelid = pg_catalog.to_regclass(t.table_name)
     where d.indexes;
    perform pg_catalog.set_config('ferry.ddl_drop_indexes', coalesce(v_map, '{}')::text, true);
end;
$$;
