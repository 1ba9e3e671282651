-- ---------------------------------------------------------------------------------------
-- Function: ferry.ddl_capture_drop()
--
--     Event trigger on sql_drop of DROP INDEX on a root with capture-ddl on: a dropped
--     index of a replicated table (as ferry.ddl_capture_drop_start noted) queues the
--     statement (ferry.ddl_isolate, ferry.ddl_queue) with the header Local-Table: <table>,
--     so that it runs where that table is replicated and is skipped elsewhere.
--
-- Returns:
--     event_trigger
-- ---------------------------------------------------------------------------------------
create or replace function ferry.ddl_capture_drop() returns event_trigger
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
    v_ctx    text;
    v_outer  text;
    v_map    jsonb;
    r        record;
    v_stmt   text;
    v_tables text;
    v_done   text[] := '{}';
begin
    get diagnostics v_ctx = pg_context;
    v_outer := case when pg_catalog.strpos(v_ctx, E'\n') > 0 then pg_catalog.substr(v_ctx, pg_catalog.strpos(v_ctx, E'\n') + 1) end;
    v_map := coalesce(nullif(pg_catalog.current_setting('ferry.ddl_drop_indexes', true), ''), '{}')::jsonb;
    for r in
        select o.object_name, v_map -> (o.objid::text) ->> 0 as queue_name,
               v_map -> (o.objid::text) ->> 1 as table_name
          from pg_catalog.pg_event_trigger_dropped_objects() o
         where o.object_type = 'index' and v_map ? (o.objid::text)
    loop
        v_stmt := ferry.ddl_isolate(v_outer, 'DROP INDEX', array[r.object_name], r.table_name);
        continue when (r.queue_name || E'\n' || v_stmt) = any(v_done);
        v_done := v_done || (r.queue_name || E'\n' || v_stmt);
        select coalesce(pg_catalog.json_agg(t.table_name order by t.table_name)::text, '[]') into v_tables
          from ferry.table_info t where t.queue_name = r.queue_name;
        perform ferry.ddl_queue(r.queue_name, v_stmt, 'local-table: ' || r.table_name, v_tables);
    end loop;
end;
$$;
