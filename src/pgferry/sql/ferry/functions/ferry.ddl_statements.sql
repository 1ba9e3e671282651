-- ---------------------------------------------------------------------------------------
-- Function: ferry.ddl_statements(text)
--
--     Split a query string into its statements at the semicolons that end them, reading
--     it token by token as the server's lexer does (scan.l): identifiers run on over
--     letters, digits, '_', '$' and every character above U+007F, so a '$' inside one
--     ("€$q$x") starts no dollar quote; dollar-quote tags take the same characters but
--     '$'; a string is E'' only after a lone e or E; U&'' and U&"" read like '' and "";
--     block comments nest.  Not those semicolons inside strings, quoted identifiers,
--     dollar quotes or comments.  Each statement is returned trimmed, without its
--     semicolon; empty ones are left out.
--
--     What the server might read otherwise is refused rather than guessed at: an
--     unterminated string, quoted identifier, dollar quote or comment, and a backslash in
--     a plain '' string (standard_conforming_strings decides what it means, and the value
--     that parsed the query may not be the one in force now), a '$' inside a name not
--     quoted or right after a number (legal, but where splitters part from the server).
--     A query with no semicolon but its last ones is one statement, whatever it holds.
--
-- Parameters:
--     i_query text
--
-- Returns:
--     text[]
-- ---------------------------------------------------------------------------------------
create or replace function ferry.ddl_statements(i_query text) returns text[]
language plpgsql immutable set search_path = pg_catalog, pg_temp as $$
declare
    n       integer := pg_catalog.length(i_query);
    i       integer := 1;
    start   integer := 1;
    c       text;
    nxt     text;
    tag     text;
    depth   integer;
    j       integer;
    k       integer;
    word    text;
    out     text[] := '{}';
    part    text;
    doubt   text;
    ch      text[] := pg_catalog.string_to_array(i_query, null);  -- chars[i] in O(1)
begin
    -- Fast path: no semicolon but the last one(s), so the server saw one statement.
    if pg_catalog.strpos(pg_catalog.rtrim(i_query, E'; \t\r\n'), ';') = 0 then
        part := pg_catalog.btrim(pg_catalog.rtrim(i_query, E'; \t\r\n'), E' \t\r\n\f');
        return case when part = '' then out else array[part] end;
    end if;
    while i <= n loop
        c := ch[i];
        nxt := coalesce(ch[i + 1], '');
        if c ~ '[A-Za-z_]' or pg_catalog.ascii(c) > 127 then
            -- An identifier or keyword: ident_start, then ident_cont (with '$').
            j := i + 1;
            while j <= n loop
                c := ch[j];
                exit when not (c ~ '[A-Za-z0-9_$]' or pg_catalog.ascii(c) > 127);
                j := j + 1;
            end loop;
            word := pg_catalog.substr(i_query, i, j - i);
            if pg_catalog.strpos(word, '$') > 0 then
                -- Legal, but what a '$' means is where a splitter and the server part.
                doubt := 'a $ inside a name not quoted';
            end if;
            if pg_catalog.lower(word) = 'e' and ch[j] is not distinct from '''' then
                -- E'' takes backslash escapes and doubled quotes.
                j := j + 1;
                loop
                    if j > n then
                        doubt := 'an unterminated string';
                        exit;
                    end if;
                    if ch[j] = '\' then
                        j := j + 2;
                    elsif ch[j] = '''' then
                        exit when ch[j + 1] is distinct from '''';
                        j := j + 2;
                    else
                        j := j + 1;
                    end if;
                end loop;
                i := j + 1;
            else
                i := j;
            end if;
        elsif c = '''' then
            -- '', and the forms read as it (U&'', N'', B'', X''): doubled quotes only.
            j := i + 1;
            loop
                k := pg_catalog.strpos(pg_catalog.substr(i_query, j), '''');
                if k = 0 then
                    doubt := 'an unterminated string';
                    j := n + 1;
                    exit;
                end if;
                if pg_catalog.strpos(pg_catalog.substr(i_query, j, k - 1), '\') > 0 then
                    doubt := 'a backslash in a string not written E''''';
                end if;
                j := j + k - 1;
                exit when pg_catalog.substr(i_query, j + 1, 1) <> '''';
                j := j + 2;  -- '' inside the string
            end loop;
            i := j + 1;
        elsif c = '"' then
            j := i + 1;
            loop
                k := pg_catalog.strpos(pg_catalog.substr(i_query, j), '"');
                if k = 0 then
                    doubt := 'an unterminated quoted name';
                    j := n + 1;
                    exit;
                end if;
                j := j + k - 1;
                exit when pg_catalog.substr(i_query, j + 1, 1) <> '"';
                j := j + 2;  -- "" inside the identifier
            end loop;
            i := j + 1;
        elsif c = '-' and nxt = '-' then
            j := pg_catalog.strpos(pg_catalog.substr(i_query, i), E'\n');
            i := case when j = 0 then n + 1 else i + j end;
        elsif c = '/' and nxt = '*' then
            depth := 1;
            i := i + 2;
            while i <= n and depth > 0 loop
                if ch[i] = '/' and ch[i + 1] is not distinct from '*' then
                    depth := depth + 1;
                    i := i + 2;
                elsif ch[i] = '*' and ch[i + 1] is not distinct from '/' then
                    depth := depth - 1;
                    i := i + 2;
                else
                    i := i + 1;
                end if;
            end loop;
            if depth > 0 then
                doubt := 'an unterminated comment';
            end if;
        elsif c ~ '[0-9]' and nxt = '$' then
            doubt := 'a $ right after a number';
            i := i + 1;
        elsif c = '$' and nxt ~ '[0-9]' then
            -- A parameter ($1): no dollar quote.
            i := i + 2;
        elsif c = '$' then
            -- Reached only at a token's start: a dollar quote if a whole tag follows
            -- (dolq_start, then dolq_cont: an identifier's characters but '$').
            j := i + 1;
            if j <= n and (ch[j] ~ '[A-Za-z_]' or pg_catalog.ascii(ch[j]) > 127) then
                j := j + 1;
                while j <= n and (ch[j] ~ '[A-Za-z0-9_]' or pg_catalog.ascii(ch[j]) > 127) loop
                    j := j + 1;
                end loop;
            end if;
            if j > n or ch[j] <> '$' then
                i := i + 1;
            else
                tag := pg_catalog.substr(i_query, i, j - i + 1);
                k := pg_catalog.strpos(pg_catalog.substr(i_query, j + 1), tag);
                if k = 0 then
                    doubt := 'an unterminated dollar quote';
                    i := n + 1;
                else
                    i := j + k + pg_catalog.length(tag);
                end if;
            end if;
        elsif c = ';' then
            part := pg_catalog.btrim(pg_catalog.substr(i_query, start, i - start), E' \t\r\n\f');
            if part <> '' then
                out := out || part;
            end if;
            i := i + 1;
            start := i;
        else
            -- Digits, operators, punctuation, blank space: one character at a time, so
            -- that a '$' after a number still starts a dollar quote, as it does there.
            i := i + 1;
        end if;
    end loop;
    if doubt is not null then
        raise exception 'pgferry: capture-ddl cannot be sure how the server split this query string (%); run the DDL as a statement of its own, or turn capture-ddl off and use execute',
            doubt;
    end if;
    part := pg_catalog.btrim(pg_catalog.substr(i_query, start), E' \t\r\n\f');
    if part <> '' then
        out := out || part;
    end if;
    return out;
end;
$$;
