"""The admin API: one module per resource area, each declaring plain attributes.

Every module exports ROUTES; a module that owns data in the state document
declares SECTIONS ({name: factory of its default}), and one that shows a
section in GET /api/panel declares PANEL_SECTIONS [(name, scope, builder)].
Adding an area is adding its module to MODULES; the router, the store's
schema, the panel, the authorization tests and the spec conformance test pick
it up from here.
"""

from contentnode.api import (audit, backup, buckets, certs, delivery, domains, https, links, login, me,
                             my_sessions, notifications, panel, policy, rules, settings, system,
                             tokens, twofactor, updates, users)
from contentnode.auth.policy import ACCOUNT_SECTIONS

MODULES = [
    system,
    login,
    me,
    panel,
    users,
    twofactor,
    my_sessions,
    tokens,
    policy,
    audit,
    settings,
    notifications,
    updates,
    backup,
    domains,
    buckets,
    rules,
    links,
    certs,
    https,
    delivery,
]

ROUTES = [route for module in MODULES for route in module.ROUTES]

# The store's schema: every top-level section of the state document and its default.
SECTIONS = dict(ACCOUNT_SECTIONS)
for _module in MODULES:
    SECTIONS.update(getattr(_module, "SECTIONS", {}))

PANEL_SECTIONS = [section for module in MODULES for section in getattr(module, "PANEL_SECTIONS", [])]
