"""The README and docs/ as a reader meets them: every picture is one benchmarks/screenshots.py made from a real run
and the dashboard's code has not changed since; every link and anchor leads somewhere; the first screen's
commands name what exists (the `notebook` extra, the demo script); the verdict table explains every growth kind;
the sections other work links to are there. MEMSCOPE_README_FRESH=1 also follows the first screen on a fresh venv
(minutes: pip, JupyterLab, chromium)."""

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from memscope.model import GROWTH_KINDS

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md")), ROOT / "BENCHMARKS.md", ROOT / "ARCHITECTURE.md"]
MANIFEST = ROOT / "docs" / "screenshots.json"
REGENERATE = "run `python benchmarks/screenshots.py` (JupyterLab in chromium, ~3 min) and commit docs/"


def _screenshots():
    spec = importlib.util.spec_from_file_location("screenshots", ROOT / "benchmarks" / "screenshots.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _without_code(text: str) -> str:
    """The page without its fenced code blocks (a `# comment` there is no heading, a link there no link)."""
    return re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)


def pictures(page: Path) -> list[Path]:
    """Every local picture a Markdown page shows (``![alt](path)`` and ``<img src>``), resolved."""
    text = _without_code(page.read_text())
    refs = re.findall(r"!\[[^\]]*\]\(([^)\s]+)", text) + re.findall(r"<img[^>]+src=[\"']([^\"']+)", text)
    return [(page.parent / r).resolve() for r in refs if not r.startswith(("http://", "https://"))]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped (hyphens and underscores kept), spaces to -."""
    s = heading.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for h in re.findall(r"^#{1,6} (.+)$", _without_code(page.read_text()), re.M):
        s = slug(h)
        n = seen.get(s, 0)
        seen[s] = n + 1
        out.add(s if n == 0 else f"{s}-{n}")
    return out


def test_every_picture_exists_and_was_made_by_the_script():
    manifest = json.loads(MANIFEST.read_text())
    assert manifest["made_by"] == "benchmarks/screenshots.py"
    listed = manifest["pictures"]
    shown = {p for page in PAGES for p in pictures(page)}
    assert (ROOT / "docs" / "dashboard.png").resolve() in shown, "the README shows no dashboard"
    shots = _screenshots()
    for p in sorted(shown):
        rel = p.relative_to(ROOT).as_posix()
        assert p.exists(), f"{rel} is shown but does not exist"
        assert rel in listed, f"{rel} is shown but benchmarks/screenshots.py did not make it: {REGENERATE}"
        assert shots.sha256(p) == listed[rel]["sha256"], f"{rel} is not the picture the script made: {REGENERATE}"


def test_the_pictures_show_the_current_dashboard():
    """The pictures were made from the code that draws them as it is now (the files screenshots.UI_FILES lists)."""
    manifest = json.loads(MANIFEST.read_text())
    shots = _screenshots()
    assert manifest["ui_files"] == list(shots.UI_FILES)
    changed = manifest["ui_sha256"] != shots.ui_hash()
    assert not changed, (
        f"the dashboard's code changed since the pictures were made ({manifest['commit']}): {REGENERATE}"
    )


def test_every_link_and_anchor_leads_somewhere():
    broken = []
    for page in PAGES:
        text = _without_code(page.read_text())
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if target.startswith(("http://", "https://", "mailto:")):
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists():
                broken.append(f"{page.name}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                broken.append(f"{page.name}: {target} (no such heading)")
    assert not broken, "\n".join(broken)


def test_the_first_screen_names_what_exists():
    shots = _screenshots()
    lines, cell = shots.first_screen(README)
    head = README.read_text().split("<!-- /first-screen -->")[0]
    assert len(head.splitlines()) < 45, "the first screen must fit a screen: install, start, run"
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    installs = [ln for ln in lines if ln.startswith("pip install")]
    assert installs, "the first screen installs nothing"
    for extra in re.findall(r"\[(\w+)\]", " ".join(installs)):
        assert extra in extras, f"the README installs the extra [{extra}], which pyproject.toml lacks"
    assert any(re.match(r"jupyterlab\b", req) for req in extras["notebook"]), "[notebook] must bring JupyterLab"
    assert any("jupyter lab" in ln for ln in lines)
    assert cell.startswith("%load_ext memscope\n")
    script = re.search(r"%memscope (\S+\.py)", cell).group(1)
    assert (ROOT / script).is_file(), f"the first cell runs {script}, which a clone does not have"


def test_the_verdict_table_explains_every_growth_kind():
    text = README.read_text()
    section = text.split("## What the verdict words mean", 1)[1].split("\n## ", 1)[0]
    rows = {m.group(1) for m in re.finditer(r"^\| `(\w+)` \|", section, re.M)}
    assert rows == set(GROWTH_KINDS), (
        f"kinds without a row: {set(GROWTH_KINDS) - rows}; rows of no kind: {rows - set(GROWTH_KINDS)}"
    )


def test_the_verdict_table_quotes_words_the_code_says():
    """Each quoted phrase of the table, cut at its figures and "…", is in memscope's source: words reworded there
    (a view's verdict line, the card's advice) fail here until the table says them too."""
    source = "\n".join(p.read_text() for p in sorted((ROOT / "memscope").rglob("*")) if p.suffix in (".py", ".js"))
    section = README.read_text().split("## What the verdict words mean", 1)[1].split("\n## ", 1)[0]
    stale = []
    for kind, said in re.findall(r"^\| (`\w+`|\(none yet\)) \| (.*?) \|", section, re.M):
        for quote in re.findall(r'"([^"]+)"', said):
            for part in re.split(r"\d+(?:\.\d+)?\s*(?:[KMG]iB|B|s)?(?:/\w+)?|…|;|:|\(|\)", quote):
                part = part.strip(" ,.")
                if len(part.split()) >= 2 and part not in source:
                    stale.append(f"{kind}: {part!r}")
    assert not stale, "the verdict table quotes words memscope no longer says: " + "; ".join(stale)


def test_the_sections_others_link_to_are_there():
    heads = anchors(README)
    assert "grafana-and-alerts" in heads  # the alert rules' runbook links point into it
    assert "signals-and-which-processes-are-the-runs" in heads
    assert re.findall(r"^## (.+)$", _without_code(README.read_text()), re.M)[-1] == "Changelog"


@pytest.mark.skipif(not os.environ.get("MEMSCOPE_README_FRESH"), reason="minutes of pip: MEMSCOPE_README_FRESH=1")
def test_the_first_screen_on_a_fresh_venv(tmp_path):
    """The README's first screen, every command as written, from a new venv to the dashboard's verdict and card."""
    r = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "screenshots.py"), "--fresh", str(tmp_path / "venv")],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    print(r.stdout[-4000:], r.stderr[-4000:])
    assert r.returncode == 0
    assert "end card" in r.stdout
