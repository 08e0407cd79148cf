"""Untrusted text from the API (termination messages, reasons, names) made safe to match and
quote: control and format characters dropped, bounded in bytes, one line or a few."""

from __future__ import annotations

import re
import unicodedata

MAX_MESSAGE_BYTES = 4096
MAX_EVIDENCE_LINE = 256
# Reasons and container names are set through the API (a pod's status is writable by whoever
# may patch it): bounded and cleaned like messages before they are quoted.
MAX_LABEL = 128

_WHITESPACE = re.compile(r"\s+")
_LINE_BREAKS = re.compile(r"[\r\n\t\v\f\u2028\u2029\x85]")


def _keep(character: str) -> bool:
    return unicodedata.category(character) not in ("Cc", "Cf", "Cs", "Co", "Cn")


def _tail(text: str, limit: int) -> str:
    encoded = text[-limit:].encode("utf-8", "replace")
    return encoded[-limit:].decode("utf-8", "ignore")


def sanitize_line(text: str) -> str:
    """One printable line: control and format characters dropped, whitespace collapsed."""
    flat = _LINE_BREAKS.sub(" ", text)
    return _WHITESPACE.sub(" ", "".join(c for c in flat if _keep(c))).strip()


def sanitize_message(text: str | None, limit: int = MAX_MESSAGE_BYTES) -> str:
    """An untrusted message as one printable line of at most `limit` UTF-8 bytes (its end)."""
    if not text:
        return ""
    return _tail(sanitize_line(_tail(text, limit * 4)), limit)


def bounded_lines(text: str | None) -> list[str]:
    """The last MAX_MESSAGE_BYTES of a message as lines without control or format characters,
    spacing kept (a traceback's code lines are told from its message by their indentation)."""
    if not text:
        return []
    lines = (
        "".join(c for c in raw if _keep(c)).rstrip()
        for raw in _tail(text, MAX_MESSAGE_BYTES).splitlines()
    )
    return [line for line in lines if line.strip()]


def clip(line: str, limit: int = MAX_EVIDENCE_LINE) -> str:
    """At most `limit` characters, an ellipsis marking a cut."""
    return line if len(line) <= limit else line[: limit - 3] + "..."


def label(text: str | None) -> str:
    """A short API-set word (a reason, a container name) as one clean, bounded token."""
    return clip(sanitize_line(text or ""), MAX_LABEL)
