"""The admin API: one module per resource area, each exporting ROUTES.

Adding an area is adding its module name to MODULES; the router, the
authorization tests and the spec conformance test pick its rows up.
"""

import importlib

MODULES = [
    "system",
    "session",
    "me",
    "panel",
    "users",
    "twofactor",
    "mysessions",
    "policy",
    "audit",
    "settings",
    "notifications",
    "updates",
    "backup",
    "domains",
    "buckets",
    "rules",
    "links",
    "certs",
    "https",
    "traffic",
    "panel_assets",
]


def all_routes() -> list:
    routes = []
    for name in MODULES:
        module = importlib.import_module(f"contentnode.api.{name}")
        routes.extend(module.ROUTES)
    return routes
