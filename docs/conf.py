"""Sphinx configuration of the tiledmm site.

Build (README names this command):
    pip install -e ".[docs]" && sphinx-build -W --keep-going -b html docs docs/_build/html

Notebooks are rendered from their committed outputs and never executed here
(nb_execution_mode = "off"); the kernel pages, the notebook copies and the README quotes are
written before each build by _ext/tiledmm_docs.py.
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "_ext"))

try:
    import tiledmm  # noqa: E402  (installed with pip install -e ".[docs]")
except ImportError:  # a checkout built in place (python setup.py build_ext --inplace)
    sys.path.append(os.path.dirname(HERE))
    import tiledmm  # noqa: E402

project = "tiledmm"
author = "tiledmm contributors"
copyright = "tiledmm contributors"
release = version = tiledmm.__version__

extensions = [
    "myst_nb",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "tiledmm_docs",
]

source_suffix = {".rst": "restructuredtext", ".md": "myst-nb", ".ipynb": "myst-nb"}
exclude_patterns = ["_build", "**.ipynb_checkpoints", "_generated", "_ext"]

# Notebooks: shown with the outputs they were committed with, never run by the build.
nb_execution_mode = "off"
nb_merge_streams = True

myst_enable_extensions = ["colon_fence", "deflist", "dollarmath"]
myst_heading_anchors = 3

autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"members": True, "undoc-members": False, "show-inheritance": False}
napoleon_google_docstring = True
napoleon_numpy_docstring = True

html_theme = "furo"
html_title = f"tiledmm {release}"
html_static_path = ["_static"]
html_css_files = ["tiledmm.css"]   # notebook code cells wrap at the page width
html_favicon = "_static/favicon.svg"
html_show_sourcelink = False
