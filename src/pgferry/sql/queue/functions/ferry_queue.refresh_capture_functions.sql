-- ---------------------------------------------------------------------------------------
-- Function: ferry_queue.refresh_capture_functions(integer)
--
--     Point every capture function of a queue, plain or templated, at its current rotation
--     table (rotation calls it).  Returns how many were rewritten.
--
-- Parameters:
--     i_queue_id integer
--
-- Returns:
--     integer
--
-- Tables:
--     ferry_queue.capture_function
-- ---------------------------------------------------------------------------------------
create or replace function ferry_queue.refresh_capture_functions(i_queue_id integer)
returns integer
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
    r record;
    v_count integer := 0;
begin
    for r in select cf_name, cf_pkey, cf_template from ferry_queue.capture_function
              where cf_queue = i_queue_id
    loop
        perform ferry_queue.install_capture_function(
            i_queue_id, r.cf_name,
            coalesce(r.cf_template, ferry_queue.plain_capture_template(r.cf_pkey)));
        v_count := v_count + 1;
    end loop;
    return v_count;
end;
$$;
