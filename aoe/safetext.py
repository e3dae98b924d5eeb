"""Text from untrusted sources (operator names, paths, file contents) made visibly safe for a terminal.

An operator name is whatever a model file says: ANSI/OSC escape sequences would recolour the terminal or
set its window title, a bidi override or a zero-width character would make one name display as another.
`safe_text` shows every character that is not printable (C0/C1 controls, Unicode format characters such as
U+202E and U+200B, separators other than the space, unassigned code points) as a Python-style escape
(`\\x1b`, `\\u202e`), and leaves every printable character, of any script, as it is. Everything aoe prints
to a terminal or a log goes through it: the progress bar, the summary table, errors and warnings.
"""
from __future__ import annotations


def _escape(c: str) -> str:
    o = ord(c)
    return f"\\x{o:02x}" if o < 0x100 else f"\\u{o:04x}" if o < 0x10000 else f"\\U{o:08x}"


def safe_text(s: object, keep_newlines: bool = False) -> str:
    """`str(s)` with every non-printable character escaped (`keep_newlines`: line breaks stay)."""
    text = str(s)
    if text.isprintable():
        return text
    if keep_newlines:
        return "\n".join(safe_text(line) for line in text.split("\n"))
    return "".join(c if c.isprintable() else _escape(c) for c in text)


def is_safe(s: str) -> bool:
    """True when `s` prints as itself (nothing `safe_text` would escape)."""
    return s.isprintable()
