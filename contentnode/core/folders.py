"""Folder origins: a bucket that is a folder on the node, inside one of `folder_roots`.

Every key is read so that no request can leave its folder: "", "." and ".."
components are refused (and hidden names, `.git` or `.env`, are never served), the path is resolved (symlinks followed) and must stay
inside the folder, and the resolved path is then opened one component at a
time from the root with O_NOFOLLOW, so a symlink swapped in between the check
and the open is refused instead of followed. Only regular files are served:
the last component is checked with lstat before it is opened (opening a
device or FIFO can have effects of its own) and with fstat after it is opened
(O_NONBLOCK, so a FIFO slipped in meanwhile cannot hang the open). A missing
or refused key is a 404, a file the node may not read a 403, anything else an
OriginError (502 on the public port), never a 500.
"""

import base64
import email.utils
import errno
import functools
import itertools
import mimetypes
import os
import stat
import time

from contentnode.core.cache_fill import CHUNK, OriginAnswer
from contentnode.core.fields import FieldError
from contentnode.core.origin import OriginError
from contentnode.core.steps import Steps, elapsed_ms
from contentnode.core.text import encodable

MAX_PATH = 4096
PREVIEW_BYTES = 64
LISTED = 10      # names a check shows
COUNTED = 1000   # entries a check counts (a huge folder is not read whole)
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_MISSING = (errno.ENOENT, errno.ENOTDIR, errno.ELOOP, errno.ENAMETOOLONG, errno.EISDIR)



@functools.cache
def _media_types() -> mimetypes.MimeTypes:
    """Python's own table (not /etc/mime.types: the same answer on every machine) plus the web types
    it lacks; built at the first folder answer, not at every start (building it reads the system's
    mime.types files: a few ms of CPU per process, docs/DEVELOPING.md "Tests")."""
    types = mimetypes.MimeTypes(filenames=())
    for ext, kind in ((".webp", "image/webp"), (".woff", "font/woff"), (".woff2", "font/woff2"),
                      (".js", "text/javascript"), (".mjs", "text/javascript"), (".md", "text/markdown")):
        types.add_type(kind, ext)
    return types


def content_type(name: str) -> str:
    """The media type for a file name; text gets charset=utf-8, a compressed file is octet-stream."""
    kind, encoding = _media_types().guess_type(name, strict=False)
    if kind is None or encoding is not None:
        return "application/octet-stream"
    return f"{kind}; charset=utf-8" if kind.startswith("text/") else kind


def hidden(parts: list[str]) -> bool:
    """Whether a path names a hidden file or folder (`.git`, `.env`, `.htpasswd`): never served,
    since deploys leave them in web roots; `.well-known` (RFC 8615) at the top is the exception."""
    return any(part.startswith(".") and not (i == 0 and part == ".well-known") for i, part in enumerate(parts))


def inside(path: str, folder: str) -> bool:
    """Whether the resolved `path` is `folder` or lies below it (both absolute and resolved)."""
    return path == folder or path.startswith(folder.rstrip("/") + "/")


class FolderRoots:
    """The folders folder buckets may serve from (the start-up value folder_roots).

    The data dir (state with its secrets, keys, cache) lies inside a root when
    a root is one of its parents: a path inside it is servable only through a
    root that is itself inside it (the default <data dir>/sites).
    """

    def __init__(self, roots, data_dir: str):
        self.roots = list(roots)
        self.data_dir = data_dir

    def root_of(self, real: str) -> str | None:
        """The deepest resolved root holding the resolved path `real`, or None when it may not be served."""
        data = os.path.realpath(self.data_dir)
        holding = [root for root in map(os.path.realpath, self.roots) if inside(real, root)]
        if inside(real, data):
            holding = [root for root in holding if inside(root, data) and root != data]
        return max(holding, key=len, default=None)

    def check_path(self, value) -> str:
        """The normalised absolute folder path of a bucket, or FieldError on "path".

        It must lie inside one of the roots once symlinks are resolved. The path
        as given is stored (a symlink such as current -> releases/v3 may move
        later); every request resolves it again and refuses it once it leads outside.
        """
        if not isinstance(value, str) or not value.strip():
            raise FieldError("path must be the absolute path of a folder", "path")
        if len(value) > MAX_PATH or any(ord(c) < 32 or ord(c) == 127 for c in value):
            raise FieldError(f"path must be at most {MAX_PATH} characters, without control characters", "path")
        if not value.startswith("/"):
            raise FieldError('path must be absolute (start with "/")', "path")
        if not encodable(value):
            raise FieldError("path is not valid Unicode text", "path")
        if not self.roots:
            raise FieldError("this node has no folder_roots: folder buckets are turned off", "path")
        path = os.path.normpath(value)
        real = os.path.realpath(path)
        if self.root_of(real) is None:
            raise FieldError(f"path must lie inside one of the folder_roots ({', '.join(self.roots)}), and not "
                             f"in the data dir, once symlinks are resolved; {path} resolves to {real}", "path")
        return path


class _Missing(Exception):
    """The key names nothing servable: 404."""


class FolderOrigin:
    """A folder as an origin (core/origin.py), inside one of `roots`."""

    def __init__(self, path: str, roots: FolderRoots):
        self.path = path
        self.roots = roots

    def _base(self) -> str:
        """The resolved folder; OriginError when it now resolves outside every root."""
        base = os.path.realpath(self.path)
        if self.roots.root_of(base) is None:
            raise OriginError("outside_roots", f"the folder {self.path} resolves to {base}, outside the "
                                               "folder_roots (or into the data dir)")
        return base

    def _open(self, key: str) -> tuple[int, os.stat_result]:
        """(descriptor, fstat) of the regular file at `key`; _Missing, OSError, or OriginError from _base."""
        parts = key.split("/")
        if any(part in ("", ".", "..") or "\0" in part for part in parts) or hidden(parts):
            raise _Missing()
        base = self._base()
        real = os.path.realpath(os.path.join(base, *parts))
        root = self.roots.root_of(real)
        if real == base or not inside(real, base) or root is None:
            raise _Missing()   # a symlink leading out of the folder (or back to it), or into the data dir
        if hidden(os.path.relpath(real, base).split("/")):
            raise _Missing()   # a symlink leading to a hidden file
        *folders, name = os.path.relpath(real, root).split("/")
        fd = os.open(root, _DIR_FLAGS)
        try:
            for folder in folders:
                inner = os.open(folder, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=fd)
                os.close(fd)
                fd = inner
            if not stat.S_ISREG(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode):
                raise _Missing()
            file_fd = os.open(name, _FILE_FLAGS, dir_fd=fd)
        finally:
            os.close(fd)
        info = os.fstat(file_fd)
        if not stat.S_ISREG(info.st_mode):
            os.close(file_fd)
            raise _Missing()
        return file_fd, info

    def _opened(self, key: str) -> tuple[int, os.stat_result]:
        """(fd, stat) of a servable file; OriginError: status 404 or 403 for a refused key, None else."""
        try:
            return self._open(key)
        except _Missing:
            raise _refusal(key, 404) from None
        except OSError as exc:
            if exc.errno in _MISSING:
                raise _refusal(key, 404) from None
            if exc.errno in (errno.EACCES, errno.EPERM):
                raise _refusal(key, 403) from None
            raise OriginError("io", f"cannot read {key!r} in {self.path}: {exc.strerror}") from None

    def _meta(self, key: str, info: os.stat_result) -> dict:
        return {"content_type": content_type(key.rsplit("/", 1)[-1]),
                "etag": f'"{info.st_mtime_ns:x}-{info.st_size:x}"',
                "last_modified": email.utils.formatdate(info.st_mtime, usegmt=True)}

    def open(self, key: str, client_host: str | None = None) -> OriginAnswer:
        try:
            fd, info = self._opened(key)
        except OriginError as exc:
            if exc.status is None:
                raise
            return OriginAnswer(exc.status)
        size = info.st_size

        def chunks():
            pos = 0
            while pos < size:
                data = os.pread(fd, min(CHUNK, size - pos), pos)
                if not data:
                    return   # the file shrank: the cache sees fewer bytes than announced
                pos += len(data)
                yield data

        closed: list[bool] = []

        def close():   # once: a second os.close could close a descriptor reused meanwhile
            if not closed:
                closed.append(True)
                os.close(fd)

        return OriginAnswer(200, self._meta(key, info), size, chunks(), close)

    def head(self, key: str, client_host: str | None = None) -> dict:
        fd, info = self._opened(key)
        os.close(fd)
        return {"status": 200, "size": info.st_size, **self._meta(key, info)}

    def probe(self, key: str) -> dict:
        started = time.monotonic()
        try:
            fd, info = self._opened(key)
        except OriginError as exc:
            return {"ok": False, "status": exc.status, "error": exc.as_dict(), "ms": elapsed_ms(started)}
        try:
            first = os.pread(fd, PREVIEW_BYTES, 0)
        finally:
            os.close(fd)
        return {"ok": True, "status": 200, "size": info.st_size, **self._meta(key, info),
                "first_bytes": base64.b64encode(first).decode("ascii"), "ms": elapsed_ms(started)}

    def check(self) -> dict:
        """resolve (inside the roots), open (a directory the node may enter), list (readable)."""
        steps = Steps()
        started = time.monotonic()
        try:
            base = self._base()
        except OriginError as exc:
            steps.add("resolve", False, exc.message, started, code=exc.code)
            return steps.report()
        steps.add("resolve", True, f"{self.path} resolves to {base}, inside the folder_roots", started)
        started = time.monotonic()
        try:
            fd = os.open(base, _DIR_FLAGS)
        except OSError as exc:
            code = {errno.ENOENT: "not_found", errno.ENOTDIR: "not_directory",
                    errno.EACCES: "access_denied"}.get(exc.errno or 0, "io")
            steps.add("open", False, f"cannot open the folder {base}: {exc.strerror}", started, code=code)
            return steps.report()
        steps.add("open", True, f"{base} is a directory the node can enter", started)
        started = time.monotonic()
        try:
            with os.scandir(fd) as entries:
                names = [entry.name for entry in itertools.islice(entries, COUNTED + 1)]
        except OSError as exc:
            steps.add("list", False, f"cannot list {base}: {exc.strerror}", started, code="access_denied")
            return steps.report()
        finally:
            os.close(fd)
        steps.add("list", True, _describe_listing(sorted(names)), started)
        return steps.report()


def _refusal(key: str, status: int) -> OriginError:
    if status == 403:
        return OriginError("access_denied", f"the node may not read {key!r} (permissions)", 403)
    return OriginError("no_such_key", f"no regular file has the key {key!r} in this folder", 404)


def _describe_listing(names: list) -> str:
    if not names:
        return "the folder is readable and empty"
    count = f"more than {COUNTED} entries" if len(names) > COUNTED else \
        f"{len(names)} entr{'ies' if len(names) != 1 else 'y'}"
    more = ", ..." if len(names) > LISTED else ""
    return f"{count}: {', '.join(repr(n) for n in names[:LISTED])}{more}"
