"""Sphinx configuration of the tensorplay_jax documentation (``./scripts/docs.sh`` builds it)."""

from __future__ import annotations

import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
sys.path.insert(0, str(DOCS / "_ext"))
sys.path.insert(0, str(DOCS.parent))

project = "tensorplay_jax"
author = "the tensorplay_jax authors"
copyright = "2026, the tensorplay_jax authors"

extensions = [
    "apigen",  # docs/_ext/apigen.py: the API pages and the configuration table
    "myst_nb",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
    "sphinx_copybutton",
    "sphinxcontrib.mermaid",
]

exclude_patterns = ["_build", "_generated", "Thumbs.db", ".DS_Store", "**.ipynb_checkpoints"]
source_suffix = {".rst": "restructuredtext", ".md": "myst-nb", ".ipynb": "myst-nb"}

# MyST: heading anchors for links such as [x](design.md#rpc), colon fences, $ maths.
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence", "dollarmath", "deflist"]

# Notebooks: rendered from the executed copies in docs/notebooks/ (the notebook tests
# check that they match notebooks/); never executed while the site builds.
nb_execution_mode = "off"
nb_merge_streams = True

# API pages (docs/_ext/apigen.py writes them; autodoc fills them in).
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_typehints_format = "short"
autodoc_preserve_defaults = True
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False
napoleon_use_ivar = True  # "Attributes:" as fields: NamedTuple fields are not documented twice
add_module_names = False

html_theme = "sphinx_book_theme"
html_title = "tensorplay_jax"
html_theme_options = {
    "show_toc_level": 2,
    "navigation_with_keys": False,
    "navbar_persistent": [],  # one search field (the sidebar's), not a second in the header
    # The sidebar opens the current page's branch only: with every branch open, each
    # page rendered the whole API tree into its sidebar.
    "collapse_navbar": True,
}
html_static_path: list[str] = []
html_last_updated_fmt = None

# Mermaid diagrams (the layer picture) are drawn in the browser.
mermaid_output_format = "raw"

copybutton_prompt_text = r">>> |\.\.\. |\$ "
copybutton_prompt_is_regexp = True

suppress_warnings = ["mystnb.unknown_mime_type"]
