"""The TOML writer of `contentnode config export` (contentnode/cli/toml_out.py): tomllib reads back what it wrote."""

import tomllib

import pytest

from contentnode.cli.toml_out import dumps


def test_round_trip_of_the_subset_export_writes():
    document = {
        "domains": {"example.com": {}, "bücher.example": {"redirect": {"to": 'https://x/?a="b"\\\n\t\x01',
                                                                       "code": 308, "keep_path": False}}},
        "buckets": {"media files": {"type": "s3", "path_style": True, "read_timeout": 0}},
        "rules": [{"domain": "example.com", "path": "/", "query": {"only": ["v", "w"]}, "methods": "read"},
                  {"domain": "example.com", "path": "/a", "query": "ignore", "tags": []}],
        "empty": {},
        "none": [],
    }
    text = dumps(document)
    assert tomllib.loads(text) == document
    assert '[domains."bücher.example".redirect]' in text and "[[rules]]" in text


def test_null_is_refused():
    with pytest.raises(ValueError, match="NoneType"):
        dumps({"a": None})
