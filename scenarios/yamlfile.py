"""Reading a YAML mapping from a file with one-line errors (scenario files, run configs).

A key given twice in one mapping (at any depth) is refused: PyYAML keeps the last silently
(YAML 1.2 says keys are unique, https://yaml.org/spec/1.2.2/#3211-nodes)."""
from __future__ import annotations

from pathlib import Path


class DuplicateKeyError(ValueError):
    """A mapping names one key twice: `line` (1-based) of the second, `key` its dotted path."""

    def __init__(self, key: str, line: int, first: int):
        self.key, self.line, self.first = key, line, first
        super().__init__(f"{key}: given twice (also on line {first}); expected each key once")


def _check_unique(node, path: str = "", seen_nodes=None) -> None:
    """DuplicateKeyError for the first key written twice in one mapping of composed `node`
    (merge keys `<<` are not counted: what they bring may be overridden)."""
    import yaml

    seen_nodes = set() if seen_nodes is None else seen_nodes
    if id(node) in seen_nodes:  # an alias of a node already walked (or a recursive one)
        return
    seen_nodes.add(id(node))
    if isinstance(node, yaml.MappingNode):
        lines: dict = {}
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
            name = f"{path}.{key}" if path and key is not None else str(key)
            if key is not None:
                line = key_node.start_mark.line + 1
                if (key_node.tag, key) in lines:
                    raise DuplicateKeyError(name, line, lines[(key_node.tag, key)])
                lines[(key_node.tag, key)] = line
            _check_unique(value_node, name, seen_nodes)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _check_unique(item, f"{path}[{i}]", seen_nodes)


def load_yaml(text: str, fast: bool = False):
    """`yaml.safe_load` that refuses a key given twice in one mapping (DuplicateKeyError).
    `fast`: parse once with libyaml's composer where PyYAML has it (its error texts differ from
    the pure-Python parser's: used for the preset data files, not for scenario files)."""
    import yaml

    if fast:
        node = yaml.compose(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        if node is None:
            return None
        _check_unique(node)
        return yaml.constructor.SafeConstructor().construct_document(node)
    node = yaml.compose(text, Loader=yaml.SafeLoader)
    if node is not None:
        _check_unique(node)
    return yaml.safe_load(text)


def read_mapping(path, what: str, allow_empty: bool = True, fast: bool = False) -> dict:
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
        doc = load_yaml(text, fast)
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
