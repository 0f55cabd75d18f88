"""The run's own output in capture mode (notebook, API): read as it comes, kept as lines, recorded. The child
writes to files, read as they grow (``follow``).

Linear in what the child writes, whatever it writes: bytes are decoded by one incremental UTF-8 decoder per
stream (a character split across two reads stays whole), and a line is held only up to ``MAX_LINE`` characters;
the rest of an overlong line is dropped and the line says so. A progress bar redrawn with carriage returns is
kept as its latest state, so it never counts as long.
"""

from __future__ import annotations

import codecs
import collections
import threading
from typing import Callable

MAX_LINE = 64 * 1024  # characters of one line kept (in the tail and in the record)
READ_SIZE = 65536


def last_state(line: str) -> str:
    """What a terminal shows of a line redrawn with carriage returns: the text after the last non-final \\r."""
    body = line.rstrip("\r")
    return body.rsplit("\r", 1)[-1]


class LineReader:
    """Turns one stream's bytes into text to record (``on_text``) and whole lines (appended to ``tail``)."""

    def __init__(
        self, on_text: Callable[[str], None], tail: "collections.deque[str]", max_line: int = MAX_LINE
    ) -> None:
        self._on_text = on_text
        self._tail = tail
        self._max = max_line
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._line = ""  # the current line's visible state, at most max_line characters
        self._dropped = 0  # characters of the current line past max_line, not kept
        self.partial = ""  # the line being written (a progress bar), for live views

    def feed(self, data: bytes, final: bool = False) -> None:
        """Take a chunk of output: complete lines go on, the line being written is kept as ``partial``."""
        text = self._decoder.decode(data, final)
        kept: list[str] = []
        pos = 0
        while pos < len(text):
            nl = text.find("\n", pos)
            end = nl if nl >= 0 else len(text)
            kept.append(self._add(text[pos:end]))
            if nl < 0:
                break
            kept.append(self._end_line())
            pos = nl + 1
        if final and (self._line or self._dropped):
            kept.append(self._end_line(newline=False))
        out = "".join(kept)
        if out:
            self._on_text(out)
        self.partial = self._line

    def _add(self, seg: str) -> str:
        """Add a piece of the current line (no newline in it); returns the part kept (recorded)."""
        kept = seg
        s = self._line + seg
        if "\r" in seg or self._line.endswith("\r"):
            idx = s.rstrip("\r").rfind("\r")
            if idx >= 0:  # a redraw: the terminal shows what follows the last carriage return
                s = s[idx + 1 :]
                self._dropped = 0
        if len(s) > self._max:
            over = len(s) - self._max
            self._dropped += over
            s = s[: self._max]
            kept = seg[: max(0, len(seg) - over)]
        self._line = s
        return kept

    def _end_line(self, newline: bool = True) -> str:
        line = last_state(self._line)
        note = ""
        if self._dropped:
            note = f" [memscope: line cut at {self._max // 1024} KiB; {self._dropped} more characters not kept]"
        self._tail.append(line + note)
        self._line, self._dropped = "", 0
        return note + ("\n" if newline else "")


def follow(path: str, reader: LineReader, done: threading.Event, poll_s: float = 0.05) -> None:
    """Read the file the child writes its output to, as it grows, into ``reader``, until ``done`` is set (every
    writer is gone) and all that was written is read. A file never says "no more writers" as a pipe does:
    ``done`` does."""
    try:
        f = open(path, "rb", buffering=0)
    except OSError:
        return
    with f:
        while True:
            finished = done.is_set()  # before the read: all that was written before it is in this read
            chunk = f.read(READ_SIZE)
            if chunk:
                reader.feed(chunk)
            elif finished:
                break
            else:
                done.wait(poll_s)
    reader.feed(b"", final=True)
    reader.partial = ""
