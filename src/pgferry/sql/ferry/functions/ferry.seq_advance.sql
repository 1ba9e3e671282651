-- ---------------------------------------------------------------------------------------
-- Function: ferry.seq_advance(regclass, bigint)
--
--     Move sequence seq to value, never backwards (a subscriber's sequences).  Returns the
--     sequence's value after the call.
--
-- Parameters:
--     seq regclass
--     value bigint
--
-- Returns:
--     bigint
-- ---------------------------------------------------------------------------------------
create or replace function ferry.seq_advance(seq regclass, value bigint) returns bigint
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
    cur bigint;
begin
    execute format('select last_value from %s', seq) into cur;
    if value > cur then
        perform setval(seq, value);
        return value;
    end if;
    return cur;
end;
$$;
