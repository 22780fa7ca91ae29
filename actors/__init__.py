"""Actors: one package each, pure cores beside one thin module of handlers. No actor imports another."""
