"""The name ``memscope.store`` had before the record layer was split (record/ now): kept so that code and notebooks
that import from it still run. New code imports ``memscope.record.reader`` / ``.writer`` / ``.catalogue``."""

from .model import KIND_PSS, KIND_RSS
from .record.catalogue import RunInfo, default_record_dir, find_run, list_runs
from .record.reader import RunData
from .record.writer import Recorder

__all__ = ["KIND_PSS", "KIND_RSS", "RunData", "Recorder", "RunInfo", "default_record_dir", "find_run", "list_runs"]
