"""The generated docs pages (tools/docs_pages.py) against the code they come from.

docs/algorithms.md is generated from the algorithm modules' headers and the registry, and
docs/configuration.md from collectives.config.VARIABLES: a committed page that differs from
what the generator writes now fails here, so a header or a variable changed without
``make docs-pages`` does not go unnoticed.
"""
import importlib
import os
import sys

import pytest

pytestmark = pytest.mark.serial

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
docs_pages = importlib.import_module("tools.docs_pages")


def _committed(path):
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        return f.read()


@pytest.mark.parametrize("page", sorted(docs_pages.PAGES))
def test_generated_page_is_current(page):
    path = docs_pages.PAGES[page]
    text = getattr(docs_pages, f"{page}_page")()
    assert _committed(path) == text, f"{path} is stale: run make docs-pages (python tools/docs_pages.py)"


def test_algorithms_page_follows_a_header(monkeypatch):
    """A changed line of one module's header changes the page, so the test above fails."""
    ring = importlib.import_module("collectives.algorithms.allreduce_ring")
    before = docs_pages.algorithms_page()
    assert "**Cost.** 2 (p-1) alpha + 2 ((p-1)/p) n beta" in before
    monkeypatch.setattr(ring, "__doc__", ring.__doc__.replace("Cost: 2 (p-1) alpha", "Cost: 3 (p-1) alpha"))
    after = docs_pages.algorithms_page()
    assert after != before and "**Cost.** 3 (p-1) alpha" in after
    assert docs_pages.stale({docs_pages.PAGES["algorithms"]: after}) == [docs_pages.PAGES["algorithms"]]


def test_algorithms_page_has_every_algorithm_and_its_lines():
    from collectives.registry import ALGORITHMS, FUSED, NODE_ALGORITHMS

    text = docs_pages.algorithms_page()
    for rows in (*ALGORITHMS.values(), *NODE_ALGORITHMS.values()):
        for algo in rows:
            section = text.split(f"### {algo.name}\n", 1)[1].split("\n### ", 1)[0]
            for label in ("Steps", "Restrictions", "Cost", "Bytes sent per rank"):
                assert f"**{label}.**" in section, (algo.name, label)
    for algo in FUSED.values():
        assert f"| `{algo.name}` |" in text


def test_configuration_page_follows_the_variables(monkeypatch):
    from collectives import config

    text = docs_pages.configuration_page()
    for var in config.VARIABLES:
        assert f"| `{var.name}` |" in text
    extra = config.Variable("COLLECTIVES_EXAMPLE", "bool", False, "run", "An example.", lambda n, t: t)
    monkeypatch.setattr(config, "VARIABLES", config.VARIABLES + (extra,))
    changed = docs_pages.configuration_page()
    assert "| `COLLECTIVES_EXAMPLE` | bool | `0` | run | An example. |" in changed
    assert docs_pages.stale({docs_pages.PAGES["configuration"]: changed}) == [docs_pages.PAGES["configuration"]]


def test_offline_check_finds_remote_loads(tmp_path):
    (tmp_path / "a.html").write_text('<script src="https://cdn.example.org/x.js"></script>'
                                     '<link rel="stylesheet" href="_static/a.css"><img src="//x.org/y.png">')
    (tmp_path / "b.css").write_text("@import url(https://fonts.example.org/css);")
    found = docs_pages.remote_loads(str(tmp_path))
    assert len(found) == 3
    (tmp_path / "a.html").write_text('<script src="_static/x.js"></script><a href="https://example.org">a link</a>')
    (tmp_path / "b.css").write_text("")
    assert docs_pages.remote_loads(str(tmp_path)) == []
