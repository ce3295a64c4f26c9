"""Benchmark: the serving core's cost per status callback, side by side with another checkout, alternated.

    python -m tests.bench.bench_serving --baseline <checkout> [--blocks 6] [--pairs 150] [--spike NAME ...]

One 2.x double (its own process, TCP_NODELAY as Node sets it) and, for each code version, two `ql-bridge serve`
processes in front of it, started from that checkout (``PYTHONPATH=<checkout>``): ``pass-through`` (no origin
shadowed) and ``shadow`` (every origin shadowed into a fresh SQLite store). Each callback is a start or an end
with the exact bytes of 2.x's shell/api.sh, sent on a NEW TCP connection, one at a time, as the shell's curl
does. Blocks alternate between the versions (A B A B ...), so drift on a shared machine hits both alike.

Printed per version and mode: the whole bridge process's CPU per callback (utime + stime of every thread, from
/proc/<pid>/stat, over the block), and latency p50 / p99 per callback, through the bridge and straight to the
double (the same client, alternated too), with the ratio. ``--spike`` adds the candidates docs/serving.md
compares, this checkout with one uvicorn setting changed: ``h11`` (uvicorn's stock h11 protocol instead of the
bridge's httptools one: a spike, with none of the bridge's head limit, deadlines or refusals), ``asyncio`` (the
stdlib event loop instead of uvloop).

This is a benchmark, not a test: it asserts nothing and exits 0.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from bridge.cli.demo import CURL_HEADERS, bridge_process, free_port, serve_env
from legacy_adapters.callbacks import render_status_body
from legacy_adapters.testing.datadir import LegacyDataDir, create_legacy_data_dir
from tests.bench.bench_shadow_http import double_process

CLK_TCK = os.sysconf("SC_CLK_TCK")
THIS = str(Path(__file__).resolve().parents[2])
SPIKE = '''
import bridge.web.server as server
_config = server.uvicorn_config
def uvicorn_config(app, settings):
    config = _config(app, settings)
    setattr(config, {name!r}, {value!r})
    return config
server.uvicorn_config = uvicorn_config
'''
SPIKES = {"h11": ("http", "h11"), "asyncio": ("loop", "asyncio")}


@dataclass
class Series:
    cpu_ms: list[float] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)


def process_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime: every thread of the process


def one_request(port: int, payload: bytes) -> float:
    """Seconds for one request on a fresh connection, read to the end of its answer."""
    started = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.sendall(payload)
        reply = b""
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            reply += chunk
            head, sep, body = reply.partition(b"\r\n\r\n")
            if sep and b"content-length:" in head.lower():
                length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
                if len(body) >= length:
                    break
    if not reply.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(f"unexpected answer: {reply[:120]!r}")
    return time.perf_counter() - started


def callback_payload(cron: int, status: int, pid: int, token: str, begin_s: int) -> bytes:
    body = render_status_body(cron, status, pid, f"bench_{pid}.log", begin_s, 1 if status == 1 else None,
                              0 if status == 1 else None)
    headers = {**CURL_HEADERS, "Authorization": f"Bearer {token}", "Host": "127.0.0.1",
               "Content-Length": str(len(body))}
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    return f"PUT /open/crons/status?t={begin_s} HTTP/1.1\r\n{head}\r\n".encode() + body


def run_block(port: int, pid: int | None, data: LegacyDataDir, cron: int, pairs: int, pids: Iterator[int]) -> Series:
    series = Series()
    begin = int(time.time()) - 30
    cpu0 = process_cpu_s(pid) if pid else 0.0
    for _ in range(pairs):
        shell = next(pids)
        for status in (0, 1):
            series.latencies.append(one_request(port, callback_payload(cron, status, shell, data.system_token, begin)))
    if pid:
        series.cpu_ms.append((process_cpu_s(pid) - cpu0) * 1000 / (2 * pairs))
    return series


@contextmanager
def bridge(checkout: str, double_url: str, data: LegacyDataDir, root: Path, name: str, origins: str,
           extra_path: str = "") -> Iterator[tuple[int, int]]:
    """`bridge serve` from ``checkout``, on a store that checkout's own `db upgrade` made."""
    url = f"sqlite:///{(root / f'{name}.sqlite').resolve()}"
    port = free_port()
    env = serve_env(port, double_url, data.root, url, origins=origins, BRIDGE_DATA_DIR=str(root / name),
                    PYTHONPATH=os.pathsep.join(p for p in (extra_path, checkout) if p),
                    # `python -m bridge.cli` would put the working directory ahead of PYTHONPATH, and every
                    # version would be the checkout the benchmark runs from.
                    PYTHONSAFEPATH="1",
                    BRIDGE_SHADOW_BUDGET_MS="2000")
    env.pop("BRIDGE_WORKERS", None)
    imported = subprocess.run([sys.executable, "-c", "import bridge; print(bridge.__file__)"], env=env,
                              capture_output=True, text=True, check=True).stdout.strip()
    if not imported.startswith(checkout):
        raise RuntimeError(f"{name} would import {imported}, not the checkout {checkout}")
    print(f"{name}: {imported}", file=sys.stderr)
    subprocess.run([sys.executable, "-m", "bridge.cli", "db", "upgrade"], env=env, check=True,
                   stdout=subprocess.DEVNULL)
    with bridge_process(env, f"http://127.0.0.1:{port}") as proc:
        yield port, proc.pid


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--baseline", required=True, help="checkout to compare with (e.g. a worktree of d376660)")
    parser.add_argument("--blocks", type=int, default=6)
    parser.add_argument("--pairs", type=int, default=150, help="executions (start + end) per block")
    parser.add_argument("--spike", action="append", choices=sorted(SPIKES), default=[])
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        root = Path(tmp)
        data = create_legacy_data_dir(root / "ql")
        cron = data.add_cron("bench", "task bench.sh", "0 * * * *")
        double = stack.enter_context(double_process(data, root / "double.log"))
        double_port = int(double.url.rsplit(":", 1)[1])
        versions = {"baseline": (args.baseline, ""), "this": (THIS, "")}
        for candidate in args.spike:
            spike = root / f"spike_{candidate}"
            spike.mkdir()
            name, value = SPIKES[candidate]
            (spike / "sitecustomize.py").write_text(SPIKE.format(name=name, value=value))
            versions[f"{candidate} spike"] = (THIS, str(spike))
        servers: dict[tuple[str, str], tuple[int, int]] = {}
        for version, (checkout, extra) in versions.items():
            for mode, origins in (("pass-through", ""), ("shadow", "manual,boot,scheduled_node,scheduled_system,"
                                                                    "script,subscription,system")):
                name = f"{version.replace(' ', '_')}_{mode}"
                servers[(version, mode)] = stack.enter_context(
                    bridge(checkout, double.url, data, root, name, origins, extra))
        pids = iter(range(100_000, 10_000_000))
        results: dict[tuple[str, str], Series] = {key: Series() for key in [*servers, ("direct", "-")]}
        for port, pid in servers.values():
            run_block(port, pid, data, cron, 50, pids)  # warm-up: imports, caches, pools
        for block in range(args.blocks):
            keys = list(servers) if block % 2 == 0 else list(reversed(servers))
            for key in keys:
                port, pid = servers[key]
                got = run_block(port, pid, data, cron, args.pairs, pids)
                results[key].cpu_ms += got.cpu_ms
                results[key].latencies += got.latencies
            direct = run_block(double_port, None, data, cron, args.pairs // 2, pids)
            results[("direct", "-")].latencies += direct.latencies
            print(f"block {block + 1}/{args.blocks} done", file=sys.stderr)
        report(results, args)
    return 0


def report(results: dict[tuple[str, str], Series], args: argparse.Namespace) -> None:
    direct = results[("direct", "-")].latencies
    d50, d99 = percentile(direct, 0.5), percentile(direct, 0.99)
    print(f"{args.blocks} alternated blocks of {args.pairs} executions (2 callbacks each), a new TCP connection "
          f"per callback; load average {os.getloadavg()[0]:.1f}")
    print(f"straight to the double: p50 {d50 * 1000:.2f} ms, p99 {d99 * 1000:.2f} ms")
    print(f"{'version':<16} {'mode':<13} {'CPU ms/callback (min-max over blocks, median)':<48} "
          f"{'p50 ms':>7} {'p99 ms':>7} {'p50÷direct':>10} {'p99÷direct':>10}")
    for (version, mode), series in results.items():
        if version == "direct":
            continue
        cpu = series.cpu_ms
        p50, p99 = percentile(series.latencies, 0.5), percentile(series.latencies, 0.99)
        print(f"{version:<16} {mode:<13} {min(cpu):.3f}-{max(cpu):.3f}, median {statistics.median(cpu):.3f}"
              f"{'':<16} {p50 * 1000:7.2f} {p99 * 1000:7.2f} {p50 / d50:10.2f} {p99 / d99:10.2f}")
    for mode in ("pass-through", "shadow"):
        base = statistics.median(results[("baseline", mode)].cpu_ms)
        this = statistics.median(results[("this", mode)].cpu_ms)
        print(f"CPU ratio this ÷ baseline, {mode}: {this / base:.2f} (floor ≤ 1.0, aim ≤ 0.7)")


if __name__ == "__main__":
    raise SystemExit(main())
