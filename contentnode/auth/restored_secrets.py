"""What a restore does with the node's other secrets: it never rolls one back either.

Beside accounts and tokens (restored_accounts.py) an encrypted backup carries
secrets an operator replaces when they leak: the link signing keys, the
notification channels' secrets (SMTP password, Telegram bot token, webhook
signing secret, ntfy token), the S3 buckets' secret keys and the
certificates' private keys (certs/).
Unless the restorer asks for the backup's credentials as they were
(restore_credentials), a restore keeps the node's current ones:

- the link key ring as the node has it now: its current key and those still
  in their grace period; a key rotated out since stays retired;
- a channel whose secret, or the place and account it is sent to, differs
  from the node's is kept whole as the node has it (a secret belongs with its
  server: the backup's server must not receive the node's secret, nor the
  node's server the backup's); channels without a secret on either side, and
  those unchanged, come from the backup;
- likewise an S3 bucket on both sides whose secret key, access key or
  endpoint differs keeps the node's record (a key deactivated at the provider
  would stop the content it serves; buckets only in the backup come back);
- a host the restored configuration still has keeps the node's certificate
  file (key and chain) and its summary; a host only in the backup gets the
  backup's.

keep_current() reports what it kept, so the restore's answer can name it (key
ids, channel names, bucket ids, hosts: never a secret).
"""

import copy

from contentnode.core import notify, signing

CERT_FOLDER = "certs/"
# The account a channel's secret belongs to, beside where it is sent (notify.SECRET_DESTINATION).
_ACCOUNT = {"email": ("username",)}
_BOUND = {part: (secret, *notify.SECRET_DESTINATION[part], *_ACCOUNT.get(part, ()))
          for part, secret in notify.SECRETS.items()}
_BUCKET_BOUND = ("secret_key", "access_key", "endpoint")  # an S3 secret key, its key id and where it signs


def no_changes() -> dict:
    """The report of a restore that kept none of the node's secrets back."""
    return {"link_keys_retired": [], "link_keys_created": [], "notification_channels": [], "bucket_credentials": [],
            "certificates": []}


def keep_current(restored: dict, files: dict | None, current: dict, current_files: dict) -> dict:
    """Put the node's current secrets into `restored` (the document a restore will write) and
    `files` (the backup's certs/ files; None for a plain backup, which writes no file); the report."""
    report = no_changes()
    _keep_link_keys(restored, current, report)
    _keep_channel_secrets(restored, current, report)
    _keep_bucket_credentials(restored, current, report)
    if files is None:
        _keep_certificate_summaries(restored, current, current_files, report)
    else:
        _keep_certificates(restored, files, current, current_files, report)
    return report


def _keep_link_keys(restored: dict, current: dict, report: dict) -> None:
    then = (restored.get("links") or {}).get("keys") or {}
    ring = copy.deepcopy(current.get("links") or signing.empty_ring())
    now = ring.get("keys") or {}
    report["link_keys_retired"] = sorted(kid for kid in then if kid not in now)
    report["link_keys_created"] = sorted(kid for kid in now if kid not in then)
    restored["links"] = ring


def _keep_channel_secrets(restored: dict, current: dict, report: dict) -> None:
    then, now = notify.effective(restored), notify.effective(current)
    for part, bound in _BOUND.items():
        secret = notify.SECRETS[part]
        if not (then[part].get(secret) or now[part].get(secret)):
            continue
        if any(then[part].get(name) != now[part].get(name) for name in bound):
            restored.setdefault("notifications", {})[part] = copy.deepcopy(now[part])
            report["notification_channels"].append(part)


def _keep_bucket_credentials(restored: dict, current: dict, report: dict) -> None:
    buckets = restored.get("buckets") or {}
    for bucket_id, now in sorted((current.get("buckets") or {}).items()):
        then = buckets.get(bucket_id)
        if then is None or not (then.get("secret_key") or now.get("secret_key")):
            continue
        if any(then.get(name) != now.get(name) for name in _BUCKET_BOUND):
            buckets[bucket_id] = copy.deepcopy(now)
            report["bucket_credentials"].append(bucket_id)


def _cert_host(path: str) -> str | None:
    return path[len(CERT_FOLDER):-len(".pem")] if path.startswith(CERT_FOLDER) and path.endswith(".pem") else None


def _keep_certificate_summaries(restored: dict, current: dict, current_files: dict, report: dict) -> None:
    """A plain restore writes no certs/ file, so the node's files stay: each configured host's
    summary (expiry, fingerprint) must stay the one of the file it serves, not the backup's."""
    domains, domains_now = restored.get("domains") or {}, current.get("domains") or {}
    for path in sorted(current_files):
        host = _cert_host(path)
        if host not in domains:
            continue
        summary = (domains_now.get(host) or {}).get("certificate")
        if domains[host].get("certificate") != summary:
            domains[host]["certificate"] = copy.deepcopy(summary)
            report["certificates"].append(host)


def _keep_certificates(restored: dict, files: dict, current: dict, current_files: dict, report: dict) -> None:
    domains, domains_now = restored.get("domains") or {}, current.get("domains") or {}
    for path, text in sorted(current_files.items()):
        host = _cert_host(path)
        if host not in domains or files.get(path) == text:
            continue
        files[path] = text
        domains[host]["certificate"] = copy.deepcopy((domains_now.get(host) or {}).get("certificate"))
        report["certificates"].append(host)
