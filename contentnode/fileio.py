"""Durable file writes: what is acknowledged must survive kill -9 and power loss."""

import fcntl
import os
import pwd
import secrets
import stat

from contentnode import oscalls


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_all(fd: int, data: bytes) -> None:
    """os.write may write less than asked: loop until all of it is written (no torn lines or records)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _write_parts(fd: int, parts: list) -> None:
    """Write byte strings one after another with writev, without joining them first."""
    for start in range(0, len(parts), _IOV_BATCH):
        batch = parts[start:start + _IOV_BATCH]
        written = os.writev(fd, batch)
        if written < sum(map(len, batch)):   # a short write: finish this batch the plain way
            write_all(fd, b"".join(batch)[written:])


_IOV_BATCH = 512  # below every system's IOV_MAX


def atomic_write(path: str, data: bytes | list, mode: int = 0o600) -> None:
    """Write `data` to `path` so that readers see the old or the new content, never a mix.

    `data` is bytes or a list of byte strings written in order (a large
    document need not be joined into one buffer first).
    Temp file in the same folder, write, fsync, rename over, fsync the folder.
    On any error the old file is untouched and the temp file removed.
    """
    folder = os.path.dirname(os.path.abspath(path))
    tmp = os.path.join(folder, f".{os.path.basename(path)}.{secrets.token_hex(6)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        if isinstance(data, list):
            _write_parts(fd, data)
        else:
            write_all(fd, data)
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        os.unlink(tmp)
        raise
    os.close(fd)
    try:
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    fsync_dir(folder)


def remove_stale_temps(folder: str, skip=("cache",)) -> int:
    """Delete temp files a killed writer left in the data dir and its folders.

    Call only while holding the data dir lock. The cache is skipped: it checks
    its own entries when it starts.
    """
    removed = 0
    for root, dirs, files in os.walk(folder):
        if root == folder:
            dirs[:] = [d for d in dirs if d not in skip]
        for name in files:
            if name.startswith(".") and name.endswith(".tmp"):
                os.unlink(os.path.join(root, name))
                removed += 1
    return removed


def ensure_private_dir(path: str) -> None:
    """Create `path` and make it 0700: it holds keys, password hashes or visitors' content.

    Missing parents are created 0700 too (os.makedirs gives them the umask's 0755).
    """
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        ensure_private_dir(parent)
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    os.chmod(path, 0o700)


def permission_problem(path: str) -> str:
    """Why `path` cannot be written and what to do: the nearest existing folder's owner and mode."""
    existing = os.path.abspath(path)
    while not os.path.exists(existing) and os.path.dirname(existing) != existing:
        existing = os.path.dirname(existing)
    info = os.stat(existing)
    me = _user_name(os.geteuid())
    owner = _user_name(info.st_uid)
    return (f"{path} is not writable: {existing} belongs to {owner} with mode "
            f"{stat.S_IMODE(info.st_mode):04o} and contentnode runs as {me}; run contentnode as {owner}, "
            f"give the folder to {me} (chown -R {me} {existing}), or choose another --data-dir")


def _user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


class DataDirLock:
    """An exclusive lock on the data dir, so a daemon and an offline command never both write."""

    def __init__(self, data_dir: str):
        self.path = os.path.join(data_dir, "lock")
        self._fd: int | None = None

    def acquire(self) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            oscalls.attempt("flock", "the data dir is not locked against a second process",
                            fcntl.flock, fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise RuntimeError(f"the data dir {os.path.dirname(self.path)} is in use by another "
                               "contentnode process (stop the daemon first, or use the API)") from None
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
