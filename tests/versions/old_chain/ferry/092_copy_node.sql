-- ferry: initial copies read from another node of the cascade (add-table / resync
-- --copy-node, --find-copy-node; the choice is table_attrs.copy_node).
--
-- copy_source: the node the running (or last) copy read from; NULL: the provider.
-- catchup_node: the node whose queue the group's own consumer (copy_consumer) is registered
-- on; NULL: the provider.  A node upstream of the provider serves the catch-up from its own
-- queue: its ticks include every tick of the provider's, so the group meets the main stream
-- at the main stream's tick.  Such a group joins the main stream only once its catch-up has
-- applied a tick of that queue past every transaction of the copy's snapshot (copy_snapshot
-- cleared): the snapshot belongs to that node's transaction ids, which mean nothing to the
-- main stream's events.

alter table ferry.table_info
    add column copy_source  text,
    add column catchup_node text;
