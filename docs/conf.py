"""Sphinx configuration: the API reference from the docstrings, the pages in Markdown."""

import importlib
import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
# One BLAS thread and single-threaded Eigen, as everywhere in the project (see the README's notes).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false")

import jaxstop  # noqa: E402

project = "jaxstop"
author = "jaxstop developers"
copyright = "jaxstop developers"
release = jaxstop.__version__
version = release

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.mathjax",
    "myst_parser",
]

source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build"]
myst_enable_extensions = ["dollarmath"]
myst_heading_anchors = 3

# Google-style docstrings. ``Attributes:`` of a NamedTuple become ``:ivar:`` fields of the class, so
# they do not compete with the fields autodoc finds on the class itself (skipped below).
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_ivar = True
napoleon_use_rtype = False

autodoc_member_order = "bysource"
autodoc_default_options = {"members": True, "undoc-members": False, "show-inheritance": False}
# Signatures stay readable: the types go into the parameter descriptions, and the
# ``from __future__ import annotations`` strings are shown as written.
autodoc_typehints = "description"
autodoc_typehints_description_target = "documented"
autodoc_preserve_defaults = True

# The optional Optuna integration is documented when Optuna (and the integration) can be imported.
try:
    importlib.import_module("jaxstop.integrations.optuna")
    HAS_OPTUNA = True
except ImportError:
    HAS_OPTUNA = False


def _optuna_page(app, docname, source):
    """Without Optuna (or before the integration exists) its reference page says how to get it
    instead of failing to import the module."""
    if docname == "api/integrations" and not HAS_OPTUNA:
        source[0] = ("# jaxstop.integrations.optuna\n\n"
                     "Install the extra `optuna` (`pip install \".[optuna]\"`) and build the docs again to see "
                     "this module's reference.\n")


def _skip_namedtuple_fields(app, what, name, obj, skip, options):
    """A NamedTuple's fields are documented by its ``Attributes:`` section; the generated
    ``Alias for field number i`` properties would repeat each one."""
    doc = getattr(obj, "__doc__", None) or ""
    if doc.startswith("Alias for field number"):
        return True
    return skip


_NAMES = re.compile(r"^\s*\*{0,2}\w+(,\s*\*{0,2}\w+)*,\s*$")          # "a, b, c," and nothing else
_NAMES_THEN_COLON = re.compile(r"^\s*\*{0,2}\w+(,\s*\*{0,2}\w+)*\s*:")  # "d, e: description"
_SECTIONS = ("Args:", "Arguments:", "Parameters:", "Attributes:")


def _join_wrapped_names(app, what, name, obj, options, lines):
    """An ``Args:`` entry may name several parameters that share a description; when that list of
    names is wrapped onto a second line (to keep lines short), join it back into one line, which
    is how napoleon reads an entry. Runs before napoleon (priority 400 < its 500)."""
    section_indent = None
    i = 0
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        indent = len(line) - len(line.lstrip())
        if stripped in _SECTIONS:
            section_indent = indent
        elif stripped and section_indent is not None and indent <= section_indent:
            section_indent = None
        if (section_indent is not None and i + 1 < len(lines) and _NAMES.match(line)
                and _NAMES_THEN_COLON.match(lines[i + 1])
                and len(lines[i + 1]) - len(lines[i + 1].lstrip()) == indent):
            lines[i] = line.rstrip() + " " + lines[i + 1].strip()
            del lines[i + 1]
            continue
        i += 1


def setup(app):
    app.connect("autodoc-process-docstring", _join_wrapped_names, priority=400)
    app.connect("autodoc-skip-member", _skip_namedtuple_fields)
    app.connect("source-read", _optuna_page)


html_theme = "furo"
html_title = f"jaxstop {release}"
