-- ---------------------------------------------------------------------------------------
-- Function: ferry_queue.statement_capture_match(text, text, text[])
--
--     The test, for a generated statement capture body, that rows i_left and i_right have
--     the same key i_cols: l.a operator(pg_catalog.=) r.a and ...  Only pg_catalog's
--     operators are found so (statement_capture takes only keys of pg_catalog's hashable
--     types): nothing that a table's owner wrote runs as the queue's owner, and the join
--     can be made by hash.
--
-- Parameters:
--     i_left text
--     i_right text
--     i_cols text[]
--
-- Returns:
--     text
-- ---------------------------------------------------------------------------------------
create or replace function ferry_queue.statement_capture_match(
    i_left text, i_right text, i_cols text[])
returns text
language sql immutable set search_path = pg_catalog, pg_temp as $$
    select string_agg(format('%s.%I operator(pg_catalog.=) %s.%I', i_left, c, i_right, c),
                      ' and ' order by n)
      from unnest(i_cols) with ordinality as u(c, n)
$$;
