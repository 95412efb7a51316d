"""The serving benchmark's load generator: client processes (this file as a script: standard
library, uvloop when installed), each with its share of the HTTP/1.1 keep-alive connections, each
sending one pre-encoded request after another. Each process gets its spec as a JSON line on
stdin, warms up, says ``ready``; on ``go`` (all at once) it runs and answers a JSON line: start
and end (the shared monotonic clock), CPU time, latencies, errors."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from typing import Any

__all__ = ["http_request", "run_load"]

_LENGTH = re.compile(rb"\r\ncontent-length:[ \t]*(\d+)", re.IGNORECASE)


def http_request(host: str, port: int, path: str, body: bytes, headers: dict[str, str]) -> bytes:
    """The bytes of an HTTP/1.1 keep-alive POST of ``body`` to ``path``."""
    lines = [f"POST {path} HTTP/1.1", f"Host: {host}:{port}", f"Content-Length: {len(body)}"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def _share(n: int, parts: int, i: int) -> int:
    return n // parts + (i < n % parts)


def tree_cpu_s(pid: int) -> float:
    """CPU seconds (user and system) of process ``pid`` and its live descendants (Linux /proc;
    NaN elsewhere or when it is gone)."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            kids = [int(k) for k in f.read().split()]
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()  # after the name: fields 3.. (utime, stime: 14, 15)
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK") + sum(tree_cpu_s(k) for k in kids)


async def _worker(spec: dict[str, Any]) -> dict[str, Any]:
    host, port, request = spec["host"], spec["port"], base64.b64decode(spec["request"])
    latencies: list[float] = []
    dropped: list[str] = []
    errors: dict[str, int] = {}  # by status; "dropped": connections that failed
    sent = 0

    async def connect() -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.open_connection(host, port)

    async def client(conn: list[Any], budget: int, deadline: float, record: bool) -> None:
        nonlocal sent
        while sent < budget and time.monotonic() < deadline:
            sent += 1
            start = time.monotonic()
            try:
                if conn[0].at_eof():  # the server closed it while idle (keep-alive timeout)
                    conn[:] = await connect()
                conn[1].write(request)
                head = await conn[0].readuntil(b"\r\n\r\n")
                length = _LENGTH.search(head)
                if length is None:  # no body length (chunked): not what a KServe server sends
                    raise ConnectionError(f"response without Content-Length: {head[:200]!r}")
                await conn[0].readexactly(int(length[1]))
            except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as exc:
                dropped.append(repr(exc))  # an error, not the end: a fresh connection goes on
                conn[1].close()
                if record:
                    errors["dropped"] = errors.get("dropped", 0) + 1
                conn[:] = await connect()
                continue
            if record:
                latencies.append(time.monotonic() - start)
                if (code := head[9:12].decode()) != "200":
                    errors[code] = errors.get(code, 0) + 1
            if b"connection: close" in head.lower():
                conn[1].close()
                conn[:] = await connect()

    async def burst(budget: int, record: bool) -> None:
        deadline = time.monotonic() + spec["seconds"]
        async with asyncio.timeout(spec["seconds"] + 120):  # a server that stops answering: fail, not hang
            await asyncio.gather(*(client(c, budget, deadline, record) for c in conns))

    conns: list[list[Any]] = [list(await connect()) for _ in range(spec["clients"])]
    await burst(spec["warmup"], False)
    print("ready", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)  # go
    sent = 0
    start, cpu = time.monotonic(), time.process_time()
    await burst(spec["total"], True)
    end, cpu = time.monotonic(), time.process_time() - cpu
    for _, writer in conns:
        writer.close()
    return {"start": start, "end": end, "cpu": cpu, "latencies": latencies, "errors": errors, "dropped": dropped}


def run_load(
    host: str,
    port: int,
    request: bytes,
    *,
    clients: int,
    procs: int,
    total: int,
    seconds: float,
    warmup: int,
    server_pid: int | None = None,
) -> dict[str, Any]:
    """Drive ``host``:``port`` with ``request`` from ``clients`` connections over ``procs``
    processes: ``total`` requests (split evenly) or ``seconds``, after ``warmup``. Returns
    requests (responses of any status), errors (non-200 and dropped connections; by status in
    error_statuses), latencies, seconds (first start to last end), client_cpu_s, client_max_pct
    (the busiest process's share of a core), transport_errors (distinct, of the warm-up too)
    and server_cpu_s (``server_pid``'s tree from go to the last answer; NaN without it).

    Raises:
        RuntimeError: a client process failed.
    """
    procs = max(1, min(procs, clients))
    code = base64.b64encode(request).decode()
    with tempfile.TemporaryFile() as log:
        workers = [
            subprocess.Popen(
                [sys.executable, "-P", __file__], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True
            )
            for _ in range(procs)
        ]
        try:
            for i, w in enumerate(workers):
                share = {"clients": _share(clients, procs, i), "total": _share(total, procs, i)}
                spec = {"host": host, "port": port, "request": code, "seconds": seconds, **share}
                assert w.stdin is not None
                w.stdin.write(json.dumps(spec | {"warmup": _share(warmup, procs, i)}) + "\n")
                w.stdin.flush()
            results, server_cpu = [], float("nan")
            if all(w.stdout is not None and w.stdout.readline().strip() == "ready" for w in workers):
                server_cpu = -tree_cpu_s(server_pid) if server_pid else server_cpu
                for w in workers:
                    assert w.stdin is not None
                    w.stdin.write("go\n")
                    w.stdin.flush()
                with contextlib.suppress(ValueError):  # a line cut short: a process that failed
                    results = [json.loads(w.stdout.readline() or "null") for w in workers if w.stdout is not None]
                server_cpu += tree_cpu_s(server_pid) if server_pid else server_cpu
        finally:
            for w in workers:
                if w.poll() is None:
                    w.kill()
                w.wait()
                for pipe in (w.stdin, w.stdout):
                    with contextlib.suppress(OSError):
                        pipe.close()  # type: ignore[union-attr]
        if len(results) < procs or None in results:
            log.seek(0)
            raise RuntimeError(f"a load generator process failed: {log.read().decode(errors='replace')[-2000:]}")
    elapsed = max(r["end"] for r in results) - min(r["start"] for r in results)
    latencies = [x for r in results for x in r["latencies"]]
    return {
        "requests": len(latencies),
        "errors": sum(n for r in results for n in r["errors"].values()),
        "latencies": latencies,
        "seconds": elapsed,
        "client_cpu_s": sum(r["cpu"] for r in results),
        "client_max_pct": max(100 * r["cpu"] / max(r["end"] - r["start"], 1e-9) for r in results),
        "transport_errors": sorted({d for r in results for d in r["dropped"]}),
        "error_statuses": {k: sum(r["errors"].get(k, 0) for r in results) for k in {k for r in results for k in r["errors"]}},
        "server_cpu_s": server_cpu,
        "procs": procs,  # at most one a connection
    }


if __name__ == "__main__":
    run: Any = asyncio.run
    with contextlib.suppress(ImportError):
        from uvloop import run  # less CPU a request than asyncio's own loop
    result = (json.dumps(run(_worker(json.loads(sys.stdin.readline())))) + "\n").encode()
    # os.write, not sys.stdout: after uvloop's run, sys.stdout cut a line at 64 KiB when the parent read late
    os.set_blocking(1, True)
    while result:
        result = result[os.write(1, result) :]
