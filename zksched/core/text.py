"""Text shown to people (a terminal, a log): values read from ZooKeeper or written by a job
may hold characters a terminal acts on (escape sequences, bell, bidi overrides)."""

from __future__ import annotations


def printable(text: str) -> str:
    """`text` with every character a terminal would act on (controls, escapes, format
    characters) shown as `\\xNN`/`\\uNNNN`; ordinary text, any script, is left alone."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def printable_lines(text: str) -> str:
    """`printable` line by line: line breaks stay line breaks."""
    if text.isprintable():
        return text
    return "\n".join(printable(line) for line in text.split("\n"))
