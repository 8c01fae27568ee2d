"""What the measuring scripts share: a free port, an HTTP GET of `serve`, a process's
memory, and an MCP client of `fleet-mcp` over stdio. Imported by footprint.py,
history-cost.py, serve-cost.py and soak.py (their own directory is on the path)."""
import json
import socket
import subprocess
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(port, path):
    """GETs `path`; returns the seconds it took, the head and the body."""
    start = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(f"GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n".encode())
        data = b""
        while chunk := s.recv(1 << 16):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return time.perf_counter() - start, head, body


def wait_for_port(port):
    """Until something accepts on `port`."""
    while True:
        try:
            socket.create_connection(("127.0.0.1", port)).close()
            return
        except OSError:
            time.sleep(0.05)


def memory(pid):
    """Resident and private (`Pss_Anon`) memory of `pid`, in MB."""
    rss = pss_anon = 0
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            if line.startswith("Rss:"):
                rss = int(line.split()[1])
            elif line.startswith("Pss_Anon:"):
                pss_anon = int(line.split()[1])
    return rss / 1024, pss_anon / 1024


class Mcp:
    """One `fleet-mcp --namespace NAMESPACE`, initialized, answering tool calls."""

    def __init__(self, bindir, env, namespace="controller", cwd=None):
        self.proc = subprocess.Popen([f"{bindir}/fleet-mcp", "--namespace", namespace], env=env, cwd=cwd,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.pid = self.proc.pid
        self.next = 0
        self.send("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                 "clientInfo": {"name": "fleet-scripts", "version": "0"}})
        self.proc.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
        self.proc.stdin.flush()

    def send(self, method, params):
        """Sends one request and reads its answer; returns the seconds it took."""
        self.next += 1
        message = {"jsonrpc": "2.0", "id": self.next, "method": method, "params": params}
        start = time.perf_counter()
        self.proc.stdin.write((json.dumps(message) + "\n").encode())
        self.proc.stdin.flush()
        self.proc.stdout.readline()
        return time.perf_counter() - start

    def call(self, tool, arguments):
        return self.send("tools/call", {"name": tool, "arguments": arguments})

    def close(self):
        self.proc.stdin.close()
        self.proc.wait()
