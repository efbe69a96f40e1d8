#!/usr/bin/env python3
"""RSS of a `rudder server` holding watches whose clients never read.

Starts BINARY as `rudder server` on 127.0.0.1, creates OBJECTS (env, default 20) ConfigMaps
of 1 MB, opens WATCHERS (default 50) HTTP/1.1 watches of them with a 4 KB receive buffer
that are never read, and prints the server's VmRSS before, 10 s and 45 s after.

    OBJECTS=20 scripts/idle-watch-rss.py BINARY [WATCHERS]

A measurement, not a test: it asserts only that the creates succeed, and talks to loopback.
"""
import os, socket, ssl, subprocess, sys, tempfile, time, json
binary = sys.argv[1]
watchers = int(sys.argv[2]) if len(sys.argv) > 2 else 50
def rss(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"): return int(line.split()[1])
data = tempfile.mkdtemp(prefix="rudder-watch-")
with socket.socket() as s:
    s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]
log = open(os.path.join(data, "log"), "w")
srv = subprocess.Popen([binary, "server", "--data-dir", data + "/d", "--listen", f"127.0.0.1:{port}"], stdout=log, stderr=log, env={**os.environ, "RUST_LOG": "warn"})
try:
    for _ in range(600):
        if os.path.exists(data + "/d/kubeconfig.yaml"): break
        time.sleep(0.1)
    time.sleep(1)
    pki = data + "/d/pki/"
    ctx = ssl.create_default_context(cafile=pki + "ca.crt"); ctx.check_hostname = False
    ctx.load_cert_chain(pki + "admin.crt", pki + "admin.key")
    ctx.set_alpn_protocols(["http/1.1"])
    def conn():
        return ctx.wrap_socket(socket.create_connection(("127.0.0.1", port)), server_hostname="localhost")
    def request(method, path, body=b""):
        c = conn()
        c.sendall(f"{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)
        out = b""
        while True:
            chunk = c.recv(65536)
            if not chunk: break
            out += chunk
        return out.split(b" ")[1]
    for i in range(int(os.environ.get("OBJECTS", "20"))):
        body = json.dumps({"metadata": {"name": f"big{i}"}, "data": {"k": "x" * (1000 * 1000)}}).encode()
        assert request("POST", "/api/v1/namespaces/default/configmaps", body) == b"201"
    base = rss(srv.pid)
    idle = []
    for _ in range(watchers):
        c = conn()
        c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        c.sendall(b"GET /api/v1/namespaces/default/configmaps?watch=1 HTTP/1.1\r\nHost: x\r\n\r\n")
        idle.append(c)
    time.sleep(10)
    held = rss(srv.pid)
    time.sleep(35)
    later = rss(srv.pid)
    print(f"watchers={watchers} objects={os.environ.get('OBJECTS', '20')}x1MB rss_before_watches_kib={base} rss_idle_10s_kib={held} per_watcher_kib={(held-base)//watchers} rss_idle_45s_kib={later}")
finally:
    srv.terminate(); srv.wait()
