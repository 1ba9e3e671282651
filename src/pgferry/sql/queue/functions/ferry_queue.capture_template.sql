-- ---------------------------------------------------------------------------------------
-- Function: ferry_queue.capture_template(regclass, jsonb)
--
--     The template of the capture function of i_table under i_spec (see
--     ferry_queue.attach_capture_spec.sql for what a spec says).
--
-- Parameters:
--     i_table regclass
--     i_spec jsonb
--
-- Returns:
--     text
-- ---------------------------------------------------------------------------------------
create or replace function ferry_queue.capture_template(i_table regclass, i_spec jsonb) returns text
language plpgsql stable set search_path = pg_catalog, pg_temp as $$
declare
    v_key    text[] := array(select jsonb_array_elements_text(coalesce(i_spec->'key', '[]')));
    v_ignore text[] := array(select jsonb_array_elements_text(coalesce(i_spec->'ignore', '[]')));
    v_when   text := i_spec->>'when';
    v_skip   boolean := coalesce((i_spec->>'skip')::boolean, false);
    v_before boolean := coalesce((i_spec->>'before')::boolean, false) or v_skip;
    -- A keyless table's UPDATE always carries the old row: it is the row's identity.
    v_backup boolean := coalesce((i_spec->>'backup')::boolean, false)
                        or cardinality(v_key) = 0;
    v_cols   text[];  -- the captured columns (every column but the ignored ones)
    v_ign    text[];  -- the ignored columns that exist
    v_from   text;
    v_extra  text[];
    v_upd    text[];
    v_new    text;
    v_old    text;
    v_body   text;
begin
    select array_agg(a.attname::text order by a.attnum)
                filter (where a.attname::text <> all(v_ignore)),
           array_agg(a.attname::text order by a.attnum)
                filter (where a.attname::text = any(v_ignore))
      into v_cols, v_ign
      from pg_attribute a
     where a.attrelid = i_table and a.attnum > 0 and not a.attisdropped;
    if v_cols is null then
        raise exception 'capture of %: no column left to capture', i_table;
    end if;
    if v_when is not null or i_spec->>'ev_extra2' is not null
       or i_spec->>'ev_extra3' is not null or i_spec->>'ev_extra4' is not null then
        select quote_ident(relname) into v_from from pg_class where oid = i_table;
    end if;
    v_new := ferry_queue.capture_image('new', case when v_ign is null then null else v_cols end);
    v_old := ferry_queue.capture_image('old', case when v_ign is null then null else v_cols end);
    v_extra := array[coalesce('(' || (i_spec->>'ev_extra2') || ')::text', 'null'),
                     coalesce('(' || (i_spec->>'ev_extra3') || ')::text', 'null'),
                     coalesce('(' || (i_spec->>'ev_extra4') || ')::text', 'null')];
    -- An UPDATE queued as one U event carries the old row in ev_extra2 with backup.
    v_upd := v_extra;
    if v_backup then
        v_upd[1] := v_old;
    end if;
    v_body := E'begin\n    <<capture>>\n    begin\n'
        || E'        if tg_op = ''INSERT'' then\n            '
        || ferry_queue.capture_insert('I', 'new', v_new, v_extra, v_from, v_when)
        || E'\n        elsif tg_op = ''DELETE'' then\n            '
        || ferry_queue.capture_insert('D', 'old', v_old, v_extra, v_from, v_when)
        || E'\n        else\n';
    if v_when is not null then
        -- The row left the condition: a delete; it entered it: an insert.
        v_body := v_body || format(
            E'            v_old := coalesce((select (%s) from (select old.*) as %s), false);\n'
            '            v_new := coalesce((select (%s) from (select new.*) as %s), false);\n'
            '            if not v_new then\n'
            '                if v_old then\n                    %s\n                end if;\n'
            '                exit capture;\n'
            '            elsif not v_old then\n                %s\n'
            '                exit capture;\n            end if;\n',
            v_when, v_from, v_when, v_from,
            ferry_queue.capture_insert('D', 'old', v_old, v_extra, v_from, null),
            ferry_queue.capture_insert('I', 'new', v_new, v_extra, v_from, null));
    end if;
    if v_ign is not null then
        -- Only ignored columns changed: nothing to queue.  (A change of nothing at all is
        -- queued, as without options.)  Compared by binary image: any type, no operator.
        v_body := v_body || format(
            E'            if %s\n               and not %s then\n'
            '                exit capture;\n            end if;\n',
            ferry_queue.capture_image_eq(v_cols), ferry_queue.capture_image_eq(v_ign));
    end if;
    if cardinality(v_key) > 0 then
        -- Key change: a delete of the old key, then an insert of the new row.
        v_body := v_body || format(
            E'            if not %s then\n                %s\n                %s\n'
            '                exit capture;\n            end if;\n',
            ferry_queue.capture_image_eq(v_key),
            ferry_queue.capture_insert('D', 'old', v_old, v_extra, v_from, null),
            ferry_queue.capture_insert('I', 'new', v_new, v_extra, v_from, null));
    end if;
    v_body := v_body || '            '
        || ferry_queue.capture_insert('U', 'new', v_new, v_upd, v_from, null)
        || E'\n        end if;\n    end capture;\n';
    if v_before and not v_skip then
        v_body := v_body || E'    if tg_op = ''DELETE'' then\n        return old;\n    end if;\n'
                         || E'    return new;\nend;\n';
    else
        -- After the write, or skip: a BEFORE trigger returning null cancels the write.
        v_body := v_body || E'    return null;\nend;\n';
    end if;
    if v_when is not null then
        v_body := E'declare\n    v_old boolean;\n    v_new boolean;\n' || v_body;
    end if;
    return v_body;
end;
$$;
