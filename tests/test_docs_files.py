"""The docs name no file the repository does not hold (README, docs/, contrib/, bench/)."""

import os
import re

from tests.node import ROOT

DOCS = ["README.md", "docs/API.md", "docs/DEVELOPING.md", "bench/README.md",
        "contrib/contentnode.service", "contrib/contentnode.toml"]
TOP = ("contentnode", "contrib", "docs", "tests", "bench", ".ci")
OUTSIDE_DOCUMENTS = re.compile(r"\b(DESIGN|SPEC)\b")  # the project's notes outside the repository


def repository_files() -> set:
    found = set()
    for dirpath, dirnames, filenames in os.walk(ROOT):
        dirnames[:] = [d for d in dirnames if d not in (".git", ".venv", "__pycache__", "build")]
        found.update(os.path.relpath(os.path.join(dirpath, f), ROOT) for f in filenames)
    return found


def named_files(text: str):
    """Markdown files (FOO.md, ../x/FOO.md) and paths under the repository's top folders."""
    yield from (name for name in re.findall(r"(?<![\w./:-])([\w./-]*\.md)\b", text)
                if not name.startswith("/"))  # an absolute path is an installed file
    for top in TOP:  # a glob (bench/bench_*.py) names no one file
        yield from (m.group(1) for m in re.finditer(
            rf"(?<![\w/.-])({re.escape(top)}/[\w./-]*[\w/])(?![\w*])", text))


def exists(name: str, doc: str, files: set) -> bool:
    path = name.rstrip("/")
    if "/" not in path:
        return path in {os.path.basename(f) for f in files}
    candidates = {path, os.path.normpath(os.path.join(os.path.dirname(doc), path))}
    return any(c in files or any(f.startswith(c + "/") for f in files) for c in candidates)


def test_every_named_file_exists():
    files = repository_files()
    missing = []
    for doc in DOCS:
        with open(os.path.join(ROOT, doc), encoding="utf-8") as f:
            text = f.read()
        missing += [f"{doc}: {name}" for name in named_files(text) if not exists(name, doc, files)]
        missing += [f"{doc}: cites {m.group(0)}" for m in OUTSIDE_DOCUMENTS.finditer(text)]
    assert missing == []


def test_the_check_sees_what_the_old_docs_cited():
    old = "Read ../shared/SPEC.md and ../shared/DESIGN.md first; see DESIGN §3 and tests/nowhere.py."
    names = list(named_files(old))
    assert names == ["../shared/SPEC.md", "../shared/DESIGN.md", "tests/nowhere.py"]
    assert not any(exists(n, "docs/DEVELOPING.md", repository_files()) for n in names)
