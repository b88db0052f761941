"""YAML front matter, parsed within bounds: no aliases, a nesting cap, a size cap, JSON values.

Front matter is metadata a tenant may write, so it is read as untrusted input. Before anything
is built, the YAML event stream (iterative, linear in the text) is checked: an alias (``*name``)
is refused, because a few hundred bytes of aliases expand to megabytes; so is nesting deeper
than FRONT_MATTER_MAX_DEPTH, which would exhaust the recursion of the builder. Only then are
values built, with a loader that keeps dates as the text written (a date that is not a date,
``2024-13-45``, is just text) and integers beyond 64 bits as text. The result is JSON: dates
and other non-JSON values become strings, NaN and infinities their YAML spelling, and the
serialized mapping must fit METADATA_MAX_BYTES.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import math
import re
from typing import Any

import yaml

from pgrag.errors import ExtractionError

METADATA_MAX_BYTES = 64 * 1024  # front matter text and its JSON, each
FRONT_MATTER_MAX_DEPTH = 32  # nested mappings and sequences
INT64 = 1 << 63


class FrontMatterError(ExtractionError):
    """Front matter that pgrag refuses to read (aliases, too deep, too large, unbuildable)."""


class _Loader(yaml.SafeLoader):  # type: ignore[misc]
    """The safe loader without the timestamp resolver and with bounded integers."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def _construct_int(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> int | str:
    text = str(loader.construct_scalar(node))
    digits = re.sub(r"[^0-9a-fA-F]", "", text)
    if len(digits) > 20:  # beyond 64 bits whatever the base: keep the text
        return text
    value = loader.construct_yaml_int(node)
    return value if -INT64 <= value < INT64 else text


def _construct_float(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> float | str:
    value = loader.construct_yaml_float(node)
    return value if math.isfinite(value) else str(loader.construct_scalar(node))


def _construct_timestamp(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> str:
    return str(loader.construct_scalar(node))  # an explicit !!timestamp stays the text written


_Loader.add_constructor("tag:yaml.org,2002:int", _construct_int)
_Loader.add_constructor("tag:yaml.org,2002:float", _construct_float)
_Loader.add_constructor("tag:yaml.org,2002:timestamp", _construct_timestamp)


def _check_events(text: str) -> None:
    """Refuse aliases and deep nesting from the event stream, before building anything."""
    depth = 0
    for event in yaml.parse(text, Loader=_Loader):
        if isinstance(event, yaml.AliasEvent):
            raise FrontMatterError(
                "front matter uses a YAML alias (*name), which pgrag does not expand: "
                "write the value out in full"
            )
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > FRONT_MATTER_MAX_DEPTH:
                raise FrontMatterError(
                    f"front matter is nested more than {FRONT_MATTER_MAX_DEPTH} levels deep: "
                    "flatten it"
                )
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1


def _key(value: Any) -> str:
    if isinstance(value, str):
        return value
    if value is None or isinstance(value, bool | int | float):
        return json.dumps(value)
    return json.dumps(_jsonable(value), sort_keys=True)


def _jsonable(value: Any) -> Any:
    """``value`` as JSON can hold it (the depth is already bounded)."""
    if value is None or isinstance(value, str | bool | int | float):
        return value
    if isinstance(value, dt.date):  # datetime included
        return value.isoformat()
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, dict):
        return {_key(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, set):
        return sorted(_key(v) for v in value)
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return str(value)


def parse_front_matter(text: str) -> dict[str, Any] | None:
    """The mapping ``text`` holds as JSON-ready values; None when it is not a YAML mapping.

    Raise :class:`FrontMatterError` for YAML that is a mapping pgrag refuses (an alias, too
    deep, too large, a value that cannot be built).
    """
    if not text.strip():
        return {}
    if len(text.encode("utf-8")) > METADATA_MAX_BYTES:
        raise FrontMatterError(
            f"front matter is larger than {METADATA_MAX_BYTES // 1024} KiB: move the data "
            "out of the front matter"
        )
    try:
        _check_events(text)
    except yaml.YAMLError:
        return None  # not YAML: the lines are text
    try:
        data = yaml.load(text, Loader=_Loader)  # a safe loader, its events checked above
    except (yaml.YAMLError, ValueError, TypeError, OverflowError, RecursionError) as exc:
        reason = " ".join(str(exc).split())[:200] or type(exc).__name__
        raise FrontMatterError(
            f"front matter has a value that cannot be read ({reason}): fix or quote it"
        ) from exc
    if not isinstance(data, dict):
        return None
    result: dict[str, Any] = _jsonable(data)
    size = len(json.dumps(result, ensure_ascii=False, allow_nan=False).encode("utf-8"))
    if size > METADATA_MAX_BYTES:
        raise FrontMatterError(
            f"front matter is larger than {METADATA_MAX_BYTES // 1024} KiB as JSON: move the "
            "data out of the front matter"
        )
    return result
