-- ---------------------------------------------------------------------------------------
-- Function: ferry_queue.capture_image_eq(text[])
--
--     The test, for a generated trigger body, that columns i_cols are the same in the old
--     and the new row, compared by binary image (any type, no operator):
--     record_image_eq(row(old.a, old.b), row(new.a, new.b)).
--
-- Parameters:
--     i_cols text[]
--
-- Returns:
--     text
-- ---------------------------------------------------------------------------------------
create or replace function ferry_queue.capture_image_eq(i_cols text[]) returns text
language sql immutable set search_path = pg_catalog, pg_temp as $$
    select format('pg_catalog.record_image_eq(row(%s), row(%s))',
                  (select string_agg(format('old.%I', c), ', ') from unnest(i_cols) c),
                  (select string_agg(format('new.%I', c), ', ') from unnest(i_cols) c))
$$;
