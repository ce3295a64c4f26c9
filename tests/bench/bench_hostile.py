"""Figures behind the hostile suite's assertions, printed: callback latency with 200 trickling clients against
the same bridge quiet, and the serving process's RSS growth under four concurrent 25 MB status bodies.

    python -m tests.bench.bench_hostile [--attackers 200] [--executions 100]

One `ql-bridge serve` on the SQLite default in front of the 2.x test double; quiet and attacked blocks are
alternated (three each) so machine noise falls on both sides.
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from pathlib import Path

import httpx

from tests.hostile.conftest import rss_kib, start_site
from tests.hostile.test_serving import MIB, callback_latencies, p99, tricklers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--attackers", type=int, default=200)
    parser.add_argument("--executions", type=int, default=100, help="start/end pairs per block")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        from bridge.storage.engine import make_engine
        from bridge.storage.migrate import upgrade

        url = f"sqlite:///{Path(tmp) / 'bridge.sqlite'}"
        engine = make_engine(url)
        upgrade(engine)
        engine.dispose()
        sites = start_site(Path(tmp), (url, None))
        site = next(sites)
        try:
            callback_latencies(site, 20)
            quiet, attacked = [], []
            for _ in range(3):
                quiet += callback_latencies(site, args.executions)
                with tricklers(site.port, args.attackers):
                    time.sleep(1.0)
                    attacked += callback_latencies(site, args.executions)
            print(f"callback latency, {len(quiet)} callbacks each side, {args.attackers} trickling clients:")
            for name, xs in (("quiet", quiet), ("attacked", attacked)):
                xs = sorted(xs)
                print(f"  {name:9} p50 {xs[len(xs) // 2] * 1000:6.2f} ms  p99 {p99(xs) * 1000:6.2f} ms")
            print(f"  attacked p99 / quiet p99 = {p99(attacked) / p99(quiet):.2f} (the suite asserts < 2)")
            print(f"  25 MB bodies: RSS growth {rss_growth_mib(site):.1f} MiB for 4 concurrent bodies "
                  "(the suite asserts < 96)")
        finally:
            sites.close()


def rss_growth_mib(site) -> float:  # type: ignore[no-untyped-def]
    pid = site.proc.pid
    baseline = peak = rss_kib(pid)[0]
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.wait(0.02):
            peak = max(peak, rss_kib(pid)[0])

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    begin = int(time.time()) - 60

    def send(n: int) -> None:
        body = (f'{{"ids":["{site.cron}"],"status":"0","pid":"{n}","log_path":"big.log","last_execution_time":'
                f'{begin}' + " " * (25 * MIB) + "}").encode()
        with httpx.Client(base_url=site.url, timeout=120) as client:
            client.put("/open/crons/status?t=1", content=body, headers=site.headers())

    senders = [threading.Thread(target=send, args=(90_000 + i,)) for i in range(4)]
    for thread in senders:
        thread.start()
    for thread in senders:
        thread.join()
    done.set()
    sampler.join()
    return (peak - baseline) / 1024


if __name__ == "__main__":
    main()
