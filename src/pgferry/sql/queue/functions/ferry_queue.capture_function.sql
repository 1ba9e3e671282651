-- ---------------------------------------------------------------------------------------
-- Function: ferry_queue.capture_function(integer, text[])
--
--     (Re)write the plain capture function of a queue for a key column list (one per queue
--     and key list, named capture_<queue_id>_<n>), for the queue's current rotation table.
--     Returns its name.
--
-- Parameters:
--     i_queue_id integer
--     i_pkey text[]
--
-- Returns:
--     text
--
-- Tables:
--     ferry_queue.capture_function (written)
-- ---------------------------------------------------------------------------------------
create or replace function ferry_queue.capture_function(i_queue_id integer, i_pkey text[])
returns text
language plpgsql as $$
declare
    v_name text;
begin
    select cf_name into v_name from ferry_queue.capture_function
     where cf_queue = i_queue_id and cf_pkey = i_pkey and cf_template is null;
    if v_name is null then
        v_name := ferry_queue.next_capture_name(i_queue_id);
        insert into ferry_queue.capture_function (cf_queue, cf_pkey, cf_name)
        values (i_queue_id, i_pkey, v_name);
    end if;
    return ferry_queue.install_capture_function(
        i_queue_id, v_name, ferry_queue.plain_capture_template(i_pkey));
end;
$$;
