-- ---------------------------------------------------------------------------------------
-- Function: ferry_queue.capture_image(text, text[])
--
--     A row image of i_row ('new' or 'old') as text: the whole row, or only i_cols.
--
-- Parameters:
--     i_row text
--     i_cols text[]
--
-- Returns:
--     text
-- ---------------------------------------------------------------------------------------
create or replace function ferry_queue.capture_image(i_row text, i_cols text[]) returns text
language sql immutable set search_path = pg_catalog, pg_temp as $$
    select case when i_cols is null then format('pg_catalog.row_to_json(%s)::text', i_row)
                else format('(select pg_catalog.row_to_json(_ferry_image)::text'
                            ' from (select %s) as _ferry_image)',
                            (select string_agg(format('%s.%I', i_row, c), ', ' order by n)
                               from unnest(i_cols) with ordinality as u(c, n)))
           end
$$;
