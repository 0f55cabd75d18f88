"""Print pip constraints for a replica of Colab's or Kaggle's runtime, from their recorded freezes
(shared/fixtures/colab): `python .ci/replica_constraints.py colab|colab-torch|kaggle FIXTURES_DIR`.

- colab: Colab's CPU runtime `pip freeze` (direct references dropped: pip takes only name==version).
- colab-torch: the same without torch and its family (torch==2.13.0 is this machine's CPU build: Colab's CUDA
  build would be a multi-GB download).
- kaggle: colab-torch with Kaggle's own pins over Colab's (ipywidgets 8.1.5, jupyter_server 2.12.5, ...), less
  nbconvert 6.4.5, which needs mistune < 2 where Colab's freeze has 3.3.4 (no pip can install both; Colab's
  nbconvert stays).
"""
import re
import sys

TORCH = re.compile(r"^(torch|torchvision|torchaudio|torchdata|torchao|torchtune|torchcodec)==")


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(path: str) -> list[str]:
    return [line.strip() for line in open(path) if re.match(r"^[A-Za-z0-9_.-]+==", line.strip())]


def main(kind: str, fixtures: str) -> None:
    lines = pins(f"{fixtures}/colab-pip-freeze.txt")
    if kind in ("colab-torch", "kaggle"):
        lines = [line for line in lines if not TORCH.match(line)]
    if kind == "kaggle":
        kaggle = [line for line in pins(f"{fixtures}/kaggle_requirements.txt")
                  if not TORCH.match(line) and not line.startswith("nbconvert==")]
        theirs = {norm(line.split("==")[0]) for line in kaggle} | {"widgetsnbextension", "nbconvert"}
        lines = [line for line in lines if norm(line.split("==")[0]) not in theirs] + kaggle
    print("\n".join(lines))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
