"""Framing as Node answers it: each request below is sent to Node's own `http` server (llhttp, the parser 2.x
runs on) and to the bridge, and their status lines are compared; where they differ, the difference must be the
one docs/serving.md lists ("Framing, as Node answers it"). Skipped where no `node` is on PATH.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator

import pytest

from tests.hostile.conftest import Site, raw_request

NODE = shutil.which("node")
SERVER_JS = ("const s=require('http').createServer((q,r)=>{q.resume();q.on('end',()=>r.end('ok'))});"
             "s.listen(0,'127.0.0.1',()=>console.log(s.address().port));")
H = b"PUT /open/crons/status HTTP/1.1\r\nHost: x\r\n"
CASES = {
    "cl-and-te-empty": H + b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    "cl-and-te-body": H + b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
    "bad-content-length": H + b"Content-Length: abc\r\n\r\n",
    "conflicting-content-lengths": H + b"Content-Length: 5\r\nContent-Length: 6\r\n\r\n",
    "bad-chunk-size": H + b"Transfer-Encoding: chunked\r\n\r\nzz\r\n",
    "no-host": b"GET / HTTP/1.1\r\n\r\n",
    "space-before-colon": b"GET / HTTP/1.1\r\nHost: x\r\nX-A : a\r\n\r\n",
    "te-gzip-chunked": H + b"Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
    "te-gzip": H + b"Transfer-Encoding: gzip\r\n\r\n",
    "identical-content-lengths": H + b"Content-Length: 1\r\nContent-Length: 1\r\n\r\nx",
    "obs-fold": b"GET / HTTP/1.1\r\nHost: x\r\nX-A: a\r\n b\r\n\r\n",
    "bare-lf": b"GET / HTTP/1.1\nHost: x\n\n",
    "headers-of-20-kib": b"GET / HTTP/1.1\r\nHost: x\r\nX-A: " + b"a" * 20_000 + b"\r\n\r\n",
}
# (Node's status, the bridge's own status or None when the bridge forwards the request to 2.x): docs/serving.md's list.
DIFFERENCES = {
    "headers-of-20-kib": (431, None),  # forwarded: 2.x's Node refuses it itself
}


@pytest.fixture(scope="module")
def node_port() -> Iterator[int]:
    if NODE is None:
        pytest.skip("no node on PATH")
    proc = subprocess.Popen([NODE, "-e", SERVER_JS], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        yield int(proc.stdout.readline())
    finally:
        proc.terminate()
        proc.wait(10)


def status_of(reply: bytes) -> int:
    return int(reply.split(b" ", 2)[1]) if reply.startswith(b"HTTP/1.1 ") else 0


def test_the_bridge_refuses_what_node_refuses_and_differs_only_where_the_docs_say(
        impatient_site: Site, node_port: int) -> None:
    wrong = {}
    for case, request in CASES.items():  # one bridge for every case: each refusal closes only its connection
        impatient_site.double.clear_requests()
        node = status_of(raw_request(node_port, request, timeout_s=3))
        bridge = status_of(raw_request(impatient_site.port, request, timeout_s=3))
        forwarded = any(r.path != "/api/health" for r in impatient_site.double.requests())
        if case in DIFFERENCES:
            node_expected, bridge_own = DIFFERENCES[case]
            agrees = node == node_expected and (forwarded if bridge_own is None
                                                else (bridge, forwarded) == (bridge_own, False))
        elif node < 400:  # Node takes it: the bridge forwards it to 2.x
            agrees = forwarded
        else:
            agrees = (bridge, forwarded) == (node, False)
        if not agrees:
            wrong[case] = {"node": node, "bridge": bridge, "forwarded": forwarded}

    assert wrong == {}
