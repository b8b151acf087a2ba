"""The admin API: one module per resource area, each declaring plain attributes.

Every module exports ROUTES; one that shows a section in GET /api/panel
declares PANEL_SECTIONS [(name, scope, builder)]. Adding an area is adding its
module to MODULES (and, if it keeps data in the state document, its section to
contentnode/schema.py, which the offline commands read without this package);
the router, the panel, the authorization tests and the spec conformance test
pick it up from here.
"""

import json

from contentnode import __version__
from contentnode.auth.sessions import COOKIE
from contentnode.http import openapi
from contentnode.api import (audit, backup, backup_schedule, buckets, cache, certs, config, delivery, domains, fleet,
                             fleet_keys, https, links, login, me, my_sessions, notifications, panel, panel_assets,
                             passkeys, policy, rules, settings, system, tokens, traffic, twofactor, updates, users)

MODULES = [
    system,
    login,
    me,
    panel,
    users,
    twofactor,
    passkeys,
    my_sessions,
    tokens,
    policy,
    audit,
    settings,
    notifications,
    updates,
    backup,
    backup_schedule,
    domains,
    buckets,
    rules,
    config,
    links,
    certs,
    https,
    delivery,
    traffic,
    cache,
    fleet,
    fleet_keys,
    panel_assets,
]

ROUTES = [route for module in MODULES for route in module.ROUTES]

PANEL_SECTIONS = [section for module in MODULES for section in getattr(module, "PANEL_SECTIONS", [])]


def openapi_json() -> str:
    """docs/openapi.json as `make openapi` writes it: the document GET /api/openapi.json answers."""
    return json.dumps(openapi.build(ROUTES, __version__, COOKIE), indent=2, ensure_ascii=False) + "\n"
