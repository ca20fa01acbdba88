"""Reading a scenario or suite file: bounded first, composed with PyYAML's SafeLoader, with the line of every path.

The bounds (``MAX_FILE_BYTES``, ``MAX_DEPTH`` and the rest) are checked on the raw text and tokens before
composing, so that no file ends in a RecursionError or minutes of work. SafeLoader gives data only, never
``exec``/``eval``. The line index records the line of every key and list item, so each error names its line.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from testbed.scenario.errors import DataPath, Problem, ScenarioError, _display_path

# Bounds on a scenario or suite file: far above any real one (the shipped files are at most about 2 KiB,
# 54 lines, 263 values and 7 levels deep), low enough that no file exhausts memory, CPU time or Python's
# recursion limit (PyYAML's composer, the line index, deep copies and validation recurse once per level).
MAX_FILE_BYTES = 1 << 20
MAX_FILE_LINES = 10_000
#: lists and mappings inside one another
MAX_DEPTH = 64
#: keys, items and collections, an alias counting as a copy of what it names (or a few lines of
#: aliases of aliases would stand for billions of values)
MAX_VALUES = 50_000


def read_yaml_text(path: Path) -> str:
    """The text of a scenario or suite file; reads no further than the size bound (a huge file, or a
    device that never ends, is refused without being read whole)."""
    source = str(path)
    try:
        with Path(path).open("rb") as file:
            raw = file.read(MAX_FILE_BYTES + 1)
    except OSError as error:
        raise ScenarioError(source, [Problem(None, "", f"cannot read the file: {error.strerror}")]) from None
    if len(raw) > MAX_FILE_BYTES:
        raise ScenarioError(source, [Problem(None, "", _too_large())])
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        line = raw.count(b"\n", 0, error.start) + 1
        byte = f"0x{raw[error.start]:02x}"
        raise ScenarioError(
            source, [Problem(line, "", f"byte {byte} is not UTF-8 text; save the file as UTF-8")]
        ) from None


def compose_yaml(text: str, source: str) -> tuple[Any, dict[DataPath, int], list[Problem]]:
    """The data of a YAML file, the line of every path in it, and its duplicate keys.

    Raises :class:`ScenarioError` for text that is not YAML (or not only data) or that is larger,
    longer or deeper than the bounds.
    """
    _check_text_bounds(text, source)
    loader = yaml.SafeLoader(text)
    lines: dict[DataPath, int] = {(): 1}
    problems: list[Problem] = []
    try:
        node = loader.get_single_node()
        if node is not None:
            _check_node_bounds(node, source)
            # Before constructing: construction flattens '<<' merges into the node tree.
            _index_lines(node, (), lines, problems, yaml.SafeLoader(""))
        data = loader.construct_document(node) if node is not None else None
    except yaml.YAMLError as error:
        raise ScenarioError(source, [_yaml_problem(error)]) from None
    except RecursionError:
        # The bounds keep every recursion far below Python's limit; should one still get there
        # (a lower limit, a path the bounds miss), the file is refused as clearly.
        raise ScenarioError(source, [Problem(None, "", _too_deep())]) from None
    finally:
        loader.dispose()
    return data, lines, problems


def _check_text_bounds(text: str, source: str) -> None:
    """Size, lines, depth and values of the raw text: checked before composing, which recurses once
    per level (5,000 nested brackets would end in a RecursionError) and takes seconds per 100,000 values."""
    if len(text) > MAX_FILE_BYTES:
        problem = Problem(None, "", _too_large())
    elif (breaks := text.count("\n")) > MAX_FILE_LINES:
        message = f"the file has {breaks} lines; a scenario or suite file may have at most {MAX_FILE_LINES}"
        problem = Problem(MAX_FILE_LINES + 1, "", message)
    else:
        problem = _scan_problem(text)
    if problem is not None:
        raise ScenarioError(source, [problem])


#: tokens that open and close a list or mapping. A list at its key's indent ('key:' then '- item'
#: lines) has no start token, but it sits in a mapping that has one: the scan sees at least half of
#: the real depth, enough to keep the composer's recursion short; the composed nodes are checked exactly.
_OPENS = (
    yaml.BlockMappingStartToken,
    yaml.BlockSequenceStartToken,
    yaml.FlowMappingStartToken,
    yaml.FlowSequenceStartToken,
)
_CLOSES = (yaml.BlockEndToken, yaml.FlowMappingEndToken, yaml.FlowSequenceEndToken)
_VALUE_TOKENS = (yaml.ScalarToken, yaml.AliasToken, *_OPENS)
#: libyaml's scanner when PyYAML has it: ten times faster on a file at the size bound
_SCANNER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _scan_problem(text: str) -> Problem | None:
    """Too deep or too many values, found in the token stream (the scanner keeps no stack)."""
    depth = values = 0
    try:
        for token in yaml.scan(text, Loader=_SCANNER):
            depth += isinstance(token, _OPENS) - isinstance(token, _CLOSES)
            values += isinstance(token, _VALUE_TOKENS)
            if depth > MAX_DEPTH or values > MAX_VALUES:
                return Problem(token.start_mark.line + 1, "", _too_deep() if depth > MAX_DEPTH else _too_many())
    except yaml.YAMLError:
        pass  # a syntax error: composing reports it, in PyYAML's words and with its line
    return None


def _check_node_bounds(root: yaml.Node, source: str) -> None:
    """The bounds on the composed document, where every alias stands for a copy of what it names."""
    measured = _measure(root)
    if measured is None:
        message = (
            "an alias (*name) is used inside the list or mapping that its anchor (&name) marks, so the "
            "data would be infinitely deep; an alias may only repeat a value that is complete before it"
        )
    elif measured[0] > MAX_VALUES:
        message = _too_many()
    elif measured[1] > MAX_DEPTH:
        message = _too_deep()
    else:
        return
    raise ScenarioError(source, [Problem(None, "", message)])


def _measure(root: yaml.Node) -> tuple[int, int] | None:
    """Values and depth of the document with every alias expanded; None when a collection holds itself.

    Iterative, and each node is measured once (an alias shares its anchor's node), so the cost is the
    number of nodes written, however deep or however many times aliases multiply them.
    """
    measured: dict[int, tuple[int, int]] = {}
    open_ids: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        children = _child_nodes(node)
        if children_done:
            sizes = [measured[id(child)] for child in children]
            measured[id(node)] = (1 + sum(v for v, _ in sizes), 1 + max((d for _, d in sizes), default=0))
            open_ids.discard(id(node))
        elif id(node) in open_ids:
            return None  # reached again from inside itself: '&a [*a]'
        elif not isinstance(node, yaml.CollectionNode):
            measured[id(node)] = (1, 0)
        elif id(node) not in measured:
            open_ids.add(id(node))
            stack.append((node, True))
            stack.extend((child, False) for child in children)
    return measured[id(root)]


def _child_nodes(node: yaml.Node) -> list[yaml.Node]:
    """The keys and values of a mapping, the items of a list; none for a scalar."""
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _too_large() -> str:
    size = f"{MAX_FILE_BYTES >> 20} MiB"
    return f"the file is larger than {size}; a scenario or suite file may be at most {size} (shipped ones: a few KiB)"


def _too_deep() -> str:
    return (
        f"lists and mappings are nested more than {MAX_DEPTH} levels deep; a scenario or suite file may nest "
        f"at most {MAX_DEPTH}"
    )


def _too_many() -> str:
    return (
        f"the file holds more than {MAX_VALUES} values (keys, items and collections; an alias counts as a copy "
        f"of what it names); a scenario or suite file may hold at most {MAX_VALUES}"
    )


def _yaml_problem(error: yaml.YAMLError) -> Problem:
    mark = getattr(error, "problem_mark", None) or getattr(error, "context_mark", None)
    problem, context = getattr(error, "problem", None), getattr(error, "context", None)
    detail = f"{problem} ({context})" if problem and context else problem or context or str(error)
    column = f" at column {mark.column + 1}" if mark is not None else ""
    # A constructor error is well-formed YAML we refuse (e.g. a !!python tag), not a syntax error.
    kind = "unsupported YAML" if isinstance(error, yaml.constructor.ConstructorError) else "YAML syntax error"
    return Problem(mark.line + 1 if mark is not None else None, "", f"{kind}{column}: {detail}")


def _index_lines(
    node: yaml.Node,
    path: DataPath,
    lines: dict[DataPath, int],
    problems: list[Problem],
    keys: yaml.SafeLoader,
) -> None:
    """Record the line of every key and list item; report duplicate keys (PyYAML keeps the last silently)."""
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge" or not isinstance(key_node, yaml.ScalarNode):
                continue  # entries merged in with '<<' fall back to the line of the mapping that holds them
            key_path = (*path, keys.construct_object(key_node))
            line = key_node.start_mark.line + 1
            if key_path in lines:
                where = _display_path(key_path)
                problems.append(Problem(line, where, f"duplicate key (first given on line {lines[key_path]})"))
            lines.setdefault(key_path, line)
            _index_lines(value_node, key_path, lines, problems, keys)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            lines[(*path, index)] = item.start_mark.line + 1
            _index_lines(item, (*path, index), lines, problems, keys)


def _line_of(path: DataPath, lines: Mapping[DataPath, int]) -> int | None:
    """The line of ``path``, or of its nearest parent that the file spells out (e.g. for a missing field)."""
    for end in range(len(path), -1, -1):
        if path[:end] in lines:
            return lines[path[:end]]
    return None
