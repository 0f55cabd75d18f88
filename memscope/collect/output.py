"""The run's own output in capture mode (notebook, API): read as it comes, kept as lines, recorded. The child
writes to files, read as they grow (``follow``).

Linear in what the child writes, whatever it writes: bytes are decoded by one incremental UTF-8 decoder per
stream (a character split across two reads stays whole), and a line is held only up to ``MAX_LINE`` characters;
the rest of an overlong line is dropped and the line says so. A progress bar redrawn with carriage returns is
kept as its latest state, so it never counts as long.

Bounded whatever the child writes: the record keeps the first ``MAX_RECORDED`` bytes of each stream, then only
counts what comes (its last ``TAIL_LINES`` lines are recorded at the end, where a traceback is). Past the cap the
reader skips to the end of the file instead of decoding what it would not keep, and gives the disk blocks of what
it has read back (a hole punched in the capture file, memscope's own buffer: offsets unchanged, nothing the child
writes lost; where holes cannot be punched the file is emptied once read, the child appending with O_APPEND).
"""

from __future__ import annotations

import codecs
import collections
import os
import sys
import threading
from typing import BinaryIO, Callable

from ..fmt import fmt_bytes

MAX_LINE = 64 * 1024  # characters of one line kept (in the tail and in the record)
READ_SIZE = 65536
MAX_RECORDED = 32 << 20  # bytes of each stream recorded (a day of a progress bar redrawn 10 times a second: ~130 MB)
TAIL_LINES = 200  # the last lines of a stream past the cap, recorded at its end
TAIL_LINE = 2000  # characters of each of those lines recorded
TAIL_READ = 256 << 10  # past the cap, what is read of the end of the file each round (the rest is skipped)
FILE_KEEP = 8 << 20  # past the cap, the capture file's blocks already read are given back by this much at a time


def last_state(line: str) -> str:
    """What a terminal shows of a line redrawn with carriage returns: the text after the last non-final \\r."""
    body = line.rstrip("\r")
    return body.rsplit("\r", 1)[-1]


class LineReader:
    """Turns one stream's bytes into text to record (``on_text``) and whole lines (appended to ``tail``)."""

    def __init__(
        self,
        on_text: Callable[[str], None],
        tail: "collections.deque[str]",
        max_line: int = MAX_LINE,
        max_bytes: int | None = None,
    ) -> None:
        self._on_text = on_text
        self._tail = tail
        self._max = max_line
        self._max_bytes = MAX_RECORDED if max_bytes is None else max_bytes
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._line = ""  # the current line's visible state, at most max_line characters
        self._dropped = 0  # characters of the current line past max_line, not kept
        self.partial = ""  # the line being written (a progress bar), for live views
        self.recorded_bytes = 0  # bytes of output read before the cap (their text went to the record, lines cut)
        self.kept_bytes = 0  # of those, the bytes of text the record really holds (a line past max_line is cut)
        self.dropped_bytes = 0  # bytes past the cap: counted (read or skipped), not recorded
        self._last: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)  # lines past the cap

    @property
    def over(self) -> bool:
        """Past the cap: what comes is counted, not recorded (its last lines are, at the end)."""
        return self.recorded_bytes >= self._max_bytes

    def skip(self, n: int) -> None:
        """``n`` bytes of output past the cap were not read (skipped or emptied from the file): count them; the
        line they cut ends there, with a note."""
        self.dropped_bytes += n
        if n:
            self._decoder.reset()
            if self._line or self._dropped:  # the line it cut ends here, saying so
                self._dropped += n
                self._end_line(newline=False)

    def feed(self, data: bytes, final: bool = False) -> None:
        """Take a chunk of output: complete lines go on, the line being written is kept as ``partial``."""
        over = self.over
        if over:
            self.dropped_bytes += len(data)
        else:
            self.recorded_bytes += len(data)
        text = self._decoder.decode(data, final)
        kept: list[str] = []
        pos = 0
        while pos < len(text):
            nl = text.find("\n", pos)
            end = nl if nl >= 0 else len(text)
            piece = self._add(text[pos:end])
            kept.append(piece)
            if not over and piece:
                self.kept_bytes += len(piece.encode("utf-8", "surrogateescape"))
            if nl < 0:
                break
            kept.append(self._end_line())
            self.kept_bytes += not over
            pos = nl + 1
        if final and (self._line or self._dropped):
            kept.append(self._end_line(newline=False))
        out = "".join(kept)
        if over:
            out = ""
            if final and self.dropped_bytes:
                out = (
                    f"\n[memscope: output past the first {fmt_bytes(self._max_bytes)} not recorded: "
                    f"{fmt_bytes(self.dropped_bytes)} dropped; its last {len(self._last)} lines follow]\n"
                ) + "".join(line + "\n" for line in self._last)
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
        if self.over:  # recorded at the end: a traceback's lines are short, a cut line's start is enough
            self._last.append(line[:TAIL_LINE] + ("…" if len(line) > TAIL_LINE else "") + note)
        self._line, self._dropped = "", 0
        return note + ("\n" if newline else "")


def follow(
    path: str,
    reader: LineReader,
    done: threading.Event,
    poll_s: float = 0.05,
    stop: threading.Event | None = None,
) -> None:
    """Read the file the child writes its output to, as it grows, into ``reader``, until ``done`` is set (every
    writer is gone) and all that was written is read. A file never says "no more writers" as a pipe does:
    ``done`` does. ``stop``: memscope gives up on the rest (the run has ended; what is left is counted)."""
    try:
        f = open(path, "rb", buffering=0)
    except OSError:
        return
    with f:
        pos = released = 0  # where the next read starts; the file's blocks before ``released`` are given back
        while True:
            finished = done.is_set()  # before the read: all that was written before it is in this read
            if stop is not None and stop.is_set():
                reader.skip(max(0, _size(f) - pos))
                break
            if reader.over:
                size = _size(f)
                if size < pos:  # emptied (by the fallback below, or someone else): start again at its start
                    reader.skip(0)
                    pos = released = 0
                    f.seek(0)
                elif size - pos > TAIL_READ:  # only the end is read: what is skipped would only be counted
                    reader.skip(size - TAIL_READ - pos)
                    pos = size - TAIL_READ
                    f.seek(pos)
                if pos - released >= FILE_KEEP and _punch(path, pos):
                    released = pos
            chunk = f.read(READ_SIZE)
            if chunk:
                pos += len(chunk)
                reader.feed(chunk)
            elif finished:
                break
            else:
                if reader.over and pos - released >= FILE_KEEP and _size(f) == pos and _empty(path):
                    pos = released = 0  # no holes here: emptied once all is read (a write racing it is lost)
                    f.seek(0)
                done.wait(poll_s)
    reader.feed(b"", final=True)
    reader.partial = ""


def _size(f: BinaryIO) -> int:
    try:
        return os.fstat(f.fileno()).st_size
    except OSError:
        return 0


_FALLOC_PUNCH = 0x01 | 0x02  # FALLOC_FL_KEEP_SIZE | FALLOC_FL_PUNCH_HOLE (linux/falloc.h)


def _punch(path: str, upto: int) -> bool:
    """Give the disk blocks of the file's first ``upto`` bytes (read already) back, offsets unchanged: the child
    appends on, nothing it writes is lost. Linux only (fallocate); False where that cannot be done."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes  # here: only a run whose output passed the cap needs it

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fallocate = libc.fallocate
        fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
        fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    except (OSError, AttributeError):
        return False
    try:
        return bool(fallocate(fd, _FALLOC_PUNCH, 0, upto) == 0)
    finally:
        os.close(fd)


def _empty(path: str) -> bool:
    try:
        os.truncate(path, 0)  # the writer appends (O_APPEND): its next write lands at the new end
        return True
    except OSError:
        return False
