"""The session actor: live messages, commit Phase 1, context from directory state."""
