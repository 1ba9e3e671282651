"""Applying a provider's batches to this node: the worker loop, replay of one batch (plan,
read, stage, apply), the copy hand-over, branch forwarding, and the snapshots it posts for
compare and repair."""
