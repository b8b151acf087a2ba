"""Plain requests for hosts with a certificate go to HTTPS, when redirect_http is on."""

from contentnode.http.response import json_response


def answer(req):
    if req.scheme != "http":
        return None
    if not (req.app.store.data.get("https") or {}).get("redirect_http"):
        return None   # not mine, in one lookup: redirect_http is off unless stored on
    tls = req.app.tls
    port = tls.listening_port()   # first: without an HTTPS listener there is nothing to upgrade to
    if not port:
        return None
    wanted = tls.https_settings()
    if not (wanted["enabled"] and wanted["redirect_http"]):
        return None
    host = req.visit.host
    if not host or tls.certs.stamp(host) is None:
        return None
    authority = host if port == 443 else f"{host}:{port}"
    location = f"https://{authority}{req.target}"
    return json_response({"redirect": location}, 301, {"Location": location})
