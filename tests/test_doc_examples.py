"""Every example of README.md and docs/ runs, or at least parses.

The convention, by a fenced block's info string:

* ``python``: the block is a whole program. It is written to a file and run as ``mpiexec -n 2
  python prog.py`` in a fresh directory, with the repository first on PYTHONPATH; it must
  exit 0. Examples keep to tiny sizes and work at any rank count.
* ``sh``, ``bash`` and ``console`` (the lines after a ``$`` prompt, in the latter): the whole
  block must be valid bash (``bash -n``). Each command that starts with ``mpiexec``
  (backslash continuations joined) also runs, in a fresh directory: ``python`` is this
  interpreter, ``collectives-bench`` the checkout's benchmark (``python -m bench.cli``) and
  ``mpiexec`` the launcher of tests/launch.py, with the rank count as written. Other
  commands (``make``, ``pip``, ``sbatch``, ``srun``, the benchmark's own launching modes,
  root-only ones) are checked for syntax only.
* Under docs/results/ the blocks are records of the command lines that produced a page's
  figures (minutes of measuring, on the machine named there): they are checked for syntax
  only.
* Any other block (``text``, indented output) is not code.

Each example is a test of its own, named by file and line; they launch jobs of their own, so
they run in the suite's 1-rank launch only.
"""
import glob
import os
import re
import shlex
import subprocess
import sys

import pytest

from tests.launch import ROOT, clean_env, launcher, program_stderr

pytestmark = pytest.mark.serial(alone=True)

RANKS = 2
TIMEOUT = 180
RECORDS = os.path.join("docs", "results") + os.sep
SHELLS = ("sh", "bash", "console")


def pages():
    """README.md and every Markdown page under docs/, relative to the repository."""
    found = sorted(glob.glob(os.path.join(ROOT, "docs", "**", "*.md"), recursive=True))
    return ["README.md"] + [os.path.relpath(p, ROOT) for p in found]


def blocks(path):
    """(info string, first line number, text) of every fenced block of ``path``."""
    out, info, start, indent, lines = [], None, 0, "", []
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            fence = re.match(r"^( *)```(.*)$", line.rstrip("\n"))
            if info is None and fence:
                indent, info, start, lines = fence.group(1), fence.group(2).strip(), number + 1, []
            elif info is not None and fence:
                out.append((info, start, "".join(lines)))
                info = None
            elif info is not None:
                lines.append(line[len(indent):] if line.startswith(indent) else line)
    return out


def shell_text(info, text):
    """The shell commands of a block: a console block's prompted lines, a script's whole text."""
    if info != "console":
        return text
    return "".join(line[2:] + "\n" for line in text.splitlines() if line.startswith("$ "))


def commands(text):
    """The commands of a shell text, backslash continuations joined, comments dropped."""
    joined = re.sub(r"\\\n\s*", " ", text)
    out = []
    for line in joined.splitlines():
        words = shlex.split(line, comments=True)
        if words:
            out.append(words)
    return out


def examples():
    """pytest params: (kind, page, line, payload) for every example."""
    params = []
    for page in pages():
        record = page.startswith(RECORDS)
        for info, line, text in blocks(page):
            lang = info.split()[0] if info else ""
            if lang == "python":
                params.append(pytest.param("python", page, line, text, id=f"{page}:{line}:python"))
            elif lang in SHELLS:
                script = shell_text(lang, text)
                params.append(pytest.param("syntax", page, line, script, id=f"{page}:{line}:bash-n"))
                for k, words in enumerate([] if record else commands(script)):
                    if words[0] == "mpiexec":
                        params.append(pytest.param("mpiexec", page, line, words,
                                                   id=f"{page}:{line}.{k}:{' '.join(words[3:7])}"))
    return params


def _run(argv, cwd):
    done = subprocess.run(argv, cwd=cwd, env=clean_env(), capture_output=True, text=True, timeout=TIMEOUT)
    return done.returncode, done.stdout, program_stderr(done.stderr)


def _mpiexec(words):
    """An mpiexec line of the docs as this environment runs it."""
    out = list(launcher())
    for word in words[1:]:
        if word == "python":
            out.append(sys.executable)
        elif word == "collectives-bench":
            out += [sys.executable, "-m", "bench.cli"]
        else:
            out.append(word)
    return out


@pytest.mark.parametrize("kind, page, line, payload", examples())
def test_example(kind, page, line, payload, tmp_path):
    where = f"{page}, the block at line {line}"
    if kind == "syntax":
        done = subprocess.run(["bash", "-n"], input=payload, capture_output=True, text=True)
        assert done.returncode == 0, f"{where} is not valid bash: {done.stderr}"
        return
    if kind == "python":
        prog = tmp_path / "example.py"
        prog.write_text(payload)
        argv = [*launcher(), "-n", str(RANKS), sys.executable, str(prog)]
    else:
        argv = _mpiexec(payload)
    status, out, err = _run(argv, tmp_path)
    assert status == 0, f"{where} exited {status}:\n{out[-2000:]}\n{err[-3000:]}"


def test_the_convention_finds_the_examples():
    """The pages hold examples of every kind, and each README example is among them."""
    found = examples()
    kinds = {p.values[0] for p in found}
    assert kinds == {"python", "mpiexec", "syntax"}
    readme = [p for p in found if p.values[1] == "README.md"]
    assert {p.values[0] for p in readme} == {"python", "syntax"}
    assert commands("a \\\n  b # c\n\n# d\nmpiexec -n 2 python -c 'x = 1'\n") == [
        ["a", "b"], ["mpiexec", "-n", "2", "python", "-c", "x = 1"]]
    assert shell_text("console", "$ make demo\noutput\n") == "make demo\n"
