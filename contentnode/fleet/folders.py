"""Folder buckets across a fleet: a folder bucket's path must lie inside every
node's own folder_roots, or that node refuses the whole bundle (restore
checks). Each node reports its roots in its status; the primary compares the
paths it shares with them, so it can warn before a replica refuses.

The comparison is by the paths as written (the primary cannot resolve another
machine's symlinks): it names the certain refusals, the replica's own check
stays the judge.
"""

import os

from contentnode.core.folders import inside


def _outside(path: str, roots: list) -> bool:
    clean = os.path.normpath(path)
    return not any(isinstance(root, str) and inside(clean, os.path.normpath(root)) for root in roots)


def refusals(buckets: dict, row: dict) -> list:
    """What the node of a status row cannot take of these buckets: one sentence per folder bucket
    outside its reported folder_roots (nothing when it did not report them)."""
    roots = row.get("folder_roots")
    if not isinstance(roots, list):
        return []
    where = ", ".join(r for r in roots if isinstance(r, str)) or "none: folder buckets are turned off"
    return [f"folder bucket {record.get('name', bucket_id)!r}: {record['path']} is outside its folder_roots "
            f"({where})"
            for bucket_id, record in sorted(buckets.items())
            if record.get("type") == "folder" and isinstance(record.get("path"), str)
            and _outside(record["path"], roots)]


def warnings(buckets: dict, rows: list) -> list:
    """The primary's warnings for a change of its buckets: each replica it knows that will refuse
    the fleet's configuration, and why."""
    out = []
    for row in rows:
        for reason in refusals(buckets, row):
            out.append(f"replica {row.get('name') or row['node_id']} ({row['node_id']}) will refuse the fleet's "
                       f"configuration: {reason}")
    return out
