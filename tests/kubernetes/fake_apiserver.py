#!/usr/bin/python3
"""A fake Kubernetes API server for tests: pod list and watch in the official JSON shapes.

It serves, on an API port (HTTP or HTTPS):
  GET /api/v1/pods and /api/v1/namespaces/NS/pods
      list: a PodList {"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion",
      "continue"}, "items": [...]}, honouring limit/continue, labelSelector and fieldSelector
      (equality, inequality and existence terms);
      watch=1: a chunked stream of one event per line, {"type": ADDED|MODIFIED|DELETED|BOOKMARK|
      ERROR, "object": {...}}, from the given resourceVersion on; a resourceVersion older than the
      last compaction is answered with HTTP 410 and a Status object, as the API server does.
Authentication is checked when configured: a bearer token (--token) or basic auth (--basic
user:password), and with --client-ca a client certificate signed by that CA is required.

A control port (plain HTTP, no authentication) lets the test script the cluster:
  POST /apply    a Pod object: stored with the next resourceVersion, ADDED or MODIFIED to watchers
  POST /delete   {"namespace", "name", "silent"}: DELETED (silent: no event, as if compacted away)
  POST /raw      {"line"}: written verbatim to the watches open now (malformed events)
  POST /bookmark {}: a BOOKMARK with the current resourceVersion
  POST /expire   {"how": "event"|"status"}: compacts history; open watches get an ERROR event with
                 code 410 ("event") or are closed and the next watch gets HTTP 410 ("status")
  POST /fail     {"kind": "list"|"watch", "status": 500, "count": 1}: the next requests fail
  GET  /requests the API requests seen: method, path, query, authorization, client certificate
  GET  /state    {"resourceVersion", "watches": open watch streams (a stream the client left
                 is noticed at the next write), "watch_requests": streams started so far}
The first line on stdout is "API_PORT CONTROL_PORT".
"""

import argparse
import base64
import copy
import json
import ssl
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Cluster:
    def __init__(self):
        self.cond = threading.Condition()
        self.pods = {}  # (namespace, name) -> pod
        self.rv = 100
        self.compacted = 0
        self.history = []  # (rv, kind, payload): kind is an event type, RAW or GONE
        self.requests = []
        self.failures = []  # [kind, status, remaining]
        self.open_watches = 0
        self.watch_requests = 0  # watches that got past the resourceVersion check
        self.uid = 0

    def bump(self):
        self.rv += 1
        return self.rv

    def apply(self, pod):
        with self.cond:
            meta = pod.setdefault("metadata", {})
            key = (meta.get("namespace", "default"), meta["name"])
            meta["namespace"] = key[0]
            kind = "MODIFIED" if key in self.pods else "ADDED"
            if "uid" not in meta:
                old = self.pods.get(key)
                if old is not None:
                    meta["uid"] = old["metadata"]["uid"]
                else:
                    self.uid += 1
                    meta["uid"] = "00000000-0000-4000-8000-%012d" % self.uid
            meta["resourceVersion"] = str(self.bump())
            pod.setdefault("kind", "Pod")
            pod.setdefault("apiVersion", "v1")
            self.pods[key] = pod
            self.history.append((self.rv, kind, copy.deepcopy(pod)))
            self.cond.notify_all()

    def delete(self, namespace, name, silent):
        with self.cond:
            pod = self.pods.pop((namespace, name))
            pod["metadata"]["resourceVersion"] = str(self.bump())
            if not silent:  # silent: as if the event was lost to a compaction
                self.history.append((self.rv, "DELETED", pod))
            self.cond.notify_all()

    def control(self, kind, payload):
        with self.cond:
            self.history.append((self.rv, kind, payload))
            self.cond.notify_all()

    def expire(self, how):
        with self.cond:
            self.compacted = self.bump()
            self.history.append((self.rv, "GONE", how))
            self.cond.notify_all()

    def take_failure(self, kind):
        with self.cond:
            for f in self.failures:
                if f[0] == kind and f[2] > 0:
                    f[2] -= 1
                    return f[1]
        return None


def parse_selector(text):
    terms = []
    for term in filter(None, (t.strip() for t in (text or "").split(","))):
        if "!=" in term:
            k, v = term.split("!=", 1)
            terms.append(("!=", k.strip(), v.strip()))
        elif "==" in term:
            k, v = term.split("==", 1)
            terms.append(("=", k.strip(), v.strip()))
        elif "=" in term:
            k, v = term.split("=", 1)
            terms.append(("=", k.strip(), v.strip()))
        elif term.startswith("!"):
            terms.append(("absent", term[1:].strip(), None))
        else:
            terms.append(("exists", term, None))
    return terms


def selector_matches(terms, values):
    for op, k, v in terms:
        have = values.get(k)
        if op == "=" and have != v:
            return False
        if op == "!=" and have == v:
            return False
        if op == "exists" and have is None:
            return False
        if op == "absent" and have is not None:
            return False
    return True


def pod_fields(pod):
    meta, spec, status = pod.get("metadata", {}), pod.get("spec", {}), pod.get("status", {})
    return {
        "metadata.name": meta.get("name", ""),
        "metadata.namespace": meta.get("namespace", ""),
        "spec.nodeName": spec.get("nodeName", ""),
        "status.phase": status.get("phase", ""),
        "status.podIP": status.get("podIP", ""),
    }


def status_object(code, reason, message):
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code}


class ApiHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    cluster = None
    options = None

    def log_message(self, fmt, *args):
        pass

    def send_json(self, code, obj):
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def authorized(self):
        auth = self.headers.get("Authorization", "")
        o = self.options
        if o.token is not None:
            return auth == "Bearer " + o.token
        if o.basic is not None:
            return auth == "Basic " + base64.b64encode(o.basic.encode()).decode()
        return True

    def do_GET(self):
        url = urllib.parse.urlsplit(self.path)
        query = {k: v[-1] for k, v in urllib.parse.parse_qs(url.query, keep_blank_values=True).items()}
        cert = None
        if hasattr(self.connection, "getpeercert"):
            peer = self.connection.getpeercert()
            if peer:
                cert = dict(x[0] for x in peer.get("subject", ()))
        with self.cluster.cond:
            self.cluster.requests.append({"method": "GET", "path": url.path, "query": query,
                                          "authorization": self.headers.get("Authorization"),
                                          "client_cert": cert})
        if not self.authorized():
            return self.send_json(401, status_object(401, "Unauthorized", "Unauthorized"))
        parts = url.path.strip("/").split("/")
        namespace = None
        if parts == ["api", "v1", "pods"]:
            pass
        elif len(parts) == 5 and parts[:3] == ["api", "v1", "namespaces"] and parts[4] == "pods":
            namespace = parts[3]
        else:
            return self.send_json(404, status_object(404, "NotFound", "the server could not find the requested resource"))
        watch = query.get("watch") in ("1", "true")
        failure = self.cluster.take_failure("watch" if watch else "list")
        if failure is not None:
            return self.send_json(failure, status_object(failure, "InternalError", "scripted failure %d" % failure))
        labels = parse_selector(query.get("labelSelector"))
        fields = parse_selector(query.get("fieldSelector"))

        def matches(pod):
            meta = pod.get("metadata", {})
            if namespace is not None and meta.get("namespace") != namespace:
                return False
            return selector_matches(labels, meta.get("labels") or {}) and \
                selector_matches(fields, pod_fields(pod))

        if watch:
            return self.watch(query, matches)
        self.list(query, matches)

    def list(self, query, matches):
        with self.cluster.cond:
            pods = [copy.deepcopy(p) for k, p in sorted(self.cluster.pods.items()) if matches(p)]
            rv = self.cluster.rv
        start = int(query.get("continue") or 0)
        limit = int(query.get("limit") or 0)
        end = len(pods) if limit <= 0 else min(len(pods), start + limit)
        meta = {"resourceVersion": str(rv)}
        if end < len(pods):
            meta["continue"] = str(end)
        self.send_json(200, {"kind": "PodList", "apiVersion": "v1", "metadata": meta,
                             "items": pods[start:end]})

    def write_chunk(self, data):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def watch(self, query, matches):
        c = self.cluster
        rv = int(query.get("resourceVersion") or 0)
        bookmarks = query.get("allowWatchBookmarks") == "true"
        deadline = time.monotonic() + int(query.get("timeoutSeconds") or 3600)
        with c.cond:
            if rv < c.compacted:
                gone = status_object(410, "Expired", "too old resource version: %d (%d)" % (rv, c.compacted))
                return self.send_json(410, gone)
            index = 0
            while index < len(c.history) and c.history[index][0] <= rv:
                index += 1
            c.open_watches += 1
            c.watch_requests += 1
        try:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self.wfile.flush()
            while True:
                with c.cond:
                    while index >= len(c.history) and time.monotonic() < deadline:
                        c.cond.wait(0.2)
                    if index >= len(c.history):
                        break
                    entry = c.history[index]
                    index += 1
                erv, kind, payload = entry
                if kind == "RAW":
                    self.write_chunk(payload.encode() + b"\n")
                elif kind == "GONE":
                    if payload == "event":
                        event = {"type": "ERROR", "object": status_object(
                            410, "Expired", "too old resource version: %d (%d)" % (rv, erv))}
                        self.write_chunk(json.dumps(event).encode() + b"\n")
                    break
                elif kind == "BOOKMARK":
                    if bookmarks:
                        event = {"type": "BOOKMARK", "object": {
                            "kind": "Pod", "apiVersion": "v1",
                            "metadata": {"resourceVersion": str(erv)}}}
                        self.write_chunk(json.dumps(event).encode() + b"\n")
                elif matches(payload):
                    self.write_chunk(json.dumps({"type": kind, "object": payload}).encode() + b"\n")
            self.write_chunk(b"")
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
            pass
        finally:
            with c.cond:
                c.open_watches -= 1
            self.close_connection = True


class ControlHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    cluster = None

    def log_message(self, fmt, *args):
        pass

    def reply(self, obj, code=200):
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        c = self.cluster
        with c.cond:
            if self.path == "/requests":
                return self.reply(c.requests)
            if self.path == "/state":
                return self.reply({"resourceVersion": str(c.rv), "watches": c.open_watches,
                                   "watch_requests": c.watch_requests})
        self.reply({"error": "not found"}, 404)

    def do_POST(self):
        c = self.cluster
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        if self.path == "/apply":
            c.apply(body)
        elif self.path == "/delete":
            c.delete(body["namespace"], body["name"], body.get("silent", False))
        elif self.path == "/raw":
            c.control("RAW", body["line"])
        elif self.path == "/bookmark":
            c.control("BOOKMARK", None)
        elif self.path == "/expire":
            c.expire(body.get("how", "event"))
        elif self.path == "/fail":
            with c.cond:
                c.failures.append([body["kind"], body.get("status", 500), body.get("count", 1)])
        else:
            return self.reply({"error": "not found"}, 404)
        with c.cond:
            self.reply({"resourceVersion": str(c.rv)})


class TlsServer(ThreadingHTTPServer):
    daemon_threads = True
    context = None

    def finish_request(self, request, client_address):
        # The handshake runs on the connection's own thread, not in accept().
        if self.context is not None:
            try:
                request = self.context.wrap_socket(request, server_side=True)
            except (ssl.SSLError, OSError):
                return
        super().finish_request(request, client_address)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--tls-cert")
    p.add_argument("--tls-key")
    p.add_argument("--client-ca")
    p.add_argument("--token")
    p.add_argument("--basic")
    o = p.parse_args()
    cluster = Cluster()
    ApiHandler.cluster = cluster
    ApiHandler.options = o
    ControlHandler.cluster = cluster
    api = TlsServer(("127.0.0.1", 0), ApiHandler)
    if o.tls_cert:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(o.tls_cert, o.tls_key)
        if o.client_ca:
            ctx.verify_mode = ssl.CERT_REQUIRED
            ctx.load_verify_locations(o.client_ca)
        api.context = ctx
    control = ThreadingHTTPServer(("127.0.0.1", 0), ControlHandler)
    control.daemon_threads = True
    threading.Thread(target=api.serve_forever, daemon=True).start()
    print(api.server_address[1], control.server_address[1], flush=True)
    control.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
