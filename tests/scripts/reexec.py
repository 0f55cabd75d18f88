import os
import sys

# Re-executes itself (the same pid) into an image without memscope's agent, which then fails.
if sys.argv[1] != "second":
    if sys.argv[1] == "isolated":
        os.execv(sys.executable, [sys.executable, "-I", __file__, "second"])
    os.execve(sys.executable, [sys.executable, __file__, "second"], {})  # a cleared environment
raise ValueError("the second image failed")
