-- ---------------------------------------------------------------------------------------
-- Function: ferry_queue.prune_capture_functions(integer)
--
--     Drop the templated functions of a queue that no trigger uses any more.  Returns how many.
--
-- Parameters:
--     i_queue_id integer
--
-- Returns:
--     integer
--
-- Tables:
--     ferry_queue.capture_function (written)
-- ---------------------------------------------------------------------------------------
create or replace function ferry_queue.prune_capture_functions(i_queue_id integer) returns integer
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
    r record;
    v_count integer := 0;
begin
    for r in select c.cf_name from ferry_queue.capture_function c
              where c.cf_queue = i_queue_id and c.cf_template is not null
                and not exists (
                    select 1 from pg_trigger t
                     where t.tgfoid = to_regprocedure(format('ferry_queue.%I()', c.cf_name)))
    loop
        execute format('drop function if exists ferry_queue.%I()', r.cf_name);
        delete from ferry_queue.capture_function
         where cf_queue = i_queue_id and cf_name = r.cf_name;
        v_count := v_count + 1;
    end loop;
    return v_count;
end;
$$;
