"""Reading a YAML mapping from a file with one-line errors (scenario files, run configs)."""
from __future__ import annotations

from pathlib import Path


def read_mapping(path, what: str) -> dict:
    """The mapping in YAML file `path` ({} for an empty file). ValueError, one line naming the
    file (and the line of a syntax error) and `what` was expected; FileNotFoundError and other
    OSErrors pass through for the caller to word."""
    import yaml

    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{p}: cannot read: not UTF-8 text (byte {e.start}); expected {what}") from None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        raise ValueError(f"{p}{line}: not valid YAML ({getattr(e, 'problem', None) or e}); expected {what}") from None
    except RecursionError:
        raise ValueError(f"{p}: not valid YAML (too deeply nested); expected {what}") from None
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise ValueError(f"{p}: top level: expected {what} (a mapping of keys), got {type(doc).__name__}")
    return doc


__all__ = ["read_mapping"]
