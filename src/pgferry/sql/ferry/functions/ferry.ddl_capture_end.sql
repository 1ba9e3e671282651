-- ---------------------------------------------------------------------------------------
-- Function: ferry.ddl_capture_end()
--
--     Event trigger on ddl_command_end (ALTER TABLE, CREATE INDEX, COMMENT) of a root with
--     capture-ddl on.  For each queue that replicates a table the command touched, the
--     statement that ran it (ferry.ddl_isolate) is queued in the same transaction
--     (ferry.ddl_queue); a statement it cannot isolate fails the transaction.  A table
--     renamed (or moved to another schema) is renamed in the registry too, and a capture
--     whose function names columns (a spec with options) or the table is made again for
--     the table as the statement left it.  Commands inside extensions are left alone.
--
-- Returns:
--     event_trigger
--
-- Tables:
--     ferry.ddl_capture
--     ferry.table_info
-- ---------------------------------------------------------------------------------------
create or replace function ferry.ddl_capture_end() returns event_trigger
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
    v_ctx    text;
    v_outer  text;
    r        record;
    q        record;
    v_stmt   text;
    v_now    text;
    v_tables text;
    v_done   text[] := '{}';
    v_relid  oid;
    v_schema text;
    v_fill   text;
begin
    for r in
        select distinct c.command_tag,
               case when c.object_type = 'index'
                    then (select i.indrelid from pg_catalog.pg_index i where i.indexrelid = c.objid)
                    else c.objid end as relid
          from pg_catalog.pg_event_trigger_ddl_commands() c
         where not c.in_extension and c.classid = 'pg_catalog.pg_class'::pg_catalog.regclass
           and ((c.command_tag = 'ALTER TABLE' and c.object_type in ('table', 'table column'))
                or (c.command_tag = 'COMMENT' and c.object_type in ('table', 'table column'))
                or (c.command_tag = 'CREATE INDEX' and c.object_type = 'index'))
    loop
        continue when r.relid is null;
        for q in select * from ferry.ddl_replicated(r.relid) loop
            continue when r.command_tag = 'CREATE INDEX' and not q.indexes;
            if v_ctx is null then  -- read only for DDL on a replicated table
                get diagnostics v_ctx = pg_context;
                -- The first line is this function; what is left is whatever ran the DDL.
                v_outer := case when pg_catalog.strpos(v_ctx, E'\n') > 0
                                then pg_catalog.substr(v_ctx, pg_catalog.strpos(v_ctx, E'\n') + 1) end;
            end if;
            select pg_catalog.format('%I.%I', n.nspname, c.relname) into v_now
              from pg_catalog.pg_class c join pg_catalog.pg_namespace n on n.oid = c.relnamespace
             where c.oid = r.relid;
            v_stmt := ferry.ddl_isolate(
                v_outer, r.command_tag,
                array[(pg_catalog.parse_ident(q.table_name))[2], (pg_catalog.parse_ident(v_now))[2]],
                q.table_name);
            -- The schema the statement found the table in (before a SET SCHEMA) must be
            -- written in it, but for public.
            v_schema := (pg_catalog.parse_ident(q.table_name))[1];
            if v_schema <> 'public'
               and v_stmt !~* ('(^|[^[:alnum:]_$])"?' || pg_catalog.regexp_replace(v_schema, '([^[:alnum:]_ ])', '\\\1', 'g') || '"?\s*\.') then
                raise exception 'pgferry: name table % with its schema in DDL on replicated tables (subscribers read unqualified names as public)',
                    q.table_name;
            end if;
            if r.command_tag = 'ALTER TABLE' then
                v_fill := ferry.ddl_volatile_fill(r.relid, v_stmt);
                if v_fill is not null then
                    raise exception 'pgferry: column % of replicated table % would get values of its own on every node (a volatile default fills the rows there is); add it without the default, fill it with an UPDATE, then set the default',
                        v_fill, q.table_name;
                end if;
            end if;
            -- One event per statement and queue, however many tables it touched.
            if not (q.queue_name || E'\n' || v_stmt) = any(v_done) then
                v_done := v_done || (q.queue_name || E'\n' || v_stmt);
                select coalesce(pg_catalog.json_agg(t.table_name order by t.table_name)::text, '[]')
                  into v_tables
                  from ferry.table_info t where t.queue_name = q.queue_name;
                perform ferry.ddl_queue(q.queue_name, v_stmt, '', v_tables);
            end if;
            v_relid := r.relid;
            if v_now <> q.table_name then
                update ferry.table_info set table_name = v_now
                 where queue_name = q.queue_name and table_name = q.table_name;
            end if;
            -- The capture trigger passes the table's name and a spec's function names
            -- columns: both made again for the table as it is now.
            if v_now <> q.table_name
               or (q.capture is not null and not ferry_queue.plain_capture(q.capture)) then
                if q.capture is not null then
                    perform ferry_queue.attach_capture_spec(q.queue_name, v_relid::pg_catalog.regclass, q.capture);
                else
                    perform ferry_queue.attach_capture(q.queue_name, v_relid::pg_catalog.regclass);
                end if;
            end if;
        end loop;
    end loop;
end;
$$;
