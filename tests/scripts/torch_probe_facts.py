"""Prints, as JSON, what the torch probe did inside this process (run under memscope with the agent)."""

import json
import sys
import threading

facts = {"torch_before": "torch" in sys.modules}
probe = sys.modules.get("_memscope_agent.probes.torch_memory")
facts["probe_loaded"] = probe is not None
facts["torch_imported_by_probe"] = "torch" in sys.modules
if "--import" in sys.argv:
    import torch
    import torch._dynamo

    facts["queued_on_cuda_init"] = any(
        getattr(c, "__name__", "") == "_on_cuda_init" for c, _ in torch.cuda._queued_calls
    )
    facts["cuda_initialized"] = torch.cuda.is_initialized()
    cls = torch._dynamo.callback.CompilationCallbackHandler
    facts["dynamo_patched"] = hasattr(cls.run_start_callbacks, "__wrapped__")
probes = sys.modules.get("_memscope_agent.probes")
tasks = getattr(probes, "_tasks", [])
facts["torch_tasks"] = [t[2].__name__ for t in tasks if getattr(t[2], "__module__", "").endswith("torch_memory")]
facts["threads"] = sorted(t.name for t in threading.enumerate())
print("FACTS " + json.dumps(facts), flush=True)
