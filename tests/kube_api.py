"""A loopback stand-in for the part of the Kubernetes API that the queue watch uses, spoken over real HTTP so
that the real Kubernetes client talks to it: list the Workflows of a namespace (paged with `limit` and
`continue`, as the apiserver pages) and patch one with a JSON merge patch (RFC 7386, the content type the
apiserver requires for one). There is no cluster here; this is the most real substitute."""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import yaml

NAMESPACE = "studies"


class FakeApiServer(ThreadingHTTPServer):
    """The part of the Kubernetes API the watch uses: list Workflows of a namespace (`limit` and `continue`,
    as the apiserver pages) and a JSON merge patch of one (RFC 7386), recording every request."""

    def __init__(self, workflows: list[dict]):
        self.workflows = {w["metadata"]["name"]: w for w in workflows}
        self.requests: list[tuple[str, str, str]] = []  # method, path with query, content type
        super().__init__(("127.0.0.1", 0), Handler)


def merge(target, patch):
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge(out.get(key), value)
    return out


class JsonHandler(BaseHTTPRequestHandler):
    """A quiet request handler that answers JSON, as the Kubernetes API and Argo Server do."""

    def log_message(self, *args):
        pass

    def _send(self, code: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class Handler(JsonHandler):
    PREFIX = f"/apis/argoproj.io/v1alpha1/namespaces/{NAMESPACE}/workflows"

    def do_GET(self):
        self.server.requests.append(("GET", self.path, ""))
        url = urlparse(self.path)
        if url.path != self.PREFIX:
            return self._send(404, {"kind": "Status", "code": 404})
        query = parse_qs(url.query)
        names = sorted(self.server.workflows)
        start = int(query.get("continue", ["0"])[0])
        limit = int(query.get("limit", [len(names)])[0])
        page = names[start:start + limit]
        more = str(start + limit) if start + limit < len(names) else None
        self._send(200, {"apiVersion": "argoproj.io/v1alpha1", "kind": "WorkflowList",
                         "metadata": {"resourceVersion": "7", **({"continue": more} if more else {})},
                         "items": [self.server.workflows[n] for n in page]})

    def do_PATCH(self):
        kind = self.headers.get("Content-Type", "")
        self.server.requests.append(("PATCH", self.path, kind))
        name = self.path.removeprefix(self.PREFIX + "/")
        if name not in self.server.workflows:
            return self._send(404, {"kind": "Status", "code": 404, "reason": "NotFound"})
        if kind != "application/merge-patch+json":
            return self._send(415, {"kind": "Status", "code": 415})
        patch = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.workflows[name] = merge(self.server.workflows[name], patch)
        self._send(200, self.server.workflows[name])


def write_kubeconfig(path: Path, server: FakeApiServer) -> Path:
    """A kubeconfig whose current context is the server, with a bearer token as a ServiceAccount's would be."""
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "loopback",
        "clusters": [{"name": "loopback", "cluster": {"server": f"http://127.0.0.1:{server.server_port}"}}],
        "users": [{"name": "watch", "user": {"token": "t"}}],
        "contexts": [{"name": "loopback", "context": {"cluster": "loopback", "user": "watch"}}]}))
    return path
