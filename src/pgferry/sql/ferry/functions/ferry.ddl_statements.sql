-- ---------------------------------------------------------------------------------------
-- Function: ferry.ddl_statements(text)
--
--     Split a query string into its statements at the semicolons that end them: not those
--     inside strings ('', E'', $tag$ $tag$), quoted identifiers or comments.  Each statement
--     is returned trimmed, without its semicolon; empty ones are left out.
--
-- Parameters:
--     i_query text
--
-- Returns:
--     text[]
-- ---------------------------------------------------------------------------------------
create or replace function ferry.ddl_statements(i_query text) returns text[]
language plpgsql immutable as $$
declare
    n       integer := length(i_query);
    i       integer := 1;
    start   integer := 1;
    c       text;
    nxt     text;
    tag     text;
    depth   integer;
    j       integer;
    k       integer;
    out     text[] := '{}';
    part    text;
begin
    -- Fast path: no semicolon but the last one(s).
    if strpos(rtrim(i_query, E'; \t\r\n'), ';') = 0 then
        part := btrim(rtrim(i_query, E'; \t\r\n'), E' \t\r\n');
        return case when part = '' then out else array[part] end;
    end if;
    while i <= n loop
        c := substr(i_query, i, 1);
        nxt := substr(i_query, i + 1, 1);
        if c = '''' then
            -- E'' strings take backslash escapes.
            if i > 1 and lower(substr(i_query, i - 1, 1)) = 'e'
               and (i = 2 or substr(i_query, i - 2, 1) !~ '[[:alnum:]_$]') then
                j := i + 1;
                loop
                    exit when j > n;
                    if substr(i_query, j, 1) = '\' then
                        j := j + 2;
                    elsif substr(i_query, j, 1) = '''' then
                        exit when substr(i_query, j + 1, 1) <> '''';
                        j := j + 2;
                    else
                        j := j + 1;
                    end if;
                end loop;
                i := j + 1;
            else
                j := i + 1;
                loop
                    k := strpos(substr(i_query, j), '''');
                    if k = 0 then
                        j := n + 1;
                        exit;
                    end if;
                    j := j + k - 1;
                    exit when substr(i_query, j + 1, 1) <> '''';
                    j := j + 2;  -- '' inside the string
                end loop;
                i := j + 1;
            end if;
        elsif c = '"' then
            j := i + 1;
            loop
                k := strpos(substr(i_query, j), '"');
                if k = 0 then
                    j := n + 1;
                    exit;
                end if;
                j := j + k - 1;
                exit when substr(i_query, j + 1, 1) <> '"';
                j := j + 2;  -- "" inside the identifier
            end loop;
            i := j + 1;
        elsif c = '-' and nxt = '-' then
            j := strpos(substr(i_query, i), E'\n');
            i := case when j = 0 then n + 1 else i + j end;
        elsif c = '/' and nxt = '*' then
            depth := 1;
            i := i + 2;
            while i <= n and depth > 0 loop
                if substr(i_query, i, 2) = '/*' then
                    depth := depth + 1;
                    i := i + 2;
                elsif substr(i_query, i, 2) = '*/' then
                    depth := depth - 1;
                    i := i + 2;
                else
                    i := i + 1;
                end if;
            end loop;
        elsif c = '$' and (i = 1 or substr(i_query, i - 1, 1) !~ '[[:alnum:]_$]')
              and substr(i_query, i) ~ '^\$([A-Za-z_][A-Za-z_0-9]*)?\$' then
            tag := substring(substr(i_query, i) from '^(\$(?:[A-Za-z_][A-Za-z_0-9]*)?\$)');
            j := strpos(substr(i_query, i + length(tag)), tag);
            i := case when j = 0 then n + 1 else i + length(tag) + j - 1 + length(tag) end;
        elsif c = ';' then
            part := btrim(substr(i_query, start, i - start), E' \t\r\n');
            if part <> '' then
                out := out || part;
            end if;
            i := i + 1;
            start := i;
        else
            i := i + 1;
        end if;
    end loop;
    part := btrim(substr(i_query, start), E' \t\r\n');
    if part <> '' then
        out := out || part;
    end if;
    return out;
end;
$$;
