"""Skald's wire contract: msgspec Structs for every request, reply and event, subject names and error codes.

Nothing here imports the rest of Skald; every other package imports this one.
"""
