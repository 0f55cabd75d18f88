"""``memscope prune``: remove old records, never a running run's."""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
from typing import ClassVar

from ..fmt import fmt_bytes
from .options import EXIT_BAD_INPUT

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_duration(text: str) -> float:
    """'30d', '12h', '90m', '45s', '2w' -> seconds; ValueError on anything else (a negative, no unit)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*", text or "")
    if not m:
        raise ValueError(f"--older-than {text!r}: give a number and a unit (s, m, h, d, w), e.g. 30d")
    return float(m.group(1)) * _UNITS[m.group(2)]


class PruneCommand:
    """remove old run records (--older-than 30d, --keep N); a running run's record is never touched"""

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
        removed = kept = running = 0
        freed = 0
        for i, r in enumerate(newest_first):
            age = run_age_s(r)
            # A run whose start the record does not say is never old enough.
            doomed = (keep is None or i >= keep) and (older is None or (age is not None and age > older))
            if not doomed:
                kept += 1
                continue
            # Checked last, just before removing: a run proven running stays, whatever its age.
            if run_state(r) == RUNNING:
                running += 1
                continue
            files = record_files(r)
            size = files_size(files)
            if ns.dry_run:
                print(f"would remove {r.run_id} ({fmt_bytes(size, 'tenth')})")
            else:
                size = _remove(files)
                print(f"removed {r.run_id} ({fmt_bytes(size, 'tenth')})")
            removed += 1
            freed += size
        verb = "would remove" if ns.dry_run else "removed"
        free = "would free" if ns.dry_run else "freed"
        line = f"{verb} {removed} run{'s' * (removed != 1)}, {free} {fmt_bytes(freed, 'tenth')}; kept {kept}"
        if running:
            line += f"; skipped {running} running"
        print(line)
        return 0


def _remove(paths: list[str]) -> int:
    """Remove these files (the scalene folder whole); the bytes actually removed."""
    from ..record.catalogue import files_size

    freed = 0
    # The .sqlite last: an interrupted prune leaves a record that ls still lists, never orphans it can't see.
    for p in sorted(paths, key=lambda p: p.endswith(".sqlite")):
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


def _bad(msg: str) -> int:
    sys.stderr.write(f"memscope: {msg}\n")
    return EXIT_BAD_INPUT
