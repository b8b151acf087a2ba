"""Run REDbot (the HTTP linter) on one URL and print its notes as JSON lines.

Run as `python -m tests.redbot_check URL [Name: value ...]` in a process of its
own: REDbot's event loop (thor) is global and runs until REDbot is done. Every
host name resolves to 127.0.0.1 here (thor would ask DNS servers): the URL's
host is the Host header the node sees, the connection stays on loopback. The
notes of REDbot's own follow-up requests (a range, conditional requests, a
gzip negotiation) are among the resource's notes; subnotes are flattened.
"""

import json
import socket
import sys
from configparser import ConfigParser

import thor
import thor.dns
from redbot.resource import HttpResource


def _loopback(_host: bytes, port: int, socktype: int):
    return [(socket.AF_INET, socktype, socket.IPPROTO_IP, "", ("127.0.0.1", port))]


def notes(url: str, headers: list) -> list:
    config = ConfigParser()
    config.read_dict({"redbot": {"enable_local_access": "True"}})
    resource = HttpResource(config["redbot"])
    resource.set_request(url, headers=headers)

    @thor.events.on(resource)
    def check_done():
        thor.stop()

    thor.schedule(60, thor.stop)   # bounded: REDbot gives up on an answer that never comes
    resource.check()
    thor.run()
    out = []
    if resource.fetch_error is not None or not resource.check_done:
        out.append({"level": "bad", "category": "fetch", "summary": f"no answer: {resource.fetch_error}"})
    pending = list(resource.response.notes)
    while pending:
        note = pending.pop(0)
        pending.extend(note.subnotes)
        out.append({"level": note.level.value, "category": note.category.name, "summary": note.summary,
                    "name": type(note).__name__})
    out.append({"level": "response", "status": resource.response.status_code,
                "headers": resource.response.headers.text})
    return out


if __name__ == "__main__":
    thor.dns._lookup = _loopback
    url, *raw = sys.argv[1:]
    for line in notes(url, [tuple(h.split(": ", 1)) for h in raw]):
        print(json.dumps(line))
