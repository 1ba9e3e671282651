-- ---------------------------------------------------------------------------------------
-- Function: ferry_queue.statement_capture(regclass, jsonb)
--
--     Whether table i_table under spec i_spec is captured by statement triggers
--     (statement_capture_template) rather than by a row trigger: a spec that asks for it
--     (capture = statement; a row trigger is cheaper for statements of one or two rows,
--     statement triggers from a few rows up) and is otherwise plain (a key, no option),
--     capturing all three operations, on an ordinary table that is neither a
--     partition nor an inheritance child nor has children, keyed by the columns of a unique
--     index that is checked at once (not deferred), not partial, on NOT NULL columns (the
--     primary key, as a rule).  A statement trigger fires only
--     for the table a statement names: a write through a parent would pass a child's
--     statement trigger by, a write to a partition its parent's; a row trigger fires for
--     every row wherever it is written (and a partitioned table's is cloned to its
--     partitions).  Capture options stay with the row templates.
--
-- Parameters:
--     i_table regclass
--     i_spec jsonb
--
-- Returns:
--     boolean
-- ---------------------------------------------------------------------------------------
create or replace function ferry_queue.statement_capture(i_table regclass, i_spec jsonb)
returns boolean
language sql stable set search_path = pg_catalog, pg_temp as $$
    select i_spec->>'capture' is not distinct from 'statement'
       and ferry_queue.plain_capture(i_spec)
       and coalesce(i_spec->>'ops', 'IUD') in ('IUD', 'IDU', 'UID', 'UDI', 'DIU', 'DUI')
       and exists (select from pg_class c where c.oid = i_table and c.relkind = 'r'
                                            and not c.relispartition)
       and not exists (select from pg_inherits h
                        where h.inhrelid = i_table or h.inhparent = i_table)
       -- The key identifies one row at every statement's end: an UPDATE's rows are paired
       -- by it.
       and exists (select from pg_index i
                    where i.indrelid = i_table and i.indisunique and i.indimmediate
                      and i.indpred is null and i.indexprs is null
                      and i.indnkeyatts = jsonb_array_length(i_spec->'key')
                      and (select array_agg(a.attname::text order by a.attname::text)
                             from unnest(i.indkey[0:i.indnkeyatts - 1]) as k(attnum)
                             join pg_attribute a on a.attrelid = i_table and a.attnum = k.attnum
                            where a.attnotnull)
                          = (select array_agg(k order by k)
                               from jsonb_array_elements_text(i_spec->'key') as k))
       -- Keys compared by pg_catalog's own operators, joined by hash
       -- (statement_capture_match): types of pg_catalog (or domains over them) with a hash
       -- operator class.
       and not exists (select from pg_attribute a
                         join pg_type t on t.oid = a.atttypid
                         left join pg_type b on b.oid = t.typbasetype
                        where a.attrelid = i_table
                          and a.attname::text in (select jsonb_array_elements_text(i_spec->'key'))
                          and (coalesce(b.typnamespace, t.typnamespace) <> 'pg_catalog'::regnamespace
                               or not exists (select from pg_opclass c
                                               where c.opcmethod = (select oid from pg_am where amname = 'hash')
                                                 and c.opcdefault
                                                 and c.opcintype = coalesce(b.oid, t.oid))))
$$;
