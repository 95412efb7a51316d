"""The device process: ``python -P -c "from aioge.runtime.devices.child import main; main()"``.

It reads requests from stdin and writes replies to stdout (``protocol``'s frames): a model
arrives once as ``.om`` bytes (the graph cache's format: data, never code; the child binds the
kernels itself), then runs of it. The bytes carry their weights inline (``DevicePool.prepare``
encodes the parent's loaded model so, ``ge.externalWeight=1`` or not): a model referencing
weight files is refused, never read from whatever ``weight/`` is in this process's directory.
The child runs one request at a time on its main thread (``Executable.run_sync``: no thread
hop for a one-thread plan); requests queued behind it wait in the pipe, so it never idles
while the parent has work. It runs at nice 5
(``AIOGE_DEVICE_NICE`` changes it), so the parent's event loop gets a core as soon as it wakes.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import time
from typing import Any, BinaryIO

import numpy as np

from aioge.errors import ExecutionError
from aioge.kernels import native
from aioge.runtime.devices.protocol import read_frame, write_frame
from aioge.runtime.executor import Executable

__all__ = ["main", "serve"]


def serve(inp: BinaryIO, out: BinaryIO) -> None:
    """The device's main loop: load models and run them, one request at a time, until EOF."""
    from aioge.plan.serialize import decode_model
    from aioge.runtime.blas import configure_blas
    from aioge.runtime.workers import EngineWorkers

    configure_blas(1)
    native.available()  # load the compiled tier now: a run that first calls it would measure the load
    workers = EngineWorkers(min_lanes=1, cpu_slots=1)
    exes: dict[int, Executable] = {}
    failed: dict[int, str] = {}
    try:
        while True:
            frame = read_frame(inp, "device request")
            if frame is None:
                return
            msg, arrays, blobs = frame
            if msg["op"] == "load":
                try:
                    model = decode_model(bytes(blobs[0]), weight_dir="")  # weights inline only
                    exes[msg["exe"]] = Executable(model, threads=msg["threads"])
                except Exception as exc:  # reported with every run of it
                    failed[msg["exe"]] = f"the device could not load the model: {type(exc).__name__}: {exc}"
                    write_frame(out, {"op": "load_failed", "message": failed[msg["exe"]]})
                continue
            rid, exe_id = msg["rid"], msg["exe"]
            exe = exes.get(exe_id)
            outputs: dict[str, np.ndarray] | None = None
            if exe is None:
                reply: dict[str, Any] = {"rid": rid, "error": {"message": failed.get(exe_id, f"model {exe_id} was never loaded")}}
            else:
                try:
                    # The run's CPU in this thread (a one-group plan, the kind that may come back
                    # inline, runs here whole): a loaded machine's waits for a core are not compute.
                    start = time.thread_time()
                    outputs = exe.run_sync(arrays, workers=workers)
                    reply = {"rid": rid, "seconds": time.thread_time() - start}
                except ExecutionError as exc:
                    reply = {
                        "rid": rid,
                        "error": {
                            "message": exc.message,
                            "graph": exc.graph,
                            "node": exc.node,
                            "op_type": exc.op_type,
                            "engine": exc.engine,
                        },
                    }
                except Exception as exc:  # not a kernel's: still only this run's
                    reply = {"rid": rid, "error": {"message": f"{type(exc).__name__}: {exc}"}}
            try:
                write_frame(out, reply, outputs)
            except TypeError as exc:  # an output no frame carries (refused before a byte is written)
                write_frame(out, {"rid": rid, "error": {"message": f"cannot send the outputs back: {exc}"}})
    finally:
        workers.close()


def main() -> None:
    """The device process's entry point: ``serve`` on stdin and stdout."""
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="aioge device %(process)d: %(levelname)s %(message)s")
    # Frames go to the real stdout; anything else that prints (a library, a C extension) goes to stderr.
    frames = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    # A terminal's Ctrl-C reaches the whole process group: the parent drains and stops its
    # devices (by closing stdin); a KeyboardInterrupt here would only print a traceback.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Devices compute flat out; a lower priority lets the parent's event loop (mostly asleep,
    # never long awake) take a core the moment it wakes, instead of queueing behind them.
    nice = int(os.environ.get("AIOGE_DEVICE_NICE", "5"))
    if nice and hasattr(os, "nice"):
        try:
            os.nice(nice)
        except OSError:
            pass
    try:
        serve(sys.stdin.buffer, frames)
    except BrokenPipeError:  # the parent went away
        pass
