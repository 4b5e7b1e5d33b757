"""Screenshot pages of the built site in headless Chromium, to look at them as a user would.

python scripts/screenshot_docs.py [--out DIR] [PAGE.html ...]

Build the site first (``./scripts/docs.sh``). By default it shoots the index, one guide,
one notebook page and one API page, at a desktop and a phone width, into
``docs/_build/screenshots/`` (not committed). Needs Chromium (Debian: ``apt-get install
chromium``).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HTML = ROOT / "docs" / "_build" / "html"
PAGES = [
    "index.html",
    "guides/collectives.html",
    "notebooks/01_collectives_gradients.html",
    "api/tensorplay_jax.collectives.html",
]
SIZES = {"desktop": (1400, 1800), "phone": (420, 1600)}


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if path := shutil.which(name):
            return path
    sys.exit("screenshot_docs: no Chromium found; on Debian: apt-get install -y chromium")


def shoot(browser: str, page: Path, png: Path, size: tuple[int, int]) -> None:
    cmd = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"]
    cmd += [f"--window-size={size[0]},{size[1]}", "--virtual-time-budget=4000"]
    cmd += [f"--screenshot={png}", page.as_uri()]
    subprocess.run(cmd, check=True, capture_output=True, timeout=120)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("pages", nargs="*", default=PAGES, help="pages under docs/_build/html")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "_build" / "screenshots")
    args = parser.parse_args(argv)
    browser = chromium()
    args.out.mkdir(parents=True, exist_ok=True)
    for rel in args.pages:
        page = HTML / rel
        if not page.exists():
            sys.exit(f"screenshot_docs: {page} does not exist; run ./scripts/docs.sh first")
        for label, size in SIZES.items():
            png = args.out / f"{rel.replace('/', '_').removesuffix('.html')}-{label}.png"
            shoot(browser, page, png, size)
            print(png)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
