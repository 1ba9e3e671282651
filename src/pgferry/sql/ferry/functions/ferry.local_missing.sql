-- ---------------------------------------------------------------------------------------
-- Function: ferry.local_missing(text)
--
--     Objects of this database that could be attached on a root node: ordinary and
--     partitioned tables ('r') and sequences ('S') outside the system and pgferry schemas that
--     are not registered as local for the queue, named as format('%I.%I'), the form table_info
--     and seq_info use.
--
-- Parameters:
--     i_queue text
--
-- Returns:
--     setof records of:
--         obj_kind text
--         obj_name text
--
-- Tables:
--     ferry.seq_info
--     ferry.table_info
-- ---------------------------------------------------------------------------------------
create or replace function ferry.local_missing(i_queue text)
returns table (obj_kind text, obj_name text)
language sql stable set search_path = pg_catalog, pg_temp
as $$
    select kind, name
      from (
        select case when c.relkind = 'S' then 'S' else 'r' end as kind,
               format('%I.%I', n.nspname, c.relname) as name
          from pg_catalog.pg_class c
          join pg_catalog.pg_namespace n on n.oid = c.relnamespace
         where c.relkind in ('r', 'p', 'S')
           and not c.relispartition
           and n.nspname not in ('pg_catalog', 'information_schema', 'ferry', 'ferry_queue',
                                 'ferry_node')
           and n.nspname not like 'pg\_toast%'
           and n.nspname not like 'pg\_temp%'
      ) o
     where not exists (select 1 from ferry.table_info t
                        where t.queue_name = i_queue and t.local
                          and o.kind = 'r' and t.table_name = o.name)
       and not exists (select 1 from ferry.seq_info s
                        where s.queue_name = i_queue and s.local
                          and o.kind = 'S' and s.seq_name = o.name)
     order by 1, 2
$$;
