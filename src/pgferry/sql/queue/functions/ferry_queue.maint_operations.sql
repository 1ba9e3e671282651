-- ---------------------------------------------------------------------------------------
-- Function: ferry_queue.maint_operations()
--
--     What the maintenance loop should call, in order: (function name, argument or NULL).
--
-- Returns:
--     setof records of:
--         func_name text
--         func_arg text
--
-- Tables:
--     ferry_queue.queue
-- ---------------------------------------------------------------------------------------
create or replace function ferry_queue.maint_operations(out func_name text, out func_arg text)
returns setof record
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
    q ferry_queue.queue;
    v_step2 boolean := false;
    v_fn text;
begin
    for q in select * from ferry_queue.queue order by queue_name loop
        if q.queue_switch_step2 is null then
            v_step2 := true;
        elsif q.queue_switch_time + q.queue_rotation_period <= now() then
            func_name := 'ferry_queue.maint_rotate_tables_step1';
            func_arg := q.queue_name;
            return next;
            v_step2 := true;
        end if;
    end loop;
    if v_step2 then
        func_name := 'ferry_queue.maint_rotate_tables_step2';
        func_arg := null;
        return next;
    end if;
    for q in select * from ferry_queue.queue where queue_extra_maint is not null
              order by queue_name loop
        foreach v_fn in array q.queue_extra_maint loop
            func_name := v_fn;
            func_arg := q.queue_name;
            return next;
        end loop;
    end loop;
end;
$$;
