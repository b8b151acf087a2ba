"""Text checks shared by request validation and domain logic."""


def encodable(value: str) -> bool:
    """False for text holding lone surrogates ("\\ud800" in JSON), which no UTF-8 file can store."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
