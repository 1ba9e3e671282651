-- ---------------------------------------------------------------------------------------
-- Function: ferry_queue.row_capture_in_c()
--
--     Whether a table captured plainly (plain_capture) gets the C function
--     ferry_queue.plain_row_capture() rather than the PL/pgSQL function of its key list:
--     the function is installed (install_row_capture), the role attaching the trigger may
--     run it (CREATE TRIGGER asks for EXECUTE: a superuser, or a role it was granted to),
--     and the session did not ask for PL/pgSQL (ferry_queue.row_capture = 'plpgsql', which
--     add-table sets from the node's setting row_capture).
--
-- Returns:
--     boolean
-- ---------------------------------------------------------------------------------------
create or replace function ferry_queue.row_capture_in_c() returns boolean
language plpgsql stable set search_path = pg_catalog, pg_temp as $$
declare
    v_fn regprocedure := pg_catalog.to_regprocedure('ferry_queue.plain_row_capture()');
begin
    return v_fn is not null
       and coalesce(pg_catalog.current_setting('ferry_queue.row_capture', true), '')
           is distinct from 'plpgsql'
       and pg_catalog.has_function_privilege(v_fn, 'execute');
end;
$$;
