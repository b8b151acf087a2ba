"""Request paths: percent-decoding, the checks every public request passes.

The public port decodes each request target with decode_path (public/visit.py);
the admin API decodes the URLs it is given (purge, warm, probe) the same way
through services/delivery.py, so both read one path alike. A refused path is a
PathError whose message is the client's.
"""

import re
from urllib.parse import unquote

MAX_PATH_BYTES = 4096
CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_BAD_PERCENT = re.compile(r"%(?![0-9A-Fa-f]{2})")


class PathError(ValueError):
    """A path no stage may see; the message says why (a 400 for the client)."""


def decode_path(raw_path: str) -> str:
    """The percent-decoded path, or PathError for bad escapes, bytes that are not UTF-8 and controls."""
    if "%" not in raw_path:
        return raw_path
    if _BAD_PERCENT.search(raw_path):
        raise PathError('a "%" in the path is not followed by two hex digits')
    try:
        path = unquote(raw_path, errors="strict")
    except UnicodeDecodeError:
        raise PathError("the path is not valid UTF-8 once decoded") from None
    if CONTROL.search(path):
        raise PathError("control characters (NUL included) are not allowed in paths")
    return path
