"""The indexer: writes to the tree, L0/L1 generation, embedding, index rows (published to the index log)."""
