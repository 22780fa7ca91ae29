"""Persistence: the viking:// tree on disk, the vector index, and the shared text helpers."""
