"""Configuration as code: the node's configuration as one document, and applying one.

The document names things as an operator does, not by the node's ids:
domains by host, buckets by name, rules by (domain, path), a rule's bucket by
the bucket's name. current() reads it off a state document (what GET
/api/config answers and `contentnode config export` prints); apply() makes a
transaction's state match it, validating every record with the record
tables (core/records.py) and the same record rules as the API handlers, and
raises FieldError (naming the member, e.g. "buckets.media.endpoint") before
anything commits. Writing the same values again changes no record, so the
store moves no revision. A section the document leaves out is left as is.
The whole-object sections (settings, notifications, policy) are Whole pairs
the caller hands in (core/config_whole.py, auth/policy.py): this module
knows their names, not their members.
"""

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from contentnode.core import buckets, domains, edge_rules, rules
from contentnode.core.fields import FieldError

RECORDS = ("domains", "buckets", "rules")
DOMAIN_MEMBERS = ("redirect", *domains.EDGE_MEMBERS)    # what of a domain the document holds
WHOLES = ("settings", "notifications", "policy")
SECTIONS = RECORDS + WHOLES
_NODE_WRITTEN = frozenset({"id", "revision", "created_at", "updated_at", "last_check"})
SECRET_SET = "secret_key_set"
_CHECKED = _NODE_WRITTEN | {"status", "certificate"}   # a domain's check outcome and certificate


def _bucket_view(record: Mapping) -> dict:
    out = {k: v for k, v in record.items() if k not in _NODE_WRITTEN and k != "name"}
    if out.get("type") == "s3":
        out[SECRET_SET] = bool(out.pop("secret_key"))
    return out


@dataclass(frozen=True)
class Whole:
    """A whole-object section: `view(doc)` is it as the document holds it (no secret values);
    `apply(tx, given)` makes the transaction's section match `given` (FieldError naming the member
    otherwise), writes only what differs, and returns the secret members whose value it changed."""

    view: Callable[[Mapping], dict]
    apply: Callable[[object, object], list]


def current(doc: Mapping, wholes: Mapping[str, Whole]) -> dict:
    """The document of a state, secrets as "<name>_set" flags ("secret_key_set": true)."""
    names = {key: record["name"] for key, record in doc.get("buckets", {}).items()}
    out_rules = []
    for record in sorted(doc.get("rules", {}).values(), key=lambda r: (r["domain"], r["path"])):
        view = {k: v for k, v in record.items() if k not in _NODE_WRITTEN}
        out_rules.append({"domain": view.pop("domain"), "path": view.pop("path"),
                          "bucket": names.get(view.pop("bucket"), record["bucket"]), **view})
    return {
        "domains": {host: {name: record[name] for name in DOMAIN_MEMBERS if record.get(name) is not None}
                    for host, record in sorted(doc.get("domains", {}).items())},
        "buckets": {record["name"]: _bucket_view(record)
                    for record in sorted(doc.get("buckets", {}).values(), key=lambda b: b["name"].lower())},
        "rules": out_rules,
        **{name: wholes[name].view(doc) for name in WHOLES},
    }


def project(section: str, record) -> object:
    """What of a record moves the node-wide config revision when it changes: the record with its
    secrets, without what the node writes itself (a check's outcome, a certificate, times). Any
    record shape goes: the store calls it on every record a commit to these sections touched. A
    member of a whole-object section (a setting, a channel, the policy's limits) counts whole."""
    if section not in RECORDS or not isinstance(record, dict):
        return record
    return {k: v for k, v in record.items() if k not in _CHECKED}


def at(prefix: str, exc: FieldError) -> FieldError:
    """exc placed under `prefix` in the document: its field and message start with the whole place
    (once, when an inner part already placed it: "notifications.email.to: ...")."""
    field = f"{prefix}.{exc.field}" if exc.field else prefix
    message = exc.message.removeprefix(f"{exc.field}: ") if exc.field else exc.message
    return FieldError(f"{field}: {message}", field)


def object_at(value, where: str) -> dict:
    if not isinstance(value, dict):
        raise FieldError(f"{where} must be an object", where)
    return value


class Applier:
    """Applies a document inside one store transaction `tx`; `stamp` is the time written on what
    changes, `new_id()` the id of a new record, `roots` where folder buckets may lie, `guard(record)`
    the outbound check of an http bucket, `limits` the most records per section, `wholes` the
    whole-object sections, `countries` the node's country database (core/geoip.py; None: rules with a
    country list are refused). secrets_changed names each secret member the document gave a value other
    than the one the node held ("buckets.media.secret_key"), never the values."""

    def __init__(self, tx, stamp: str, new_id: Callable[[], str], roots, guard: Callable[[dict], None],
                 limits: Mapping[str, int], wholes: Mapping[str, Whole], countries=None):
        self.tx, self.stamp, self.new_id, self.roots, self.guard, self.limits = tx, stamp, new_id, roots, guard, limits
        self.wholes, self.countries = wholes, countries
        self.counts = {name: {"created": 0, "changed": 0, "deleted": 0} for name in SECTIONS}
        self.deleted_hosts: list = []
        self.secrets_changed: list = []

    def apply(self, document) -> dict:
        """Every section the document gives, then the references of every rule. The counts per section."""
        object_at(document, "document")
        unknown = sorted(set(document) - set(SECTIONS))
        if unknown:
            raise FieldError(f"{unknown[0]} is not a section of the configuration (sections: "
                             f"{', '.join(SECTIONS)})", unknown[0])
        if "domains" in document:
            self._domains(object_at(document["domains"], "domains"))
        if "buckets" in document:
            self._buckets(object_at(document["buckets"], "buckets"))
        if "rules" in document:
            self._rules(document["rules"])
        self._references()
        for name in WHOLES:
            if name in document:
                self._whole(name, document[name])
        return self.counts

    def _whole(self, name: str, given) -> None:
        before = self.wholes[name].view(self.tx)
        try:
            changed = self.wholes[name].apply(self.tx, given)
        except FieldError as exc:
            raise at(name, exc) from None
        self.secrets_changed += [f"{name}.{member}" for member in changed]
        if changed or self.wholes[name].view(self.tx) != before:
            self.counts[name]["changed"] = 1

    def _limit(self, name: str, size: int) -> None:
        if size > self.limits[name]:
            raise FieldError(f"a node holds at most {self.limits[name]} {name}", name)

    def _put(self, name: str, section, key, record: dict) -> None:
        """Store `record` under key: a new one, or the old one with the document's values (same values: untouched)."""
        old = section.get(key)
        if old is None:
            section[key] = {**record, "created_at": self.stamp, "updated_at": self.stamp}
            self.counts[name]["created"] += 1
            return
        merged = {**old, **record}
        if merged != old:
            section[key] = dict(merged, updated_at=self.stamp)
            self.counts[name]["changed"] += 1

    def _drop(self, name: str, section, keep) -> list:
        gone = [key for key in list(section) if key not in keep]
        for key in gone:
            del section[key]
        self.counts[name]["deleted"] += len(gone)
        return gone

    def _domains(self, given: dict) -> None:
        self._limit("domains", len(given))
        section, wanted = self.tx["domains"], {}
        for key, body in given.items():
            where = f"domains.{key}"
            try:
                host = domains.DOMAIN.read({"host": key}, partial=False)["host"]
                extra = sorted(set(object_at(body, where)) - set(DOMAIN_MEMBERS))
                if extra:
                    raise FieldError(f"{extra[0]} is not a member of a domain (members: {', '.join(DOMAIN_MEMBERS)})",
                                     extra[0])
                redirect = body.get("redirect")
                if redirect is not None:
                    redirect = domains.redirect_rule(dict(object_at(redirect, "redirect")), host)
                edge = domains.DOMAIN.read({name: body.get(name) for name in domains.EDGE_MEMBERS},
                                           partial=True, names=domains.EDGE_MEMBERS)
                edge_rules.countries_readable(edge["access"], self.countries)
            except FieldError as exc:
                raise at(where, exc) from None
            if host in wanted:
                raise FieldError(f"domain {host} is given twice", where)
            wanted[host] = {"host": host, **domains.DOMAIN.defaults(), "redirect": redirect, **edge}
        for host, record in wanted.items():
            old = section.get(host)
            self._put("domains", section, host,
                      record if old is None else {name: record[name] for name in DOMAIN_MEMBERS})
        self.deleted_hosts = self._drop("domains", section, wanted)

    def _buckets(self, given: dict) -> None:
        self._limit("buckets", len(given))
        section = self.tx["buckets"]
        by_name = {record["name"].lower(): key for key, record in section.items()}
        wanted: dict = {}
        for name, body in given.items():
            where = f"buckets.{name}"
            try:
                body = {k: v for k, v in object_at(body, where).items() if k != SECRET_SET}
                key = by_name.get(str(name).lower())
                old = section[key] if key is not None else None
                if old is not None and old["type"] == "s3" and "secret_key" not in body:
                    body["secret_key"] = old["secret_key"]   # no reference in the document: keep the node's
                fields = buckets.record_fields(dict(body, name=name), partial=False, roots=self.roots,
                                               of_kind=None if old is None else old["type"])
                buckets.check_record(fields)
                self.guard(fields)
            except FieldError as exc:
                raise at(where, exc) from None
            if old is not None:
                self.secrets_changed += [f"{where}.{secret}" for secret in sorted(buckets.BUCKET.secrets())
                                         if secret in fields and fields[secret] != old.get(secret)]
            key = key or self.new_id()
            if old is None:
                fields = {"id": key, **buckets.BUCKET.defaults(), **fields}
            elif any(old.get(k) != v for k, v in fields.items() if k != "name"):
                fields["last_check"] = None   # the last check was of another configuration
            wanted[key] = fields
        clash = buckets.BUCKET.first_clash(wanted)
        if clash is not None:
            raise FieldError(f"bucket name {wanted[clash[0]]['name']!r} is given twice", "buckets")
        for key, record in wanted.items():
            self._put("buckets", section, key, record)
        self._drop("buckets", section, wanted)

    def _rules(self, given) -> None:
        if not isinstance(given, list):
            raise FieldError("rules must be a list", "rules")
        self._limit("rules", len(given))
        section = self.tx["rules"]
        ids = {key: key for key in self.tx["buckets"]}
        ids.update({record["name"].lower(): key for key, record in self.tx["buckets"].items()})
        by_place = {(r["domain"], r["path"]): key for key, r in section.items()}
        view = {"domains": self.tx["domains"], "buckets": self.tx["buckets"]}
        wanted: dict = {}
        for index, body in enumerate(given):
            where = f"rules[{index}]"
            try:
                body = dict(object_at(body, where))
                if isinstance(body.get("bucket"), str):
                    body["bucket"] = ids.get(body["bucket"].lower(), body["bucket"])
                fields = rules.record_fields(body, view, partial=False, countries=self.countries)
            except FieldError as exc:
                raise at(where, exc) from None
            place = (fields["domain"], fields["path"])
            if any((r["domain"], r["path"]) == place for r in wanted.values()):
                raise FieldError(f"{where}: a rule for {place[1]} on {place[0]} is given twice", where)
            key = by_place.get(place) or self.new_id()
            record = {**rules.create_defaults(view, fields["bucket"]), **fields}
            wanted[key] = record if key in section else {"id": key, **record}
        for key, record in wanted.items():
            self._put("rules", section, key, record)
        self._drop("rules", section, wanted)

    def _references(self) -> None:
        """Every rule left must name a domain and a bucket left (a section dropped without its rules)."""
        for key, record in self.tx["rules"].items():
            for field, section in (("domain", "domains"), ("bucket", "buckets")):
                if record[field] not in self.tx[section]:
                    raise FieldError(f"rule {key} ({record['path']} on {record['domain']}) uses {field} "
                                     f"{record[field]}, which the document removes; remove the rule too",
                                     section)
