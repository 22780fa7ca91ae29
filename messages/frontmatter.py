"""A Markdown file's YAML frontmatter (a SKILL.md's `name` and `description`), part of the skills
contract: one reader for the indexer, which refuses a bad one with the reason, and the doors, which
show what they can."""

from __future__ import annotations

from typing import Any

import yaml


def frontmatter(text: str) -> dict[str, Any]:
    """The mapping between the opening `---` and the closing one; ValueError says what is wrong."""
    if not text.startswith("---"):
        raise ValueError("must start with YAML frontmatter (---)")
    end = text.find("\n---", 3)
    if end < 0:
        raise ValueError("frontmatter is not closed")
    try:
        meta = yaml.safe_load(text[3:end])
    except yaml.YAMLError as e:
        raise ValueError(f"frontmatter is not YAML: {e}") from e
    if not isinstance(meta, dict):
        raise ValueError("frontmatter must be a mapping")
    return meta
