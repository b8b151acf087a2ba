"""The field lines of seeded heads, for the tests that compare a whole-head parse with its line
reader (request heads: test_request_heads.py; origin answers: test_origin_wire_heads.py)."""


def field_lines(rng, count: int, clean: bool, good: list, bad: list, bad_share: float, line) -> bytes:
    """`count` field lines, each `line(rng, text)`: a bad one at `bad_share` unless `clean`, else a good
    one, the last of `good` (one too long for a head) only now and then."""
    out = b""
    for _ in range(count):
        if not clean and rng.random() < bad_share:
            out += line(rng, rng.choice(bad))
        else:
            out += line(rng, rng.choice(good[:-1] if rng.random() < 0.99 else good))
    return out
