"""The distribution people install: memscope-ml's wheel and sdist as CI builds them (MEMSCOPE_DIST: the folder
`python -m build` wrote), checked for what a user on Colab or Kaggle needs: every file of the package, the
licence, no half-shipped tests, and dependencies that Colab's and Kaggle's images already satisfy (offline)."""

import email
import glob
import os
import subprocess
import tarfile
import zipfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DIST = os.environ.get("MEMSCOPE_DIST")
COLAB = os.path.join(os.path.dirname(ROOT), "shared", "fixtures", "colab")
pytestmark = pytest.mark.skipif(not DIST, reason="MEMSCOPE_DIST is not set: .ci/run builds the wheel and sets it")


def _one(pattern):
    found = glob.glob(os.path.join(DIST, pattern))
    assert len(found) == 1, found
    return found[0]


def _metadata():
    with zipfile.ZipFile(_one("memscope_ml-*.whl")) as z:
        name = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        return email.message_from_bytes(z.read(name))


def test_the_wheel_is_memscope_ml_and_holds_every_file_of_the_package():
    meta = _metadata()
    assert meta["Name"] == "memscope-ml"
    with zipfile.ZipFile(_one("memscope_ml-*.whl")) as z:
        names = set(z.namelist())
    assert any(n.endswith(".dist-info/licenses/LICENSE") or n.endswith(".dist-info/LICENSE") for n in names)
    tracked = subprocess.run(["git", "ls-files", "memscope"], cwd=ROOT, capture_output=True, text=True).stdout.split()
    if not tracked:  # not a git checkout: every file of the package folder
        tracked = [
            os.path.relpath(os.path.join(d, f), ROOT)
            for d, _, fs in os.walk(os.path.join(ROOT, "memscope"))
            for f in fs
            if not f.endswith(".pyc")
        ]
    missing = [f for f in tracked if f not in names]
    assert not missing, f"in the package but not in the wheel: {missing}"


def test_the_sdist_ships_the_licence_and_no_tests_it_cannot_run():
    with tarfile.open(_one("memscope_ml-*.tar.gz")) as t:
        names = [n.split("/", 1)[1] for n in t.getnames() if "/" in n]
    assert "LICENSE" in names and "pyproject.toml" in names and "memscope/agent/site/sitecustomize.py" in names
    assert not [n for n in names if n.startswith(("tests/", "benchmarks/"))]


def _freeze(path, overrides=()):
    pins = {}
    for line in open(path):
        if "==" in line and not line.startswith("#"):
            name, version = line.strip().split("==", 1)
            pins[name.lower().replace("_", "-")] = version.split(";")[0].strip()
    for line in overrides:
        if "==" in line and not line.startswith("#"):
            name, version = line.strip().split("==", 1)
            pins[name.lower().replace("_", "-")] = version.strip()
    return pins


@pytest.mark.skipif(not os.path.isdir(COLAB), reason="the team's shared fixtures are not beside this checkout")
@pytest.mark.parametrize("image", ["colab", "kaggle"])
def test_every_dependency_is_already_in_colabs_and_kaggles_images(image):
    """Offline (Kaggle's default), `pip install memscope_ml-*.whl` can only use what the image ships."""
    from packaging.requirements import Requirement

    overrides = open(os.path.join(COLAB, "kaggle_requirements.txt")).read().splitlines() if image == "kaggle" else ()
    pins = _freeze(os.path.join(COLAB, "colab-pip-freeze.txt"), overrides)
    unmet = []
    for line in _metadata().get_all("Requires-Dist"):
        req = Requirement(line)
        if req.marker is not None and "extra" in str(req.marker):
            continue
        have = pins.get(req.name.lower().replace("_", "-"))
        if have is None or not req.specifier.contains(have, prereleases=True):
            unmet.append(f"{req} (the image has {have})")
    assert not unmet, unmet
