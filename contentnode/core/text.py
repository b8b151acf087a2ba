"""Text checks shared by request validation and domain logic."""

import email.utils
import json
import re

# Control characters (C0, DEL, C1) and the Unicode line and paragraph separators:
# refused in one-line text, so a name cannot break a mail, a log line or a UI row.
CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def one_line(value: str) -> bool:
    """True when value holds no control character or line separator, at its ends included.

    Checked before any trimming: str.strip() removes separators silently, so
    "\u2028x.example" would otherwise be stored as x.example.
    """
    return CONTROL.search(value) is None


def escaped_line(value, limit: int = 200) -> str:
    """A value as one line: line breaks and other control characters escaped, length capped,
    so text someone typed (a username, a bucket name) cannot add lines to an operator's alert."""
    text = "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in str(value))
    return text if len(text) <= limit else text[:limit] + "..."


def encodable(value: str) -> bool:
    """False for text holding lone surrogates ("\\ud800" in JSON), which no UTF-8 file can store."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


MAX_DIGITS = 18  # every count, size, time and port fits; int() never sees a 4,301-digit string


def whole_number(text) -> int | None:
    """The value of a string of 1 to 18 ASCII digits, else None.

    Numbers from the wire (headers, query strings, origin replies) pass here:
    str.isdigit also accepts "²", and int() raises on more than 4,300 digits.
    """
    if not isinstance(text, str) or not 0 < len(text) <= MAX_DIGITS or not text.isascii() or not text.isdigit():
        return None
    return int(text)


def http_date(text: str | None) -> float | None:
    """An HTTP date (Date, Last-Modified, If-Modified-Since) in epoch seconds, or None when
    absent or malformed."""
    if not text:
        return None
    try:
        return email.utils.parsedate_to_datetime(text).timestamp()
    except (TypeError, ValueError, IndexError):
        return None


def json_loads(data, **options):
    """json.loads for bytes or text from outside (a request, a bucket, another server): too deep a
    nesting ("[" * 1200) raises ValueError like any other text that is not JSON, where json.loads
    raises RecursionError, which the callers' `except ValueError` would not catch."""
    try:
        return json.loads(data, **options)
    except RecursionError:
        raise ValueError("the JSON is nested too deeply") from None
