"""Helpers the test scopes share: worker processes, corpus seeding, model stubs, fuzzing strategies."""
