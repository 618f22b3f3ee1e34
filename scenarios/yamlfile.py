"""Reading a YAML mapping from a file with one-line errors (scenario files, run configs).

A key given twice in one mapping (at any depth) is refused: PyYAML keeps the last silently
(YAML 1.2 says keys are unique, https://yaml.org/spec/1.2.2/#3211-nodes)."""
from __future__ import annotations

from pathlib import Path


class DuplicateKeyError(ValueError):
    """A mapping names one key twice: `line` (1-based) of the second, `key` the key."""

    def __init__(self, key, line: int, first: int):
        self.key, self.line, self.first = key, line, first
        super().__init__(f"key {key!r} given twice (also on line {first}); expected each key once")


def _loader():
    import yaml

    class UniqueKeyLoader(yaml.SafeLoader):
        def construct_mapping(self, node, deep=False):
            if isinstance(node, yaml.MappingNode):
                seen: dict = {}
                for key_node, _ in node.value:  # the keys written here (a merged << key may be overridden)
                    if key_node.tag == "tag:yaml.org,2002:merge":
                        continue
                    key = self.construct_object(key_node, deep=True)
                    line = key_node.start_mark.line + 1
                    try:
                        if key in seen:
                            raise DuplicateKeyError(key, line, seen[key])
                        seen[key] = line
                    except TypeError:  # an unhashable key: SafeLoader's own error follows
                        pass
            return super().construct_mapping(node, deep)

    return UniqueKeyLoader


def load_yaml(text: str):
    """`yaml.safe_load` that refuses a key given twice in one mapping (DuplicateKeyError)."""
    import yaml

    return yaml.load(text, Loader=_loader())  # noqa: S506 -- a SafeLoader subclass


def read_mapping(path, what: str, allow_empty: bool = True) -> dict:
    """The mapping in YAML file `path` ({} for an empty file, refused unless `allow_empty`).
    ValueError, one line naming the file (and the line of a syntax error or a duplicate key)
    and `what` was expected; FileNotFoundError and other OSErrors pass through for the caller
    to word."""
    import yaml

    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{p}: cannot read: not UTF-8 text (byte {e.start}); expected {what}") from None
    try:
        doc = load_yaml(text)
    except DuplicateKeyError as e:
        raise ValueError(f"{p}:{e.line}: {e}") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        raise ValueError(f"{p}{line}: not valid YAML ({getattr(e, 'problem', None) or e}); expected {what}") from None
    except RecursionError:
        raise ValueError(f"{p}: not valid YAML (too deeply nested); expected {what}") from None
    if doc is None:
        if not allow_empty:
            raise ValueError(f"{p}: top level: the file is empty (no keys); expected {what} (a mapping of keys)")
        return {}
    if not isinstance(doc, dict):
        raise ValueError(f"{p}: top level: expected {what} (a mapping of keys), got {type(doc).__name__}")
    return doc


__all__ = ["read_mapping", "load_yaml", "DuplicateKeyError"]
