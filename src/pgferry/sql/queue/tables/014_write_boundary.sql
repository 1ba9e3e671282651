-- ferry_queue: only the queue's owner writes its tables.
--
-- Capture used to run with the writer's rights, so a role writing a captured table needed
-- USAGE on ferry_queue and INSERT on its event tables, and with them it could queue any
-- event, EXECUTE scripts included, which every subscriber runs.  Capture now runs with its
-- owner's rights (SECURITY DEFINER functions, see functions/ferry_queue.install_capture_
-- function.sql), so those grants serve nothing and are taken back: every privilege that
-- changes rows (INSERT, UPDATE, DELETE, TRUNCATE; on sequences USAGE and UPDATE, which
-- nextval and setval need) on every table, partition and sequence of ferry_queue, from
-- PUBLIC and from every role but the relation's owner.  Reading rights stay.  A schema that
-- no one granted anything on is left as it was.
do $$
declare
    r record;
begin
    for r in
        select c.oid::regclass as rel, c.relkind,
               case when a.grantee = 0 then 'public'
                    else pg_catalog.quote_ident(g.rolname) end as grantee
          from pg_catalog.pg_class c
          join pg_catalog.pg_namespace n on n.oid = c.relnamespace
         cross join lateral pg_catalog.aclexplode(c.relacl) a
          left join pg_catalog.pg_roles g on g.oid = a.grantee
         where n.nspname = 'ferry_queue' and c.relkind in ('r', 'p', 'S')
           and a.grantee <> c.relowner
           and a.privilege_type in ('INSERT', 'UPDATE', 'DELETE', 'TRUNCATE', 'USAGE')
         group by 1, 2, 3
    loop
        if r.relkind = 'S' then
            execute pg_catalog.format('revoke usage, update on sequence %s from %s',
                                      r.rel, r.grantee);
        else
            execute pg_catalog.format('revoke insert, update, delete, truncate on %s from %s',
                                      r.rel, r.grantee);
        end if;
    end loop;
end;
$$;
