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
--     The statement must be one ALTER TABLE, COMMENT ON TABLE / COLUMN, CREATE [UNIQUE]
--     INDEX or DROP INDEX that names the table (a keyword check: the server's parser does
--     not run here; every subscriber parses the statement again before it runs it), and
--     an ALTER TABLE may not hand out what the table's rights do not cover on a subscriber:
--     OWNER TO, ENABLE / DISABLE TRIGGER, RULE or ROW LEVEL SECURITY, ATTACH / DETACH
--     PARTITION, [NO] INHERIT, [NOT] OF (the words anywhere in the text, a constraint's NO
--     INHERIT too).  Anything else fails the transaction with one line.
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
language plpgsql stable set search_path = pg_catalog, pg_temp as $$
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
        when 'COMMENT' then '^comment\s+on\s+(table|column)\M'
    end;
begin
    if coalesce(i_outer, '') = '' then
        v_text := pg_catalog.current_query();
    elsif i_outer operator(pg_catalog.~~) 'SQL statement "%' then
        v_text := pg_catalog.substr(i_outer, pg_catalog.length('SQL statement "') + 1);
        v_end := pg_catalog.strpos(v_text, E'"\nPL/pgSQL function ');
        if v_end = 0 then
            raise exception 'pgferry: % on replicated table % ran inside a function that capture-ddl cannot read; run it as a plain statement, or turn capture-ddl off and use execute',
                i_tag, i_what;
        end if;
        v_text := pg_catalog.substr(v_text, 1, v_end - 1);
    else
        raise exception 'pgferry: % on replicated table % ran inside %; capture-ddl cannot tell which statement to replicate: run it as a plain statement (or from PL/pgSQL), or turn capture-ddl off and use execute',
            i_tag, i_what, pg_catalog.split_part(i_outer, E'\n', 1);
    end if;
    v_stmts := ferry.ddl_statements(coalesce(v_text, ''));
    foreach v_stmt in array v_stmts loop
        -- The statement's head: leading comments and blank space left out.
        v_head := pg_catalog.lower(pg_catalog.regexp_replace(v_stmt, '^(\s+|--[^\n]*(\n|$)|/\*([^*]|\*[^/])*\*/)*', ''));
        continue when v_head !~ v_tag_re;
        v_named := false;
        foreach v_word in array i_words loop
            if pg_catalog.strpos(pg_catalog.lower(v_stmt), pg_catalog.lower(v_word)) > 0
               and v_stmt ~* ('(^|[^[:alnum:]_$])' || pg_catalog.regexp_replace(v_word, '([^[:alnum:]_ ])', '\\\1', 'g')
                              || '($|[^[:alnum:]_$])') then
                v_named := true;
            end if;
        end loop;
        -- Only a statement that names the table, even when it is the query's only one.
        if v_named then
            v_found := v_found || v_stmt;
        end if;
    end loop;
    if pg_catalog.cardinality(v_found) <> 1 then
        raise exception 'pgferry: cannot tell which statement of this query changed replicated table % (% found); send the % as a statement of its own',
            i_what, pg_catalog.cardinality(v_found), i_tag;
    end if;
    v_stmt := v_found[1];
    if i_tag = 'ALTER TABLE' then
        -- Strict: these words anywhere in the text refuse it, strings and names included.
        v_word := pg_catalog.substring(pg_catalog.lower(v_stmt),
            '(\mowner\s+to\M|\m(enable|disable)\s+((always|replica)\s+)?(trigger|rule)\M|\m(enable|disable|force)\s+row\s+level\s+security\M|\m(attach|detach)\s+partition\M|\m(no\s+)?inherit\M|\m(not\s+)?of\M)');
        if v_word is not null then
            raise exception 'pgferry: ALTER TABLE on replicated table % refused by capture-ddl (%): it would change rights, triggers, rules or other tables on every subscriber; run the DDL with capture-ddl off on each node, or through execute',
                i_what, pg_catalog.regexp_replace(v_word, '\s+', ' ', 'g');
        end if;
    end if;
    if i_tag in ('CREATE INDEX', 'DROP INDEX') then
        v_stmt := pg_catalog.regexp_replace(v_stmt, '^((\s|--[^\n]*\n|/\*([^*]|\*[^/])*\*/)*(create\s+(unique\s+)?|drop\s+)index\s+)concurrently\M\s*', '\1', 'i');
    end if;
    return v_stmt;
end;
$$;
