"""Text from others is inert on a terminal (``terminal.py``): what each character becomes, JSON that stays exact, and
the consoles' log formatter."""

from __future__ import annotations

import io
import json
import logging
import re
import sys
from typing import Any

import pytest

from flashpoint.terminal import InertFormatter, inert, inert_data, json_text

#: every character a terminal may obey, all in one text: OSC 52 (writes the clipboard), a screen clear, a C1 CSI, a
#: carriage return that rewrites the line, a bidi override and its pop, DEL, NUL, a lone surrogate
HOSTILE = "a\x1b]52;c;aGk=\x07b\x1b[2Jc\x9b31md\re\u202ef\u202cg\x7fh\x00i\ud800j"
#: what no inert text may hold: C0 but tab and line feed, DEL, C1, bidi controls, surrogates (CR is checked apart)
RAW = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def raw_characters(text: str) -> list[str]:
    """The characters of ``text`` that would steer a terminal (a CR only where no line ends)."""
    return RAW.findall(text) + re.findall(r"\r(?!\n)", text)


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("plain text, é and 漢字 and 🙂", "plain text, é and 漢字 and 🙂"),
        ("tab\tand\nlines\n", "tab\tand\nlines\n"),
        ("osc 52 \x1b]52;c;aGk=\x07", "osc 52 \\x1b]52;c;aGk=\\x07"),
        ("clear \x1b[2J", "clear \\x1b[2J"),
        ("nul \x00 bs \x08 vt \x0b ff \x0c so \x0e us \x1f", "nul \\x00 bs \\x08 vt \\x0b ff \\x0c so \\x0e us \\x1f"),
        ("del \x7f", "del \\x7f"),
        ("c1 csi \x9b2J nel \x85 pad \x80 apc \x9f", "c1 csi \\x9b2J nel \\x85 pad \\x80 apc \\x9f"),
        ("progress 10%\rprogress 90%", "progress 10%\\x0dprogress 90%"),
        ("ends in cr\r", "ends in cr\\x0d"),
        ("windows line\r\nnext\r\n", "windows line\r\nnext\r\n"),
        ("rlo \u202eevil\u202c", "rlo \\u202eevil\\u202c"),
        ("lre \u202a rle \u202b pdf \u202c lro \u202d", "lre \\u202a rle \\u202b pdf \\u202c lro \\u202d"),
        ("lri \u2066 rli \u2067 fsi \u2068 pdi \u2069", "lri \\u2066 rli \\u2067 fsi \\u2068 pdi \\u2069"),
        ("lrm \u200e rlm \u200f alm \u061c", "lrm \\u200e rlm \\u200f alm \\u061c"),
        ("lone surrogate \ud800 \udfff", "lone surrogate \\ud800 \\udfff"),
        ("joiners stay: 👨\u200d👩\u200d👧 and \u00a0", "joiners stay: 👨\u200d👩\u200d👧 and \u00a0"),
        ("a literal \\x1b stays as written", "a literal \\x1b stays as written"),
    ],
    ids=[
        "plain",
        "tab-and-newlines",
        "osc52",
        "csi",
        "other-c0",
        "del",
        "c1",
        "cr-rewrites",
        "cr-at-end",
        "crlf",
        "bidi-override",
        "bidi-embeddings",
        "bidi-isolates",
        "bidi-marks",
        "surrogates",
        "joiners",
        "backslash",
    ],
)
def test_each_character_that_steers_a_terminal_is_written_as_an_escape(text: str, shown: str) -> None:
    assert inert(text) == shown


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("one\nline", "one\\x0aline"),
        ("crlf\r\n", "crlf\\x0d\\x0a"),
        ("tab\tstays", "tab\tstays"),
        ("\x1b[2J", "\\x1b[2J"),
    ],
)
def test_one_line_text_escapes_line_ends_too(text: str, shown: str) -> None:
    assert inert(text, lines=False) == shown


def test_clean_text_is_returned_as_it_is_and_inert_text_does_not_change_again() -> None:
    clean = "job 3f2a-fp COMPLETED on NVIDIA H200 [0]\n"
    assert inert(clean) is clean
    once = inert(HOSTILE)
    assert raw_characters(once) == []
    assert inert(once) == once
    assert inert(once, lines=False) == once


def test_data_is_inert_in_every_string_keys_too_and_keeps_its_shape() -> None:
    data: dict[str, Any] = {"out\x1b": ["x\x9b", ("y\u202e", 3)], "n": 1.5, "none": None, "ok": True}

    assert inert_data(data) == {"out\\x1b": ["x\\x9b", ["y\\u202e", 3]], "n": 1.5, "none": None, "ok": True}


@pytest.mark.parametrize("indent", [2, None])
def test_json_text_parses_back_exactly_and_prints_no_control_character(indent: int | None) -> None:
    value = {"text": HOSTILE, HOSTILE: [HOSTILE, "é 漢字"], "n": 1}

    text = json_text(value, indent=indent)

    assert json.loads(text) == value
    assert raw_characters(text.replace("\n", "")) == []
    assert "é 漢字" in text  # text a terminal shows well is kept as it is, unlike ensure_ascii
    assert '"a\\u001b]52;c;aGk=\\u0007b' in text and "\\u009b31m" in text and "\\u202ef\\u202c" in text


def test_json_text_refuses_what_json_refuses() -> None:
    with pytest.raises(TypeError):
        json_text(object())


def test_the_log_formatter_makes_a_record_inert_and_keeps_its_traceback_lines() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(InertFormatter("%(levelname)s: %(message)s"))
    logger = logging.getLogger("tests.terminal")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        try:
            raise ValueError(f"bad {HOSTILE}")
        except ValueError:
            logger.exception("worker line %s", HOSTILE, exc_info=sys.exc_info())
    finally:
        logger.removeHandler(handler)
        logger.propagate = True

    text = stream.getvalue()
    assert raw_characters(text) == []
    assert text.startswith("ERROR: worker line a\\x1b]52;c;aGk=\\x07b\\x1b[2Jc\\x9b31md\\x0de\\u202ef")
    assert "\nTraceback (most recent call last):\n" in text
    assert "ValueError: bad a\\x1b]52;c;aGk=\\x07b" in text
