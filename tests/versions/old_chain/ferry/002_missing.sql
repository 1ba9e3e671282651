-- ferry.local_missing: objects of this database that could be attached on a root node.
--
-- Ordinary and partitioned tables ('r') and sequences ('S') outside the system and pgferry
-- schemas that are not yet registered as local for the queue.  Names are in
-- format('%I.%I') form, the same form table_info and seq_info use.

create function ferry.local_missing(i_queue text)
returns table (obj_kind text, obj_name text)
language sql stable
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
