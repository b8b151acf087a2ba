"""core/folders.py on its own: the checks that do not depend on a request reaching them."""

import os

import pytest

from contentnode.core import folders
from contentnode.core.folders import FolderOrigin, FolderRoots
from contentnode.core.origin import OriginError


@pytest.fixture
def layout(tmp_path):
    root = tmp_path / "root"
    (root / "site" / "sub").mkdir(parents=True)
    (root / "site" / "sub" / "page.txt").write_bytes(b"inside")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "page.txt").write_bytes(b"OUTSIDE")
    roots = FolderRoots([str(root)], str(tmp_path / "data"))
    return tmp_path, FolderOrigin(str(root / "site"), roots)


def test_a_symlink_swapped_in_after_the_resolution_is_refused_not_followed(layout, monkeypatch):
    """The race the O_NOFOLLOW walk closes: resolution saw a folder, the open meets a symlink."""
    tmp_path, origin = layout
    site = tmp_path / "root" / "site"
    assert origin.open("sub/page.txt").status == 200
    os.rename(site / "sub", site / "was-sub")
    os.symlink(tmp_path / "outside", site / "sub")
    # resolution as it was before the swap: the path is taken as it stands, symlinks not followed
    monkeypatch.setattr(folders.os.path, "realpath", os.path.normpath)
    answer = origin.open("sub/page.txt")
    assert answer.status == 404 and answer.length == 0
    with pytest.raises(OriginError) as refused:
        origin.head("sub/page.txt")
    assert refused.value.status == 404


def test_the_body_is_the_file_and_closing_twice_is_harmless(layout):
    _, origin = layout
    answer = origin.open("sub/page.txt")
    assert answer.status == 200 and answer.length == 6 and b"".join(answer.chunks) == b"inside"
    assert answer.meta["content_type"] == "text/plain; charset=utf-8"
    answer.close()
    answer.close()


def test_keys_with_empty_dot_or_dotdot_components_name_nothing(layout):
    _, origin = layout
    for key in ("", "/sub/page.txt", "sub//page.txt", "sub/./page.txt", "sub/../sub/page.txt", "..", "sub/",
                "sub/page.txt\0"):
        assert origin.open(key).status == 404, key


def test_media_types():
    assert folders.content_type("index.html") == "text/html; charset=utf-8"
    assert folders.content_type("app.js") == "text/javascript; charset=utf-8"
    assert folders.content_type("font.woff2") == "font/woff2"
    assert folders.content_type("photo.webp") == "image/webp"
    assert folders.content_type("archive.tar.gz") == "application/octet-stream"
    assert folders.content_type("no-extension") == "application/octet-stream"
