#!/usr/bin/python3
"""A loopback HTTP/1.1 proxy that injects faults between Strata and an object store.

Design. Each client connection is served by a thread (ThreadingHTTPServer, keep-alive). A request
is read whole (Content-Length; "Expect: 100-continue" is answered by the proxy), matched against
the fault rules, and then either answered by the proxy or forwarded unchanged to the upstream
server - Host header included, since SigV4 signs it - and the upstream answer relayed. Rules:

    {"action": "status", "status": 503, "method": "PUT", "path": "meta.json", "count": 3}
    {"action": "slow", "delay": 2.5, ...}     forward, but wait before answering
    {"action": "reset", ...}                  forward, send the headers and half of the body,
                                              then reset the connection (RST)

`method` and `path` (a substring of the request target) are optional filters; `count` is how many
requests the rule hits (default: every one). The first matching rule with hits left applies.

Control is in-band on reserved paths (no bucket or account name starts with "__"):
    PUT    /__faultproxy__/rules   body: JSON list of rules (replaces the rules)
    DELETE /__faultproxy__/rules   removes every rule
    GET    /__faultproxy__/stats   {"requests": n, "forwarded": n, "injected": {"status": n, ...}}

Use it in-process (FaultProxy(upstream).start(), .set_rules(...), .stats(), .stop()) or as a
program: faultproxy.py --upstream 127.0.0.1:7480 [--listen 127.0.0.1:0], which prints the address.
"""
import argparse
import http.client
import http.server
import json
import socket
import struct
import sys
import threading
import time

CONTROL = "/__faultproxy__/"
HOP_HEADERS = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "expect", "te",
               "upgrade"}


class Rules:
    def __init__(self):
        self.lock = threading.Lock()
        self.rules = []
        self.stats = {"requests": 0, "forwarded": 0, "injected": {}}

    def set(self, rules):
        with self.lock:
            self.rules = [dict(r) for r in rules]

    def match(self, method, path):
        with self.lock:
            self.stats["requests"] += 1
            for r in self.rules:
                if r.get("method") and r["method"] != method:
                    continue
                if r.get("path") and r["path"] not in path:
                    continue
                if "count" in r:
                    if r["count"] <= 0:
                        continue
                    r["count"] -= 1
                action = r["action"]
                self.stats["injected"][action] = self.stats["injected"].get(action, 0) + 1
                return r
            return None

    def count_forwarded(self):
        with self.lock:
            self.stats["forwarded"] += 1

    def snapshot(self):
        with self.lock:
            return json.loads(json.dumps(self.stats))


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "faultproxy"
    # No Nagle delay: otherwise an answer's body can wait for the client's delayed ACK (40 ms).
    disable_nagle_algorithm = True

    def log_message(self, fmt, *args):  # quiet
        pass

    def do_any(self):
        try:
            self.serve_one()
        except (BrokenPipeError, ConnectionResetError):
            # The client gave up (a stall timeout during a "slow" rule): nothing to answer.
            self.close_connection = True

    def serve_one(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length > 0 else b""
        if self.path.startswith(CONTROL):
            return self.control(body)
        rule = self.server.rules.match(self.command, self.path)
        if rule is not None and rule["action"] == "status":
            return self.reply(rule.get("status", 503), b"<?xml version=\"1.0\"?><Error><Code>"
                              b"InjectedFault</Code><Message>injected by faultproxy</Message></Error>",
                              [("Content-Type", "application/xml")])
        status, headers, answer = self.forward(body)
        self.server.rules.count_forwarded()
        if rule is not None and rule["action"] == "slow":
            time.sleep(float(rule.get("delay", 1.0)))
        if rule is not None and rule["action"] == "reset":
            return self.reset(status, headers, answer)
        self.reply(status, answer, headers)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = do_any

    def forward(self, body):
        up = http.client.HTTPConnection(*self.server.upstream, timeout=60)
        try:
            up.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
            for name, value in self.headers.items():
                if name.lower() not in HOP_HEADERS:
                    up.putheader(name, value)
            up.endheaders(body if body else None)
            resp = up.getresponse()
            answer = resp.read()
            headers = [(k, v) for k, v in resp.getheaders() if k.lower() not in HOP_HEADERS]
            return resp.status, headers, answer
        finally:
            up.close()

    def send_head(self, status, headers, length):
        self.send_response(status)
        for k, v in headers:
            if k.lower() not in ("content-length", "server", "date"):
                self.send_header(k, v)
        if self.command == "HEAD":
            cl = [v for k, v in headers if k.lower() == "content-length"]
            self.send_header("Content-Length", cl[0] if cl else "0")
        else:
            self.send_header("Content-Length", str(length))
        self.end_headers()

    def reply(self, status, body, headers):
        self.send_head(status, headers, len(body))
        if self.command != "HEAD" and body:
            self.wfile.write(body)
        self.wfile.flush()

    def reset(self, status, headers, body):
        self.send_head(status, headers, len(body))
        if self.command != "HEAD":
            self.wfile.write(body[: len(body) // 2])
        self.wfile.flush()
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.close_connection = True
        self.connection.close()

    def control(self, body):
        what = self.path[len(CONTROL):]
        if what == "rules" and self.command == "PUT":
            self.server.rules.set(json.loads(body or b"[]"))
            return self.reply(204, b"", [])
        if what == "rules" and self.command == "DELETE":
            self.server.rules.set([])
            return self.reply(204, b"", [])
        if what == "stats" and self.command == "GET":
            return self.reply(200, json.dumps(self.server.rules.snapshot()).encode(),
                              [("Content-Type", "application/json")])
        self.reply(404, b"unknown control request", [])


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


class FaultProxy:
    def __init__(self, upstream, listen=("127.0.0.1", 0)):
        host, port = upstream.rsplit(":", 1) if isinstance(upstream, str) else upstream
        self.server = Server(listen, Handler)
        self.server.upstream = (host, int(port))
        self.server.rules = Rules()
        self.thread = None

    @property
    def address(self):
        host, port = self.server.server_address[:2]
        return f"{host}:{port}"

    def start(self):
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        return self

    def set_rules(self, rules):
        self.server.rules.set(rules)

    def clear(self):
        self.server.rules.set([])

    def stats(self):
        return self.server.rules.snapshot()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--upstream", required=True, help="host:port of the object store")
    ap.add_argument("--listen", default="127.0.0.1:0")
    args = ap.parse_args()
    host, port = args.listen.rsplit(":", 1)
    proxy = FaultProxy(args.upstream, (host, int(port)))
    print(proxy.address, flush=True)
    try:
        proxy.server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
