-- ---------------------------------------------------------------------------------------
-- Function: ferry.ddl_replicated(oid)
--
--     The queues that capture DDL on this root and replicate table i_relid: the queue, the
--     registry's name of the table (its name before a rename being captured), its capture
--     spec, and whether CREATE / DROP INDEX are captured for the queue.
--
-- Parameters:
--     i_relid oid
--
-- Returns:
--     setof records of:
--         queue_name text
--         table_name text
--         capture    jsonb
--         indexes    boolean
--
-- Tables:
--     ferry.ddl_capture
--     ferry.table_info
--     ferry_node.node_info
-- ---------------------------------------------------------------------------------------
create or replace function ferry.ddl_replicated(i_relid oid)
returns table (queue_name text, table_name text, capture jsonb, indexes boolean)
language plpgsql stable set search_path = pg_catalog, pg_temp as $$
declare
    d      record;
    v_name text;
begin
    for d in select c.queue_name, c.indexes from ferry.ddl_capture c
               join ferry_node.node_info n on n.queue_name = c.queue_name
              where n.node_type = 'root'
    loop
        -- The name the capture trigger passes (a rename not yet followed), else the
        -- table's own name: one primary-key lookup either way.
        v_name := ferry.ddl_trigger_table(i_relid, d.queue_name);
        if v_name is null then
            select pg_catalog.format('%I.%I', n.nspname, c.relname) into v_name
              from pg_catalog.pg_class c join pg_catalog.pg_namespace n on n.oid = c.relnamespace
             where c.oid = i_relid;
        end if;
        return query
            select d.queue_name, t.table_name, t.table_attrs -> 'capture', d.indexes
              from ferry.table_info t
             where t.queue_name = d.queue_name and t.table_name = v_name and t.local;
    end loop;
end;
$$;
