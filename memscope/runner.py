"""The name ``memscope.runner`` had before the Run was split into ``memscope.session`` (one module per part): kept,
with a DeprecationWarning, so that scripts written against it (``from memscope.runner import Run, Options``) still
run. New code imports ``memscope.run`` / ``memscope.Run``, or ``memscope.session.run`` / ``.options``."""

import warnings

from .session.live import Snapshot
from .session.options import Options, check_record_dir, check_summary_path, resolve_command
from .session.run import Run

# stacklevel 2: the warning names the line that imported this module (the import machinery's frames are skipped).
warnings.warn(
    "memscope.runner is deprecated: use 'from memscope import Run, Options' (memscope.runner will be removed in a "
    "later release)",
    DeprecationWarning,
    stacklevel=2,
)

__all__ = ["Options", "Run", "Snapshot", "check_record_dir", "check_summary_path", "resolve_command"]
