-- ---------------------------------------------------------------------------------------
-- Function: ferry.ddl_volatile_fill(oid, text)
--
--     The first column that statement i_stmt (an ALTER TABLE ... ADD) added to table
--     i_relid in this transaction with a volatile default (nextval, serial, random(),
--     clock_timestamp(), gen_random_uuid(), a volatile function of one's own), when the
--     table has rows: each node would fill its rows with values of its own.  NULL
--     otherwise.  Built-in functions leave no dependency to read, so their names are
--     looked for in the default's text; other functions are found through pg_depend.
--
-- Parameters:
--     i_relid oid
--     i_stmt text
--
-- Returns:
--     text
-- ---------------------------------------------------------------------------------------
create or replace function ferry.ddl_volatile_fill(i_relid oid, i_stmt text) returns text
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
    v_col  text;
    v_rows boolean;
begin
    if i_stmt !~* '\madd\M' then
        return null;
    end if;
    select a.attname::text into v_col
      from pg_catalog.pg_attribute a
      join pg_catalog.pg_attrdef d on d.adrelid = a.attrelid and d.adnum = a.attnum
     where a.attrelid = i_relid and a.attnum > 0 and not a.attisdropped
       and a.xmin::text = (pg_catalog.pg_current_xact_id()::text::bigint % 4294967296)::text
       and (pg_catalog.pg_get_expr(d.adbin, d.adrelid)
                ~* '\m(nextval|random|clock_timestamp|timeofday|gen_random_uuid|uuid_generate_v[14]|txid_current|pg_current_xact_id|statement_timestamp)\s*\('
            or exists (select 1 from pg_catalog.pg_depend p
                         join pg_catalog.pg_proc f on f.oid = p.refobjid
                        where p.classid = 'pg_catalog.pg_attrdef'::pg_catalog.regclass and p.objid = d.oid
                          and p.refclassid = 'pg_catalog.pg_proc'::pg_catalog.regclass and f.provolatile = 'v'))
     order by a.attnum
     limit 1;
    if v_col is null then
        return null;
    end if;
    execute pg_catalog.format('select exists (select 1 from %s)', i_relid::pg_catalog.regclass) into v_rows;
    return case when v_rows then v_col end;
end;
$$;
