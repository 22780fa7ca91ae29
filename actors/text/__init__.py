"""Text helpers several actors share: extractive reduction, tag validation, model JSON, query planning.

Imports no actor."""
