#!/usr/bin/env python3
"""RSS of a `rudder server` under a loop of garbage requests with no credentials.

Starts BINARY (`rudder`) as `rudder server` on 127.0.0.1 with a fresh data dir, sends
REQUESTS requests over a few keep-alive TLS connections -- random 60 KB paths, random
methods, paths under /api and /apis that name nothing -- none with credentials, and prints
the server's VmRSS before the loop, after the first tenth (warm-up) and at the end.

    scripts/garbage-rss.py [BINARY] [REQUESTS]      (defaults: target/debug/rudder, 10000)

A measurement, not a test: it asserts nothing and only talks to the loopback address.
"""

import os
import random
import socket
import ssl
import string
import subprocess
import sys
import tempfile
import time


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def garbage_request():
    choice = random.random()
    if choice < 0.5:
        path = "/" + "".join(random.choices(string.ascii_letters, k=60 * 1024))
    elif choice < 0.8:
        path = "/api/v1/namespaces/%s/%s" % (
            "".join(random.choices(string.ascii_lowercase, k=20)),
            "".join(random.choices(string.ascii_lowercase, k=2000)),
        )
    else:
        path = "/apis/%s/v1/things" % "".join(random.choices(string.ascii_lowercase, k=40))
    method = random.choice(["GET", "POST", "DELETE", "FROB%d" % random.randrange(10**6)])
    return f"{method} {path} HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\n\r\n".encode()


def read_response(conn):
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    while len(rest) < length:
        chunk = conn.recv(65536)
        if not chunk:
            break
        rest += chunk


def main():
    binary = sys.argv[1] if len(sys.argv) > 1 else "target/debug/rudder"
    requests = int(sys.argv[2]) if len(sys.argv) > 2 else 10000
    data = tempfile.mkdtemp(prefix="rudder-rss-")
    port = free_port()
    log = open(os.path.join(data, "server.log"), "w")
    server = subprocess.Popen(
        [binary, "server", "--data-dir", os.path.join(data, "d"), "--listen", f"127.0.0.1:{port}"],
        stdout=log, stderr=log, env={**os.environ, "RUST_LOG": "warn"})
    try:
        ca = os.path.join(data, "d", "pki", "ca.crt")
        for _ in range(600):
            if os.path.exists(os.path.join(data, "d", "kubeconfig.yaml")):
                break
            time.sleep(0.1)
        time.sleep(1)
        context = ssl.create_default_context(cafile=ca)
        context.check_hostname = False

        def connect():
            raw = socket.create_connection(("127.0.0.1", port))
            return context.wrap_socket(raw, server_hostname="localhost")

        before = rss_kib(server.pid)
        connections = [connect() for _ in range(4)]
        warm = None
        for index in range(requests):
            slot = index % len(connections)
            try:
                connections[slot].sendall(garbage_request())
                read_response(connections[slot])
            except (ConnectionError, OSError, ssl.SSLError):
                connections[slot] = connect()
            if index + 1 == requests // 10:
                warm = rss_kib(server.pid)
        after = rss_kib(server.pid)
        print(f"requests={requests} rss_before_kib={before} rss_after_warmup_kib={warm} "
              f"rss_after_kib={after} growth_after_warmup_kib={after - (warm or before)}")
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
