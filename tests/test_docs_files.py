"""The docs name no file the repository does not hold (README, docs/, contrib/, bench/), and the
code's citations (`docs/API.md, "Heading"`, paths of the repository) lead to files and sections
that exist: nothing cites notes kept outside the repository."""

import os
import re

from tests.node import ROOT

DOCS = ["README.md", "docs/API.md", "docs/ARCHITECTURE.md", "docs/DEVELOPING.md", "bench/README.md",
        "contrib/contentnode.service", "contrib/contentnode.toml"]
TOP = ("contentnode", "contrib", "docs", "tests", "bench", ".ci", "packaging")
OUTSIDE_DOCUMENTS = re.compile(r"\b(DESIGN|SPEC)\b")  # the project's notes outside the repository
CODE = ("contentnode", "tests", "bench", "contrib", ".ci", "packaging")
CODE_FILES = re.compile(r"(\.(py|js|css|html|toml|cfg|service|md|sh)|/Makefile|/run)$")
# `docs/API.md, "Conventions"`, `docs/ARCHITECTURE.md ("Health and drain")`: a file and one of its sections
CITATION = re.compile(r'(docs/[\w-]+\.md),? \(?"([^"\n]{2,80})"')
THIS_FILE = "tests/test_docs_files.py"  # its own vocabulary names what it looks for


def repository_files() -> set:
    found = set()
    for dirpath, dirnames, filenames in os.walk(ROOT):
        # node_modules: the cache suite's npm packages (make peers), git-ignored, not the repository's
        dirnames[:] = [d for d in dirnames if d not in (".git", ".venv", "__pycache__", "build", "node_modules")]
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
    design = "DESIGN"   # spelled apart, so a grep for stale citations does not find this test itself
    old = f"Read ../shared/SPEC.md and ../shared/{design}.md first; see {design} §3 and tests/nowhere.py."
    names = list(named_files(old))
    assert names == ["../shared/SPEC.md", "../shared/DESIGN.md", "tests/nowhere.py"]
    assert not any(exists(n, "docs/DEVELOPING.md", repository_files()) for n in names)


def code_files(files: set) -> list:
    return sorted(f for f in files if f.startswith(tuple(t + "/" for t in CODE)) and CODE_FILES.search("/" + f)
                  and "/vendor/" not in f and f != THIS_FILE)


# the fleet's bucket layout under its default prefix (docs/API.md, "Bucket layout")
FLEET_BUCKET_KEY = re.compile(r"contentnode/(bundle\.json|nodes/|joins/|leases/|acme-challenges/|probe/)")


def cites_a_file(name: str) -> bool:
    """A path of the repository's code or docs (tests name S3 keys such as docs/hello.txt too, and
    the fleet's bucket objects live under the default prefix contentnode/: bundle.json, nodes/*.json)."""
    if FLEET_BUCKET_KEY.match(name):
        return False
    return name.startswith(("contentnode/", "bench/", "contrib/")) or (name.startswith("docs/") and name.endswith(".md"))


def sections(doc: str) -> list:
    """Headings of a markdown file and its bold run-in headings (`- **Order of checks**, ...`)."""
    with open(os.path.join(ROOT, doc), encoding="utf-8") as f:
        text = f.read()
    return ([line.lstrip("#").strip() for line in text.splitlines() if line.startswith("#")] +
            re.findall(r"\*\*([^*\n]+)\*\*", text))


def cited_sections_missing(text: str, files: set) -> list:
    missing = []
    for doc, section in CITATION.findall(text):
        if doc not in files:
            missing.append(f"{doc} (no such file)")
        elif not any(s.startswith(section) for s in sections(doc)):
            missing.append(f'{doc}, "{section}" (no such section)')
    return missing


def test_code_cites_files_and_sections_that_exist():
    files = repository_files()
    missing = []
    for path in code_files(files):
        with open(os.path.join(ROOT, path), encoding="utf-8", errors="replace") as f:
            text = f.read()
        missing += [f"{path}: {name}" for name in named_files(text) if cites_a_file(name) and not exists(name, path, files)]
        missing += [f"{path}: {m}" for m in cited_sections_missing(text, files)]
        missing += [f"{path}: cites {m.group(0)}" for m in re.finditer(r"\bDESIGN\b|\bSPEC\.md|\.\./shared", text)]
    assert missing == []


def test_the_citation_check_sees_what_it_must():
    files = repository_files()
    assert code_files(files) and "contentnode/http/router.py" in code_files(files)
    assert cited_sections_missing('see docs/API.md, "Order of checks" and docs/ARCHITECTURE.md ("Trust '
                                  'boundaries")', files) == []
    assert cited_sections_missing('docs/API.md, "No such part"; docs/GONE.md, "Conventions"', files) == [
        'docs/API.md, "No such part" (no such section)', "docs/GONE.md (no such file)"]
