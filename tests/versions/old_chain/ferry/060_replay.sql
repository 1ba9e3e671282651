-- ferry: working storage of the batch replay.
--
-- replay_stage holds the final row image per key of the batch being applied (written by
-- the Spark tasks with COPY, read by the one transaction that applies the batch).  Rows are
-- keyed by (consumer, batch, part): a task deletes its own part before writing it, so a task
-- that Spark runs again cannot double anything.  UNLOGGED because a crash only loses rows of
-- an unfinished batch, which is read again from the provider anyway.

create unlogged table ferry.replay_stage (
    consumer_name   text    not null,
    batch_id        bigint  not null,
    part            integer not null,
    ev_id           bigint  not null,
    table_name      text    not null,           -- queue-visible source name
    op              "char"  not null,           -- 'U' upsert, 'D' delete by key, 'R' truncate
    row_key         text,
    row_data        text
);

create index replay_stage_batch_idx on ferry.replay_stage (consumer_name, batch_id, table_name);

-- Sequences never move backwards on a subscriber.
create function ferry.seq_advance(seq regclass, value bigint) returns bigint
language plpgsql as $$
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
