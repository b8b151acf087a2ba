"""The whole-object sections of the configuration document: settings and notifications.

Each is a config_doc.Whole: view() is the section as the document holds it
(secrets as "<name>_set" flags, never values), apply() makes a transaction's
section match a document's, checked by the same rules as PUT /api/settings
and PUT /api/notifications, and writes only when something differs, so the
same document again moves no revision. A member the document leaves out is
its default (TOML has no null: an export leaves null members out), except a
channel secret, which stays as the node holds it unless "<name>_set" is false.
The policy section is auth/policy.py's (core may not import auth).
"""

from collections.abc import Mapping

from contentnode.core import notify
from contentnode.core import settings as st
from contentnode.core.config_doc import Whole, at, object_at
from contentnode.core.fields import FieldError


def _settings_view(doc: Mapping) -> dict:
    return {key: value for key, value in st.effective(doc).items() if key in st.GENERAL_DEFAULTS}


def _settings_apply(tx, given) -> list:
    wanted = dict(st.GENERAL_DEFAULTS, **st.validate(object_at(given, "settings")))
    current = st.effective(tx)
    changes = {key: value for key, value in wanted.items() if current[key] != value}
    if changes:
        tx.setdefault("settings", {}).update(changes)
    return []


SETTINGS = Whole(_settings_view, _settings_apply)


def _notifications_view(doc: Mapping) -> dict:
    return notify.public_view(notify.effective(doc))


def _channel_body(part: str, given, held) -> dict:
    """The PUT /api/notifications body of one part of the document: every member (left out: its
    default), the secret as given, kept (left out, or "<secret>_set" true) or cleared ("_set" false)."""
    body = dict(object_at(given, part))
    if notify.GENERATE_SECRET in body:
        raise FieldError(f"{notify.GENERATE_SECRET} is not a member of the document: give the secret as a "
                         "reference", notify.GENERATE_SECRET)
    defaults = notify.effective({})[part]   # a state holding nothing: the defaults
    secret = notify.SECRETS.get(part)
    if secret is None:
        return {**defaults, **body}
    del defaults[secret]
    flag = body.pop(f"{secret}_set", None)
    if flag is not None and not isinstance(flag, bool):
        raise FieldError(f"{secret}_set must be true or false", f"{secret}_set")
    if secret not in body:
        if flag and not held:
            raise FieldError(f"{secret}_set is true but the node holds no {secret}: give it as a reference, "
                             f'{secret} = {{env = "NAME"}} or {{file = "/path"}}', secret)
        if flag is False or not held:
            body[secret] = None
    return {**defaults, **body}


def notifications(outbound) -> Whole:
    """The notifications section; `outbound` is the node's outbound policy (a push URL's address is vetted
    against it as PUT /api/notifications vets it)."""

    def apply(tx, given) -> list:
        given = object_at(given, "notifications")
        unknown = sorted(set(given) - set(notify.DEFAULT_CONFIG))
        if unknown:
            raise FieldError(f"{unknown[0]} is not a part of notifications (parts: "
                             f"{', '.join(notify.DEFAULT_CONFIG)})", unknown[0])
        current = notify.effective(tx)
        body = {}
        for part in notify.DEFAULT_CONFIG:
            try:
                body[part] = _channel_body(part, given.get(part, {}), current[part].get(notify.SECRETS.get(part, "")))
            except FieldError as exc:
                raise at(part, exc) from None
        new = notify.merge(current, body)
        notify.check_destinations(new, body, outbound)
        if new != current:
            tx["notifications"] = new
        return [f"{part}.{secret}" for part, secret in notify.SECRETS.items()
                if new[part][secret] != current[part][secret]]

    return Whole(_notifications_view, apply)
