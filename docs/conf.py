"""Sphinx configuration of the docs site: ``make docs`` builds it into build/docs/html.

The pages are Markdown (MyST); docs/api.md documents the public API with autodoc from the
built package (NumPy-style docstrings through napoleon; the Cython modules' signatures are
embedded by the build, setup.py's ``embedsignature``).  The build needs no network: no
intersphinx, and no MathJax (the pages have no math; ``tools/docs_pages.py --offline``
checks the built site loads nothing remote).
"""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import collectives  # noqa: E402  (the checkout's, built in place)

project = "collectives"
release = version = collectives.__version__
extensions = ["myst_parser", "sphinx.ext.autodoc", "sphinx.ext.napoleon", "sphinx.ext.imgmath"]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build"]
# Headings get anchors down to ###, so a page links to an algorithm as algorithms.md#allreduce_ring.
myst_heading_anchors = 3
# Sphinx renders math with MathJax from a CDN by default.  imgmath renders it at build time
# instead (with LaTeX, which a page with math would then need; none has math), so no page
# loads a script for it.
html_math_renderer = "imgmath"

autodoc_member_order = "bysource"
autodoc_default_options = {}
napoleon_google_docstring = False
napoleon_numpy_docstring = True

html_theme = "alabaster"
html_theme_options = {"font_family": "sans-serif", "head_font_family": "sans-serif", "code_font_family": "monospace",
                      "show_powered_by": False}
html_show_sphinx = False
html_static_path = []
html_show_sourcelink = False
