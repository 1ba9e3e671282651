-- ---------------------------------------------------------------------------------------
-- Function: ferry_queue.plain_capture(jsonb)
--
--     Whether a spec needs nothing but the plain function of its key.
--
-- Parameters:
--     i_spec jsonb
--
-- Returns:
--     boolean
-- ---------------------------------------------------------------------------------------
create or replace function ferry_queue.plain_capture(i_spec jsonb) returns boolean
language sql immutable set search_path = pg_catalog, pg_temp as $$
    select jsonb_array_length(coalesce(i_spec->'key', '[]')) > 0
       and jsonb_array_length(coalesce(i_spec->'ignore', '[]')) = 0
       and i_spec->>'when' is null and i_spec->>'ev_extra2' is null
       and i_spec->>'ev_extra3' is null and i_spec->>'ev_extra4' is null
       and not coalesce((i_spec->>'backup')::boolean, false)
       and not coalesce((i_spec->>'before')::boolean, false)
       and not coalesce((i_spec->>'skip')::boolean, false)
$$;
