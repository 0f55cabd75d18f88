"""Install a Jupyter kernel spec named "colab" into this Python's prefix: Colab's own kernel class and extension,
started the way colab_kernel_launcher starts them (ipykernel's IPKernelApp, kernel_class=google.colab._kernel.Kernel,
--ext=google.colab; see shared/fixtures/colab/README.md). Run it with the replica's python."""
import json
import os
import sys

LAUNCH = ("import sys; from ipykernel import kernelapp; from google.colab import _kernel; "
          "kernelapp.IPKernelApp.launch_instance(kernel_class=_kernel.Kernel, argv=sys.argv[1:] + ['--ext=google.colab'])")
folder = os.path.join(sys.prefix, "share", "jupyter", "kernels", "colab")
os.makedirs(folder, exist_ok=True)
with open(os.path.join(folder, "kernel.json"), "w") as f:
    json.dump({"argv": [sys.executable, "-c", LAUNCH, "-f", "{connection_file}"], "display_name": "Colab (replica)",
               "language": "python"}, f, indent=1)
print("kernel spec 'colab':", folder)
