-- ---------------------------------------------------------------------------------------
-- Function: ferry_queue.templated_capture_function(integer, text[], text)
--
--     The capture function of a template (one per distinct template text and queue), or
--     with i_template NULL the plain function of key list i_key (one per key list and queue:
--     capture_function), (re)written for the queue's current rotation table.  A new one is
--     named by next_capture_name.  Returns its name.
--
-- Parameters:
--     i_queue_id integer
--     i_key text[]
--     i_template text
--
-- Returns:
--     text
--
-- Tables:
--     ferry_queue.capture_function (written)
-- ---------------------------------------------------------------------------------------
create or replace function ferry_queue.templated_capture_function(
    i_queue_id integer, i_key text[], i_template text)
returns text
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
    v_name text;
begin
    if i_template is null then
        select cf_name into v_name from ferry_queue.capture_function
         where cf_queue = i_queue_id and cf_pkey = i_key and cf_template is null;
    else
        select cf_name into v_name from ferry_queue.capture_function
         where cf_queue = i_queue_id and md5(cf_template) = md5(i_template)
           and cf_template = i_template;
    end if;
    if v_name is null then
        v_name := ferry_queue.next_capture_name(i_queue_id);
        insert into ferry_queue.capture_function (cf_queue, cf_pkey, cf_name, cf_template)
        values (i_queue_id, i_key, v_name, i_template);
    end if;
    return ferry_queue.install_capture_function(
        i_queue_id, v_name, coalesce(i_template, ferry_queue.plain_capture_template(i_key)));
end;
$$;
