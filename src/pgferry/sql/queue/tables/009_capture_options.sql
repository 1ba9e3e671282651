-- Queue version 9: capture options (add-table --trigger-flags / --trigger-arg).
--
-- A capture spec (jsonb, made and checked by pgferry's node/capture_spec.py; docs/events.md)
-- says what a table's row trigger queues:
--   key       the key columns named in ev_type ([] = the table has no key: every column
--             identifies a row, and an UPDATE carries its old row in ev_extra2)
--   ignore    columns left out of the row images; an UPDATE changing only them queues nothing
--   when      a boolean expression on the row: only rows where it holds are queued (an
--             UPDATE of a row leaving it queues a D, one entering it an I)
--   backup    an UPDATE also carries the old row in ev_extra2
--   ev_extra2 / ev_extra3 / ev_extra4   expressions on the row, stored as text
--   ops       'IUD' or a part of it: the operations captured
--   before, skip   a BEFORE trigger; skip also cancels the local write (queue-only table)
--
-- A spec with a key and none of the options is captured by the plain function of its key
-- list (001_9, unchanged: one cached-plan INSERT per row).  Any other spec gets a function
-- generated from a template: the body with @@ferry_event_table@@, @@ferry_part@@ and
-- @@ferry_event_seq@@ where the queue's current rotation table, its partition number and
-- its event sequence go.  The template is stored in capture_function, so every rotation
-- rewrites these functions as it rewrites the plain ones (refresh_capture_functions), and
-- tables whose templates are the same text share one function.  Templated functions that
-- no trigger uses any more are dropped when triggers are attached or detached.

alter table ferry_queue.capture_function add column cf_template text;

alter table ferry_queue.capture_function drop constraint capture_function_pkey;

create unique index capture_function_plain
    on ferry_queue.capture_function (cf_queue, cf_pkey) where cf_template is null;

create unique index capture_function_templated
    on ferry_queue.capture_function (cf_queue, md5(cf_template)) where cf_template is not null;
