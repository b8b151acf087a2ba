"""The web panel's static files, read from the package once at start and kept in memory.

Only files with a known media type are loaded (README, licence texts stay
out); the loaded set is the whole set served, so no request path can reach
any other file. Each file carries a strong ETag (a digest of its bytes) so a
browser revalidates cheaply.
"""

import hashlib
import importlib.resources
import os
from dataclasses import dataclass

MEDIA_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".mjs": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".ico": "image/x-icon",
    ".woff2": "font/woff2",
    ".webmanifest": "application/manifest+json",
}


@dataclass(frozen=True)
class StaticFile:
    body: bytes
    media_type: str
    etag: str


def load_panel_files() -> dict[str, StaticFile]:
    """{"js/app.js": StaticFile, ...} for every servable file under contentnode/panel."""
    files = {}
    pending = [("", importlib.resources.files("contentnode") / "panel")]
    while pending:
        prefix, folder = pending.pop()
        if not folder.is_dir():
            continue
        for entry in folder.iterdir():
            name = prefix + entry.name
            if entry.is_dir():
                pending.append((name + "/", entry))
                continue
            media_type = MEDIA_TYPES.get(os.path.splitext(entry.name)[1].lower())
            if media_type is not None:
                body = entry.read_bytes()
                files[name] = StaticFile(body, media_type, '"' + hashlib.sha256(body).hexdigest()[:32] + '"')
    return files
