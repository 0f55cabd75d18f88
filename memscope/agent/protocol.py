"""What the agent and the collector agree on: environment variables and message shapes (JSON lines)."""
ENV_SOCK = "MEMSCOPE_SOCK"      # the collector's Unix socket, in a private 0700 directory
ENV_TOKEN = "MEMSCOPE_TOKEN"    # per-run secret; the first message of a connection must carry it
ENV_RUN = "MEMSCOPE_RUN_ID"     # also marks every process of the run, so escapees can be found in /proc
ENV_DIR = "MEMSCOPE_DIR"        # private directory for per-process crash files
ENV_SCRIPT = "MEMSCOPE_SCRIPT"  # the user's script, when known

FAULT_PREFIX = "fault-"         # fault-<pid>.txt: faulthandler's dump of every thread on a fatal signal
FAULT_ECHO = ".stderr"         # fault-<pid>.stderr.txt: the user asked for the dump on stderr too
EXC_PREFIX = "exc-"             # exc-<pid>.json: an uncaught exception (type, message, traceback)
MAX_LINE = 1 << 20              # longest message accepted from an agent
