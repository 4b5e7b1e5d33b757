"""The documentation site: it builds with warnings as errors, and what it shows is complete.

One build per module (``sphinx-build -W --keep-going`` into a temporary folder, as
``./scripts/docs.sh`` runs it); each test then reads the built HTML.
"""

from __future__ import annotations

import html
import importlib
import os
import pkgutil
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

import tensorplay_jax
from tensorplay_jax.runtime.settings import SETTINGS
from tests._docs import DOCS, markdown_files
from tests._procs import REPO_ROOT

pytestmark = pytest.mark.timeout(600)


@dataclass
class Site:
    root: Path
    build: subprocess.CompletedProcess

    def page(self, rel: str) -> str:
        path = self.root / rel
        assert path.exists(), f"the site has no page {rel}"
        return path.read_text()


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Site:
    out = tmp_path_factory.mktemp("site")
    cmd = [sys.executable, "-m", "sphinx", "-b", "html", "-W", "--keep-going", "-q"]
    cmd += ["-d", str(out / "doctrees"), str(DOCS), str(out / "html")]
    build = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=540)
    return Site(out / "html", build)


def _ids(text: str) -> set[str]:
    return {html.unescape(i) for i in re.findall(r'\bid="([^"]+)"', text)}


def _public_names() -> list[tuple[str, str]]:
    """(module, name) for every name of every public module's ``__all__``."""
    pairs = []
    prefix = tensorplay_jax.__name__ + "."
    modules = [tensorplay_jax.__name__]
    modules += [m.name for m in pkgutil.walk_packages(tensorplay_jax.__path__, prefix)]
    for name in modules:
        if any(part.startswith("_") for part in name.split(".")) or ".demo" in name:
            continue
        module = importlib.import_module(name)
        pairs += [(name, member) for member in getattr(module, "__all__", ())]
    return pairs


def test_site_builds_with_no_warning(site):
    assert site.build.returncode == 0, site.build.stdout + site.build.stderr
    assert "WARNING" not in site.build.stderr, site.build.stderr


def test_every_public_name_has_an_api_entry(site):
    pages = {p.name: p.read_text() for p in (site.root / "api").glob("*.html")}
    all_ids = set().union(*(_ids(text) for text in pages.values()))
    missing = []
    for module, name in _public_names():
        page = pages.get(f"{module}.html")
        if page is None:
            missing.append(f"{module}: no page api/{module}.html")
            continue
        if f"{module}.{name}" in _ids(page):
            continue  # documented here
        # or listed here with a link, named by it, to where it is documented (a re-export)
        pattern = rf'href="([^"]+)"[^>]*><code[^>]*><span class="pre">{re.escape(name)}</span>'
        ok = False
        for href in re.findall(pattern, page):
            parts = urlsplit(unquote(href))
            page_name = Path(parts.path).name or f"{module}.html"
            ok = ok or (page_name in pages and (not parts.fragment or parts.fragment in all_ids))
        if not ok:
            missing.append(f"{module}.{name}")
    assert not missing, "public names with no entry in the API reference:\n  " + "\n  ".join(
        missing
    )


def test_internal_links_resolve(site):
    broken = []
    pages = sorted(p for p in site.root.rglob("*.html") if "_static" not in p.parts)
    ids = {p: None for p in pages}
    for page in pages:
        text = page.read_text()
        for _attr, target in re.findall(r'\b(href|src)="([^"]+)"', text):
            parts = urlsplit(html.unescape(target))
            if parts.scheme or parts.netloc or target.startswith(("mailto:", "javascript:")):
                continue
            dest = (page.parent / unquote(parts.path)).resolve() if parts.path else page
            if not dest.exists():
                broken.append(f"{page.relative_to(site.root)}: {target}")
                continue
            if parts.fragment and dest.suffix == ".html":
                if ids.get(dest) is None:
                    ids[dest] = _ids(dest.read_text())
                if unquote(parts.fragment) not in ids[dest]:
                    broken.append(f"{page.relative_to(site.root)}: {target} (no such anchor)")
    assert not broken, "broken links:\n  " + "\n  ".join(sorted(set(broken)))


def test_configuration_page_lists_every_variable(site):
    text = site.page("configuration.html")
    rows = re.findall(r'<tr class="row-(?:odd|even)"><td><p><code[^>]*><span class="pre">'
                      r"([A-Z][A-Z0-9_]*)</span>", text)  # fmt: skip
    assert sorted(rows) == sorted(s.env for s in SETTINGS)


@pytest.mark.parametrize("stem", sorted(p.stem for p in (REPO_ROOT / "notebooks").glob("*.ipynb")))
def test_notebook_page_shows_its_plots(site, stem):
    text = site.page(f"notebooks/{stem}.html")
    images = re.findall(r'<img[^>]+src="([^"]+\.png)"', text)
    assert images, f"notebooks/{stem}.html shows no figure"


def test_readme_and_pages_link_to_files_that_exist(site):
    # ``site``: the build has written the generated pages (docs/api/) that pages link to.
    bad = []
    for path in markdown_files():
        text = re.sub(r"^```.*?^```", "", path.read_text(), flags=re.S | re.M)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            parts = urlsplit(target)
            if parts.scheme or not parts.path:
                continue
            if not (path.parent / parts.path).exists():
                bad.append(f"{path.relative_to(REPO_ROOT)}: {target}")
    assert not bad, "links to files that are not in the repository:\n  " + "\n  ".join(bad)


def test_no_text_cites_a_markdown_file_that_is_not_here():
    """Every Markdown file the code, the tests, the notebooks or the pages name exists."""
    skip = {".venv", "_build", ".git", "__pycache__", ".pytest_cache", ".ruff_cache"}
    files = []
    for folder, dirs, names in os.walk(REPO_ROOT):
        dirs[:] = [d for d in dirs if d not in skip and not d.endswith(".egg-info")]
        files += [Path(folder) / n for n in names]
    present = {p.name for p in files if p.suffix == ".md"} | {"configuration_table.md"}
    text_files = [p for p in files if p.suffix in (".py", ".md", ".ipynb", ".sh", ".toml")]
    cited = []
    for path in text_files:
        for name in re.findall(r"[\w./-]*\w\.md\b", path.read_text(errors="replace")):
            if Path(name).name not in present:
                cited.append(f"{path.relative_to(REPO_ROOT)}: {name}")
    assert not cited, "cited files that are not in the repository:\n  " + "\n  ".join(cited)
