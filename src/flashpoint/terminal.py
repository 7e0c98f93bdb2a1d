"""Text from others made inert before it reaches a terminal: job output, errors and logs, worker lines, other
processes' lease records.

A terminal obeys the control characters in what it prints: ``ESC ] 52`` writes the clipboard, ``ESC [ 2J`` clears the
screen, ``CR`` rewrites the line, a C1 ``CSI`` (U+009B) starts a command on terminals that take 8-bit controls, and
Unicode's bidi controls reorder what is shown (Trojan Source). ``inert`` writes each of them as a visible escape in
Python's spelling, so the text stays readable and says what it held:

- ``\\xNN`` for the C0 controls (U+0000-U+001F) but tab and line feed, for DEL (U+007F) and the C1 controls
  (U+0080-U+009F); a carriage return is kept only where a line ends (``\\r\\n``, which prints as ``\\n`` does);
- ``\\uNNNN`` for the bidi controls (U+061C, U+200E, U+200F, U+202A-U+202E, U+2066-U+2069) and for lone surrogates
  (which no terminal encoding can print: they would end the command with an encoding error).

Backslashes already in the text are left as they are (doubling them would garble every Windows path and regular
expression in a traceback), so a text that spells ``\\x1b`` itself prints the same as one that held the character;
JSON output (``--json``) is the exact form. ``json_text`` is JSON for a terminal: exact when parsed, with the same
characters written as JSON escapes. ``InertFormatter`` is the logging formatter of the ``serve`` and ``dev``
consoles.

Core module: standard library only, cheap to import.
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any

#: what no text from others may print raw, besides the C0 controls: DEL, C1, bidi controls, lone surrogates
_OTHERS = r"\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff"
#: multi-line text: tab and line feed stay, and a carriage return right before a line feed
_IN_LINES = re.compile(rf"\r(?!\n)|[\x00-\x08\x0b\x0c\x0e-\x1f{_OTHERS}]")
#: one line: only tab stays
_IN_ONE_LINE = re.compile(rf"[\x00-\x08\x0a-\x1f{_OTHERS}]")
#: JSON text: its encoder escapes the C0 controls in strings (a raw one is its own indentation); these it writes raw
#: when ``ensure_ascii`` is off
_IN_JSON = re.compile(rf"[{_OTHERS}]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def inert(text: str, *, lines: bool = True) -> str:
    """``text`` with every character that would steer a terminal written as a visible escape (see the module's
    docstring); ``lines=False`` escapes line feeds and carriage returns too, for what must stay one line."""
    pattern = _IN_LINES if lines else _IN_ONE_LINE
    if pattern.search(text) is None:
        return text
    return pattern.sub(_escape, text)


def inert_data(value: Any) -> Any:
    """A JSON-like value (dicts, lists, strings, numbers) with every string in it, keys too, made ``inert``: a body
    from a control plane, before a human view draws any part of it."""
    if isinstance(value, str):
        return inert(value)
    if isinstance(value, dict):
        return {inert_data(k): inert_data(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [inert_data(v) for v in value]
    return value


def json_text(value: Any, *, indent: int | None = 2) -> str:
    """``value`` as JSON for a terminal: non-ASCII text as it is, but every character ``inert`` would escape written as
    a JSON ``\\uNNNN`` escape, so what a program parses is exactly ``value``. ``TypeError``/``ValueError`` as
    ``json.dumps``."""
    text = json.dumps(value, indent=indent, ensure_ascii=False)
    if _IN_JSON.search(text) is None:
        return text
    return _IN_JSON.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


class InertFormatter(logging.Formatter):
    """A logging formatter whose lines are ``inert``: a console's log record quotes workers' lines, jobs' errors and
    other processes' lease records."""

    def format(self, record: logging.LogRecord) -> str:
        return inert(super().format(record))
