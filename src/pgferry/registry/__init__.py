"""What a node replicates: table and sequence entries (``ferry.table_info`` / ``seq_info``),
name patterns, and the catalog reads (columns, keys) that registering needs."""
