-- ferry_copy: the keys a copy drops for the load (pipeline/copy/keys.py).
--
-- A copy into a table it has just emptied drops, besides the secondary indexes, the index
-- of its primary key and of its unique constraints where that is safe, and builds them
-- again once the rows are in.  saved_index now keeps those too: constraint_type is 'p'
-- (primary key) or 'u' (unique) for a constraint's index, whose index_name is the
-- constraint's name, and NULL for a secondary index; key_columns the constraint's columns
-- in key order (while the primary key is dropped, the table's key is still that one:
-- registry/catalog.py primary_key reads it here).  A key is rebuilt as its unique index
-- (index_def) and then ADD CONSTRAINT index_name ... USING INDEX.

alter table ferry_copy.saved_index
    add column constraint_type "char" check (constraint_type in ('p', 'u')),
    add column key_columns text[];
