-- ---------------------------------------------------------------------------------------
-- Function: ferry_queue.install_row_capture()
--
--     Make ferry_queue.plain_row_capture(), the plain row capture in C, from the shared
--     library pgferry_capture in the server's $libdir (ext/pgferry_capture, installed by
--     pgferry's `make`), where the installing role may (a superuser: C is an untrusted
--     language) and the library is there; EXECUTE closed to PUBLIC at once.  The schema
--     install calls it every time, so a library installed after the schema is taken up by
--     the next install.  Never fails: without the function, capture runs the PL/pgSQL
--     functions (row_capture_in_c).  Returns how the plain capture runs here: 'C', or
--     'PL/pgSQL: ' and the reason.
--
-- Returns:
--     text
-- ---------------------------------------------------------------------------------------
create or replace function ferry_queue.install_row_capture() returns text
language plpgsql set search_path = pg_catalog, pg_temp as $$
begin
    if pg_catalog.to_regprocedure('ferry_queue.plain_row_capture()') is not null then
        return 'C';
    end if;
    if not (select rolsuper from pg_catalog.pg_roles where rolname = current_user) then
        return 'PL/pgSQL: the C function needs a superuser to install it';
    end if;
    begin
        create or replace function ferry_queue.plain_row_capture() returns trigger
        language c as '$libdir/pgferry_capture', 'pgferry_plain_row_capture';
    exception when undefined_file or undefined_function then
        -- No library (or an older one): nothing made, nothing logged.
        return 'PL/pgSQL: library pgferry_capture not installed in this server';
    end;
    revoke all on function ferry_queue.plain_row_capture() from public;
    return 'C';
end;
$$;
