"""The archive actor: Phase 2 of each archive (overview, checkpoints, memories), `.done` last."""
