"""Plain-text files as a ``text`` column, as the `datasets` ``text`` builder reads them.

``sample_by`` chooses the rows: ``"line"`` (one row per line, empty lines included),
``"paragraph"`` (blocks separated by a blank line, ``"\\n\\n"``; empty blocks dropped) or
``"document"`` (one row per file). ``keep_linebreaks=True`` keeps each line's ``"\\n"`` in
``"line"`` mode. Newlines are read universally (``"\\r\\n"`` and ``"\\r"`` become ``"\\n"``), as
Python's text mode does. Files are decoded incrementally, chunk by chunk, so a large corpus is
never held whole (except as one ``"document"`` row).

The options travel as one format string (``"text?sample_by=paragraph"``), which also keys the
cache, so the same files read two ways are two cache entries.

>>> import tempfile
>>> path = tempfile.mkdtemp() + "/c.txt"
>>> _ = open(path, "w").write("A first line\\nof a paragraph.\\n\\nA second one.\\n")
>>> fmt = text_format(sample_by="paragraph")
>>> fmt
'text?sample_by=paragraph'
>>> [row for batch in read_text(open(path, "rb"), path, fmt) for row in batch]
['A first line\\nof a paragraph.', 'A second one.\\n']
"""

from __future__ import annotations

import codecs
from collections.abc import Iterator
from typing import Any, BinaryIO
from urllib.parse import parse_qsl, urlencode

TEXT = "text"
SAMPLE_BY = ("line", "paragraph", "document")
CHUNK_BYTES = 10 << 20  # bytes decoded at a time (the `datasets` builder's chunksize)
_DEFAULTS: dict[str, Any] = {
    "sample_by": "line",
    "keep_linebreaks": False,
    "encoding": "utf-8",
    "encoding_errors": "strict",
}


def is_text_format(fmt: str | None) -> bool:
    """Whether ``fmt`` names plain text (with or without options).

    >>> is_text_format("text?sample_by=document"), is_text_format("csv")
    (True, False)
    """
    return fmt is not None and fmt.split("?", 1)[0] == TEXT


def text_format(**options: Any) -> str:
    """The format string for text files read with these options (the `datasets` ``text``
    builder's: ``sample_by``, ``keep_linebreaks``, ``encoding``, ``encoding_errors``); anything
    else is refused, by name.

    >>> text_format(), text_format(sample_by="line", keep_linebreaks=True)
    ('text', 'text?keep_linebreaks=1')
    """
    unknown = sorted(set(options) - set(_DEFAULTS))
    if unknown:
        raise TypeError(
            f"load_dataset('text') does not take {', '.join(unknown)}; its options are "
            f"{', '.join(_DEFAULTS)}"
        )
    sample_by = options.get("sample_by", "line")
    if sample_by not in SAMPLE_BY:
        raise ValueError(f"sample_by must be one of {', '.join(SAMPLE_BY)}, not {sample_by!r}")
    encoding = options.get("encoding", "utf-8")
    try:
        codecs.lookup(encoding)
    except (LookupError, TypeError) as err:
        raise ValueError(f"encoding={encoding!r} is not a text encoding Python knows") from err
    errors = options.get("encoding_errors", "strict") or "strict"
    try:
        codecs.lookup_error(errors)
    except (LookupError, TypeError) as err:
        raise ValueError(f"encoding_errors={errors!r} is not an error handler") from err
    chosen = {
        "sample_by": sample_by,
        "keep_linebreaks": bool(options.get("keep_linebreaks", False)),
        "encoding": encoding,
        "encoding_errors": errors,
    }
    query = {
        k: (int(v) if isinstance(v, bool) else v) for k, v in chosen.items() if v != _DEFAULTS[k]
    }
    return f"{TEXT}?{urlencode(query)}" if query else TEXT


def text_options(fmt: str) -> dict[str, Any]:
    """The options a text format string carries (defaults filled in).

    >>> text_options("text?sample_by=document")["sample_by"]
    'document'
    """
    _, _, query = fmt.partition("?")
    out = dict(_DEFAULTS)
    for key, value in parse_qsl(query):
        if key not in out:
            raise ValueError(f"unknown text format option {key!r} in {fmt!r}")
        out[key] = value == "1" if key == "keep_linebreaks" else value
    return out


def read_text(stream: BinaryIO, path: str, fmt: str) -> Iterator[list[str]]:
    """Rows of one text file, a list per chunk; decoding errors name the file and the byte."""
    options = text_options(fmt)
    decoder = codecs.getincrementaldecoder(options["encoding"])(options["encoding_errors"])
    newlines = _Newlines()
    sample_by, keep = options["sample_by"], options["keep_linebreaks"]
    carry, offset = "", 0
    while True:
        raw = stream.read(CHUNK_BYTES)
        last = not raw
        held = len(decoder.getstate()[0])  # bytes of a character cut by the previous chunk
        try:
            text = newlines.feed(decoder.decode(raw, final=last), final=last)
        except UnicodeDecodeError as err:
            where = offset - held + err.start
            raise ValueError(
                f"{path}: not {options['encoding']} text: byte 0x{err.object[err.start]:02x} near "
                f"offset {where}; pass encoding= (and encoding_errors=) to load_dataset('text')"
            ) from None
        offset += len(raw)
        carry += text
        if sample_by == "line":
            cut = carry.rfind("\n") + 1 if not last else len(carry)
            done, carry = carry[:cut], carry[cut:]
            rows = _lines(done)
            if not keep:
                rows = [r[:-1] if r.endswith("\n") else r for r in rows]
            if rows:
                yield rows
        elif sample_by == "paragraph":
            parts = carry.split("\n\n")
            carry = parts.pop()
            rows = [p for p in parts if p]
            if last and carry:
                rows.append(carry)
            if rows:
                yield rows
        if last:
            if sample_by == "document":
                yield [carry]
            return


def _lines(text: str) -> list[str]:
    """``text`` split after each ``"\\n"`` only (``str.splitlines`` also splits on other
    separators, which `datasets` keeps inside a line)."""
    parts = text.split("\n")
    rows = [p + "\n" for p in parts[:-1]]
    if parts[-1]:
        rows.append(parts[-1])
    return rows


class _Newlines:
    """Universal newlines across chunk ends: a ``"\\r"`` at the end of a chunk waits for the next
    one, in case it starts with ``"\\n"``."""

    def __init__(self) -> None:
        self.pending = ""

    def feed(self, text: str, final: bool) -> str:
        text = self.pending + text
        self.pending = ""
        if text.endswith("\r") and not final:
            text, self.pending = text[:-1], "\r"
        return text.replace("\r\n", "\n").replace("\r", "\n")
