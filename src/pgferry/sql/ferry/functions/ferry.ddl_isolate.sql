-- ---------------------------------------------------------------------------------------
-- Function: ferry.ddl_isolate(text, text, text[], text)
--
--     The one statement that ran the DDL an event trigger is handling, or an error.
--
--     i_outer is the call stack above the event trigger function (its PG_CONTEXT without its
--     own first line): empty for a statement the client sent, whose text is then in
--     current_query(); 'SQL statement "..."' first for a statement run by a PL/pgSQL
--     function or DO block, whose text is quoted there.  Anything else (an SQL-language
--     function, whose statement text the server does not show) is refused.  The text is
--     split into statements (ferry.ddl_statements); the statement is the only one, or the
--     only one that starts like i_tag and names one of i_words.  A query with several such
--     statements is refused rather than guessed at.  CONCURRENTLY is dropped: subscribers
--     apply the statement inside their apply transaction.
--
-- Parameters:
--     i_outer text
--     i_tag text
--     i_words text[]
--     i_what text
--
-- Returns:
--     text
-- ---------------------------------------------------------------------------------------
create or replace function ferry.ddl_isolate(
    i_outer text, i_tag text, i_words text[], i_what text)
returns text
language plpgsql stable as $$
declare
    v_text   text;
    v_end    integer;
    v_head   text;
    v_stmts  text[];
    v_found  text[] := '{}';
    v_stmt   text;
    v_word   text;
    v_named  boolean;
    v_tag_re text := case i_tag
        when 'ALTER TABLE' then '^alter\s+table\M'
        when 'CREATE INDEX' then '^create\s+(unique\s+)?index\M'
        when 'DROP INDEX' then '^drop\s+index\M'
        when 'COMMENT' then '^comment\s+on\M'
    end;
begin
    if coalesce(i_outer, '') = '' then
        v_text := pg_catalog.current_query();
    elsif i_outer like 'SQL statement "%' then
        v_text := substr(i_outer, length('SQL statement "') + 1);
        v_end := strpos(v_text, E'"\nPL/pgSQL function ');
        if v_end = 0 then
            raise exception 'pgferry: % on replicated table % ran inside a function that capture-ddl cannot read; run it as a plain statement, or turn capture-ddl off and use execute',
                i_tag, i_what;
        end if;
        v_text := substr(v_text, 1, v_end - 1);
    else
        raise exception 'pgferry: % on replicated table % ran inside %; capture-ddl cannot tell which statement to replicate: run it as a plain statement (or from PL/pgSQL), or turn capture-ddl off and use execute',
            i_tag, i_what, split_part(i_outer, E'\n', 1);
    end if;
    v_stmts := ferry.ddl_statements(coalesce(v_text, ''));
    foreach v_stmt in array v_stmts loop
        -- The statement's head: leading comments and blank space left out.
        v_head := lower(regexp_replace(v_stmt, '^(\s+|--[^\n]*(\n|$)|/\*([^*]|\*[^/])*\*/)*', ''));
        continue when v_head !~ v_tag_re;
        v_named := false;
        foreach v_word in array i_words loop
            if strpos(lower(v_stmt), lower(v_word)) > 0
               and v_stmt ~* ('(^|[^[:alnum:]_$])' || regexp_replace(v_word, '([^[:alnum:]_ ])', '\\\1', 'g')
                              || '($|[^[:alnum:]_$])') then
                v_named := true;
            end if;
        end loop;
        if v_named or cardinality(v_stmts) = 1 then
            v_found := v_found || v_stmt;
        end if;
    end loop;
    if cardinality(v_found) <> 1 then
        raise exception 'pgferry: cannot tell which statement of this query changed replicated table % (% found); send the % as a statement of its own',
            i_what, cardinality(v_found), i_tag;
    end if;
    v_stmt := v_found[1];
    if i_tag in ('CREATE INDEX', 'DROP INDEX') then
        v_stmt := regexp_replace(v_stmt, '^((\s|--[^\n]*\n|/\*([^*]|\*[^/])*\*/)*(create\s+(unique\s+)?|drop\s+)index\s+)concurrently\M\s*', '\1', 'i');
    end if;
    return v_stmt;
end;
$$;
