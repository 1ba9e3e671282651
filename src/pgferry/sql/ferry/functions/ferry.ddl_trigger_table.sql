-- ---------------------------------------------------------------------------------------
-- Function: ferry.ddl_trigger_table(oid, text)
--
--     The registered name of a table, as the queue's capture trigger on it passes it (its
--     second argument): the name the table had when its capture was attached, which is
--     still the registry's name after a rename that the registry has not followed yet.
--     NULL when the table has no capture trigger of that queue.
--
-- Parameters:
--     i_relid oid
--     i_queue text
--
-- Returns:
--     text
-- ---------------------------------------------------------------------------------------
create or replace function ferry.ddl_trigger_table(i_relid oid, i_queue text) returns text
language plpgsql stable set search_path = pg_catalog, pg_temp as $$
declare
    v_args bytea;
    v_cut  integer;
begin
    select tgargs into v_args from pg_catalog.pg_trigger
     where tgrelid = i_relid and tgname = '_ferry_' || i_queue || '_capture' and tgnargs >= 2;
    if v_args is null then
        return null;
    end if;
    -- Arguments are NUL-terminated: skip the queue name, read the table name.
    v_args := pg_catalog.substring(v_args, pg_catalog.position(v_args, '\x00'::bytea) + 1);
    v_cut := pg_catalog.position(v_args, '\x00'::bytea);
    return pg_catalog.convert_from(pg_catalog.substring(v_args, 1, v_cut - 1),
                        pg_catalog.current_setting('server_encoding'));
end;
$$;
