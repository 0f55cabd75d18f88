"""``memscope prune``: remove old records, never a running run's."""

from __future__ import annotations

import argparse
import fcntl
import os
import re
import shutil
import sys
from typing import TYPE_CHECKING, ClassVar

from ..fmt import fmt_bytes
from .options import EXIT_BAD_INPUT

if TYPE_CHECKING:
    from ..record.catalogue import RunInfo

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_duration(text: str) -> float:
    """'30d', '12h', '90m', '45s', '2w' -> seconds; ValueError on anything else (a negative, no unit)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*", text or "")
    if not m:
        raise ValueError(f"--older-than {text!r}: give a number and a unit (s, m, h, d, w), e.g. 30d")
    return float(m.group(1)) * _UNITS[m.group(2)]


class PruneCommand:
    """remove old run records (--older-than 30d, --keep N): only memscope's files of records proven finished"""

    name: ClassVar[str] = "prune"
    usage: ClassVar[str | None] = None

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        """--older-than DURATION, --keep N, --dry-run, --record DIR."""
        parser.add_argument("--older-than", metavar="DURATION", help="remove runs started longer ago (30d, 12h, 90m)")
        parser.add_argument("--keep", metavar="N", help="keep the N newest runs, remove the others")
        parser.add_argument("--dry-run", action="store_true", help="say what would be removed, remove nothing")
        parser.add_argument("--record", metavar="DIR")

    def run(self, ns: argparse.Namespace) -> int:
        """Remove the runs that match and say what was freed. Both options: a run is kept if either keeps it (one
        of the N newest, or younger than DURATION), so ``--older-than 30d --keep 5`` never leaves fewer than 5."""
        # Imported here: every command's module is imported for `memscope --help` and for `memscope run`'s start.
        from ..record.catalogue import (
            RUNNING,
            default_record_dir,
            files_size,
            record_files,
            run_age_s,
            run_state,
            scan_runs,
        )

        if ns.older_than is None and ns.keep is None:
            return _bad("prune needs --older-than DURATION or --keep N (or both)")
        try:
            older = parse_duration(ns.older_than) if ns.older_than is not None else None
        except ValueError as exc:
            return _bad(str(exc))
        keep = None
        if ns.keep is not None:
            if not re.fullmatch(r"\d+", ns.keep.strip()):
                return _bad(f"--keep {ns.keep!r}: give a whole number of runs, 0 or more")
            keep = int(ns.keep)
        d = ns.record or default_record_dir()
        if not os.path.isdir(d):
            return _bad(f"no record directory {d}")
        runs, skipped = scan_runs(d)
        for path, why in skipped:  # never removed: not known to be a record
            sys.stderr.write(f"memscope: skipped {path}: not a readable memscope record ({why})\n")
        newest_first = runs[::-1]
        removed = kept = running = unproven = links = 0
        freed = 0
        for i, r in enumerate(newest_first):
            age = run_age_s(r)
            # A run whose start the record does not say is never old enough.
            doomed = (keep is None or i >= keep) and (older is None or (age is not None and age > older))
            if not doomed:
                kept += 1
                continue
            if os.path.islink(r.path):  # never through a link: neither the link nor what it points to is removed
                sys.stderr.write(
                    f"memscope: skipped {r.path}: a symbolic link (prune removes only files memscope wrote)\n"
                )
                links += 1
                continue
            # Checked last, just before removing: a run proven running stays, whatever its age.
            if run_state(r) == RUNNING:
                running += 1
                continue
            doubt = _not_proven_finished(r)
            if doubt:
                sys.stderr.write(f"memscope: kept {r.run_id} ({r.path}): {doubt}\n")
                unproven += 1
                continue
            files = record_files(r)
            size = files_size(files)
            if ns.dry_run:
                print(f"would remove {r.run_id} ({fmt_bytes(size, 'tenth')})")
            else:
                gone = _remove(r.path, files)
                if isinstance(gone, str):
                    sys.stderr.write(f"memscope: kept {r.run_id} ({r.path}): {gone}\n")
                    unproven += 1
                    continue
                size = gone
                print(f"removed {r.run_id} ({fmt_bytes(size, 'tenth')})")
            removed += 1
            freed += size
        verb = "would remove" if ns.dry_run else "removed"
        free = "would free" if ns.dry_run else "freed"
        line = f"{verb} {removed} run{'s' * (removed != 1)}, {free} {fmt_bytes(freed, 'tenth')}; kept {kept}"
        if running:
            line += f"; skipped {running} running"
        if unproven:
            line += f"; skipped {unproven} not proven finished"
        if links:
            line += f"; skipped {links} symbolic link{'s' * (links != 1)}"
        print(line)
        return 0


def _not_proven_finished(r: RunInfo) -> str | None:
    """Why this record may still be being written (None: it is proven finished). Its writer holds its lock from
    before the first byte to after the last: a record that has it free and says its writer took it is finished."""
    from ..record.catalogue import writer_holds

    held = writer_holds(r.path)
    if held:
        return "memscope is still writing it (its run's root has exited; memscope is finishing)"
    if held is None:
        return "cannot open it to check that nothing writes it"
    if not r.writer_lock and not r.ended:
        return (
            "unfinished, and written by an older memscope that took no lock: nothing proves it is not still being "
            "written (remove it by hand if no memscope is running it)"
        )
    return None


def _remove(record: str, paths: list[str]) -> int | str:
    """Remove these files (the Scalene folder whole), holding the record's lock meanwhile so that no writer can be
    at work on it; the bytes actually removed, or why nothing was."""
    from ..record.catalogue import files_size

    try:
        fd = os.open(record, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        return f"cannot open it to lock it ({exc.strerror or exc})"
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return "a writer holds it now"
        freed = 0
        # The .sqlite last: an interrupted prune leaves a record that ls still lists, never orphans it can't see.
        for p in sorted(paths, key=lambda p: p == record):
            size = files_size([p])
            try:
                if os.path.isdir(p) and not os.path.islink(p):
                    shutil.rmtree(p)
                else:
                    os.unlink(p)
            except OSError as exc:
                sys.stderr.write(f"memscope: could not remove {p}: {exc.strerror or exc}\n")
                continue
            freed += size
        return freed
    finally:
        os.close(fd)


def _bad(msg: str) -> int:
    sys.stderr.write(f"memscope: {msg}\n")
    return EXIT_BAD_INPUT
