-- ferry_copy: the key ranges of a chunked copy (pipeline/copy/chunked.py).
--
-- A chunked copy plans its chunks once, before the first is read, and records them here;
-- each chunk copied is recorded in range_done (range_no = chunk_no) in the transaction that
-- writes its rows.  A copy resumed after a crash reads its chunks back from here (the same
-- boundaries, whatever the table holds now) and copies only those range_done lacks.
-- lower_key / upper_key: the key columns' values as text, cast back to the column types
-- in SQL; NULL means unbounded.  A range is [lower, upper).

create table ferry_copy.chunk (
    copy_id     text    not null,
    dest_table  text    not null,
    chunk_no    integer not null,
    lower_key   text[],
    upper_key   text[],
    primary key (copy_id, dest_table, chunk_no)
);
