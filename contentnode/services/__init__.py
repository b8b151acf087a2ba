"""Application services: what the admin API and the public port both run, below both.

A service takes named collaborators (the store, the clock, the cache...) from
the composition root (app.py build_app), never the App, and never imports
http/, api/, public/, app, daemon or cli: it raises errors of its own, which
the callers map to their answers (.importlinter, docs/ARCHITECTURE.md).
"""
