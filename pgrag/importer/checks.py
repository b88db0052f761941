"""The checks of one imported row's values: each returns why a value cannot be stored, or None.

A source is untrusted input (a file from a tenant, a table another application wrote): any
value may be of the wrong type, too large, or text PostgreSQL does not store (a NUL character,
a lone UTF-16 surrogate). Each check names the field and what to do, and refuses the row alone
(:mod:`.mapping`); nothing a row holds stops the import of the others.

Bounds: a chunk's text at most ``MAX_CHUNK_CHARS`` characters (no embedding model reads more
than about 8,000 tokens, some 32,000 characters: a longer "chunk" is a whole document that was
never split, and would cost seconds and gigabytes to index as one); metadata at most
``MAX_METADATA_BYTES`` as JSON, the bound pgrag's SQL puts on a document's metadata
(``pgrag.check_document_fields``).
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np

MAX_CHUNK_CHARS = 100_000
MAX_METADATA_BYTES = 10_000
MAX_PAGE = 2**31 - 1  # pgrag.chunks.page is an integer
NUMBER_TYPES = {float, int}  # a JSON reader's numbers (not bool, an int subclass)


def kind_of(value: Any) -> str:
    """A JSON reader's name for the type of ``value``."""
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, (list, tuple, np.ndarray)):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return "text" if isinstance(value, str) else type(value).__name__


def text_problem(field: str, value: str) -> str | None:
    """Why PostgreSQL cannot store ``value`` as text: a NUL character, or a lone surrogate
    (a JSON ``\\ud800`` escape that is not half of a pair), which is not Unicode."""
    if "\x00" in value:
        return f"{field} holds a NUL character"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return f"{field} holds a lone surrogate (not valid Unicode)"
    return None


def content_problem(content: Any) -> str | None:
    """Why ``content`` is not a chunk's text."""
    if not isinstance(content, str):
        return "empty content" if content is None else f"content is {kind_of(content)}, not text"
    if not content.strip():
        return "empty content"
    if len(content) > MAX_CHUNK_CHARS:
        return (
            f"content longer than {MAX_CHUNK_CHARS:,} characters (a whole document, not a chunk): "
            "split it into chunks before exporting, or ingest the document with pgrag ingest"
        )
    return text_problem("content", content)


def _strings(value: Any) -> list[str]:
    """Every key and string value of a JSON value (iteratively: any depth)."""
    found: list[str] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            found.append(item)
        elif isinstance(item, dict):
            found.extend(str(k) for k in item)
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return found


def metadata_problem(metadata: dict[str, Any]) -> str | None:
    """Why ``metadata`` (an object) cannot be a chunk's metadata."""
    return metadata_size_problem(metadata)[1]


def metadata_size_problem(metadata: dict[str, Any]) -> tuple[int, str | None]:
    """The size of ``metadata`` as JSON in bytes (0 when it cannot be written), and why it
    cannot be a chunk's metadata."""
    for text in _strings(metadata):
        problem = text_problem("metadata", text)
        if problem is not None:
            return 0, problem
    try:
        size = len(json.dumps(metadata, ensure_ascii=False, allow_nan=False).encode("utf-8"))
    except ValueError:  # NaN or infinity: JSON has neither, nor has jsonb
        return 0, "metadata holds NaN or infinity, which JSON cannot store"
    except RecursionError:
        return 0, "metadata is nested too deeply"
    except TypeError as exc:  # e.g. bytes from a Parquet column
        return 0, f"metadata holds a value JSON cannot store ({exc})"
    if size > MAX_METADATA_BYTES:
        return size, f"metadata larger than {MAX_METADATA_BYTES:,} bytes as JSON ({size:,})"
    return size, None


def _number_problem(values: list[Any]) -> str | None:
    """Why a list is not a list of numbers (booleans and numeric text are not numbers)."""
    for value in values:
        if value is None:
            return "embedding holds a null"
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return f"embedding holds {kind_of(value)}, not only numbers"
    return None


def as_float32(embedding: Any) -> Any:
    """A list of numbers as float32 (what pgvector stores: a quarter of the memory of Python
    floats, as a row waits to be sorted); anything else as it is, for
    :func:`embedding_vector` to say what is wrong. The set of the values' types tells numbers
    from booleans in C, where ``isinstance`` per value took most of a file's read."""
    if isinstance(embedding, list) and embedding and set(map(type, embedding)) <= NUMBER_TYPES:
        with np.errstate(over="ignore"):  # beyond float4: infinity, refused when checked
            return np.asarray(embedding, dtype=np.float32)
    return embedding


def embedding_vector(embedding: Any) -> tuple[np.ndarray | None, str | None]:
    """``embedding`` as float32 values, or why it is not an embedding pgvector can search."""
    if embedding is None:
        return None, "no embedding"
    if isinstance(embedding, (list, tuple)):
        problem = _number_problem(list(embedding))
        if problem is not None:
            return None, problem
    elif not (isinstance(embedding, np.ndarray) and embedding.dtype.kind in "fiu"):
        return None, f"embedding is {kind_of(embedding)}, not a list of numbers"
    with np.errstate(over="ignore", invalid="ignore"):  # beyond float4: infinity, refused
        vector = np.asarray(embedding, dtype=np.float32)
    if vector.ndim != 1 or vector.size == 0:
        return None, "embedding is not a flat list of numbers"
    if not np.all(np.isfinite(vector)):
        return None, "embedding holds NaN, infinity or a number beyond 4-byte floats"
    if not np.any(vector):
        return None, "embedding is all zeros (it has no direction for cosine distance)"
    return vector, None


def whole_number(value: Any) -> int | None:
    """``value`` as an integer when it is a whole number (or digits), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.isascii() and value.isdigit():
        return int(value)
    return None


def page_problem(page: Any) -> str | None:
    """Why a row's own ``page`` (when given) is not a page number."""
    number = whole_number(page)
    if number is None or not 0 <= number <= MAX_PAGE:
        return (
            f"page is {kind_of(page)} {str(page)[:40]!r}, not a page number: "
            "give a whole number or leave it out"
        )
    return None


def label_problem(field: str, value: Any) -> str | None:
    """Why a row's own ``title``, ``source_uri`` or ``id`` (when given) is neither text nor a
    number."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"{field} is {value}, not text"
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        return f"{field} is {kind_of(value)}, not text"
    return text_problem(field, value) if isinstance(value, str) else None
