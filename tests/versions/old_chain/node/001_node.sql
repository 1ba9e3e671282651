-- ferry_node: cascade membership and per-node state.
--
-- Every node of a queue's cascade (root, branch, leaf) holds these tables in its own
-- database.  node_location is the member list, copied to every node; node_info describes
-- the local node; subscriber lists who reads from this node's queue; local_state is the
-- position of each worker/consumer that applies data into this database.

create schema if not exists ferry_node;

create table ferry_node.node_location (
    queue_name      text    not null,
    node_name       text    not null,
    node_location   text    not null,          -- public connect string (may hold secrets: never print raw)
    dead            boolean not null default false,
    primary key (queue_name, node_name)
);

create table ferry_node.node_info (
    queue_name      text    primary key,
    node_type       text    not null check (node_type in ('root', 'branch', 'leaf')),
    node_name       text    not null,
    worker_name     text    not null,           -- job_name of the worker that serves this node
    combined_queue  text,
    node_attrs      text,
    created_at      timestamptz not null default now(),
    foreign key (queue_name, node_name) references ferry_node.node_location
);

-- Nodes that consume this node's queue (branches and leaves below us).
create table ferry_node.subscriber_info (
    queue_name      text    not null references ferry_node.node_info on delete cascade,
    subscriber_node text    not null,
    worker_name     text    not null,
    watermark_tick  bigint,                     -- lowest tick the subscriber may still need
    created_at      timestamptz not null default now(),
    primary key (queue_name, subscriber_node)
);

-- Position and health of the worker applying into this database.
create table ferry_node.local_state (
    queue_name      text    not null references ferry_node.node_info on delete cascade,
    consumer_name   text    not null,
    provider_node   text,                       -- NULL on the root
    last_tick_id    bigint,                     -- last tick applied here (exactly-once marker)
    last_tick_time  timestamptz,                -- provider's time of that tick (for lag)
    paused          boolean not null default false,
    uptodate        boolean not null default true,
    cur_error       text,                       -- last error, shown by status (ERR: ...)
    error_time      timestamptz,
    last_seen       timestamptz,                -- worker heartbeat
    primary key (queue_name, consumer_name)
);
