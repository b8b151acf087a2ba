"""Text checks shared by request validation and domain logic."""

import email.utils


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
