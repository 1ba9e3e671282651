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
language plpgsql stable as $$
declare
    d    record;
    v_by text;
begin
    for d in select c.queue_name, c.indexes from ferry.ddl_capture c
               join ferry_node.node_info n on n.queue_name = c.queue_name
              where n.node_type = 'root'
    loop
        v_by := ferry.ddl_trigger_table(i_relid, d.queue_name);
        return query
            select d.queue_name, t.table_name, t.table_attrs -> 'capture', d.indexes
              from ferry.table_info t
             where t.queue_name = d.queue_name and t.local
               and (t.table_name = v_by
                    or (v_by is null and pg_catalog.to_regclass(t.table_name) = i_relid));
    end loop;
end;
$$;
