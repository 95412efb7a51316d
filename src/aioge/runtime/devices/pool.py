"""The parent's side of the devices: the processes, their writer and reader threads, replacement.

On the parent's side the event loop writes a run's request to the device's pipe itself when
nothing is queued before it and the pipe has room (the write cannot block); a writer thread
writes the rest (models, big frames, a backlog). A reader thread per device reads replies
and wakes the waiting task through the event loop's thread-safe callback, like a lane, so
the event loop is woken once per run.
Runs go to the device with the fewest in flight. A device whose process dies fails the runs
it held with ``ExecutionError`` (naming the device, its pid and exit code) and is replaced on
the next run. A cancelled run's reply is dropped when it comes.
"""

from __future__ import annotations

import itertools
import logging
import os
import queue
import subprocess
import sys
import threading
import weakref
from typing import Any, Mapping

import anyio
import numpy as np

from aioge.errors import ExecutionError, SessionClosedError
from aioge.runtime.devices.protocol import ARRAY_DTYPES, encode_frame, read_frame, write_frame
from aioge.runtime.executor import Executable
from aioge.runtime.workers import Completion

__all__ = ["DevicePool"]

log = logging.getLogger(__name__)


class _Pending:
    __slots__ = ("done", "outputs", "error", "seconds")

    def __init__(self) -> None:
        self.done = Completion(1)
        self.outputs: dict[str, np.ndarray] | None = None
        self.error: BaseException | None = None
        self.seconds = 0.0  # the run's compute on the device (its thread's CPU)


def _bigger_pipe(fd: int) -> int:
    """Ask Linux for a 1 MiB pipe buffer (from 64 KiB), so one write usually carries a whole
    run; the pages the pipe holds (0: unknown)."""
    try:
        import fcntl

        fcntl.fcntl(fd, getattr(fcntl, "F_SETPIPE_SZ", 1031), 1 << 20)
        return int(fcntl.fcntl(fd, getattr(fcntl, "F_GETPIPE_SZ", 1032))) // _PAGE
    except (OSError, ImportError):
        return 0


_PAGE = 4096


def _unread(fd: int) -> int | None:
    """Bytes written to the pipe ``fd`` and not read yet (None: unknown)."""
    try:
        import fcntl
        import termios

        return int.from_bytes(fcntl.ioctl(fd, termios.FIONREAD, bytes(4)), sys.byteorder)
    except (OSError, ImportError, AttributeError):
        return None


class _Device:
    """One worker process with its writer and reader threads."""

    def __init__(self, index: int) -> None:
        self.index = index
        env = dict(os.environ)
        # The child imports aioge from where this process did (also when it is not installed).
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
        # -P: ``python -c`` would put the current directory first on sys.path, so a msgpack.py
        # (or numpy.py...) in the directory the server was started from would run inside the
        # device. -I would also drop PYTHONPATH, which the line above needs for source-tree runs.
        self.proc = subprocess.Popen(
            [sys.executable, "-P", "-c", "from aioge.runtime.devices.child import main; main()"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self._fd = self.proc.stdin.fileno()
        self._pages = _bigger_pipe(self._fd)
        _bigger_pipe(self.proc.stdout.fileno())
        self.name = f"device {index} (pid {self.proc.pid})"
        self.loaded: set[int] = set()  # executables sent to this process
        self.completed = 0  # replies delivered (by the reader thread)
        self._lock = threading.Lock()
        self._pending: dict[int, _Pending] = {}
        self.dead: str | None = None
        self.stopping = False  # stop() was called: runs it cannot answer fail with SessionClosedError
        self._queue: queue.SimpleQueue[tuple[Any, ...] | None] = queue.SimpleQueue()
        # Who writes to stdin holds _wlock (a submit never waits for it); _queued (under _lock):
        # frames queued for the writer, not taken yet. A submit writes only when none are.
        self._wlock = threading.Lock()
        self._queued = self._sent = 0  # _sent: run frames written
        self._stdin_closed = False
        self._writer = threading.Thread(target=self._write_loop, name=f"aioge-device-{index}-writer", daemon=True)
        self._reader = threading.Thread(target=self._read_loop, name=f"aioge-device-{index}-reader", daemon=True)
        self._writer.start()
        self._reader.start()

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    def load(self, exe_id: int, om: bytes, threads: str) -> None:
        """Queue the model's bytes for the child (before any run of it; the queue is FIFO)."""
        self.loaded.add(exe_id)
        with self._lock:
            self._queued += 1
        self._queue.put(("load", exe_id, om, threads))

    def submit(self, rid: int, exe_id: int, feeds: Mapping[str, np.ndarray]) -> _Pending:
        """Send a run: written to the pipe here when it fits without blocking, else queued for
        the writer thread (a wake-up per run: the transformer example's runs cost the parent
        410 us of CPU each that way under load, 250-340 written here). Raises ExecutionError:
        the device is gone."""
        pending = _Pending()
        with self._lock:
            if self.dead is not None:
                raise self._gone(f"{self.name} is gone: {self.dead}")
            self._pending[rid] = pending
        if not self._write_now(rid, exe_id, feeds):
            with self._lock:
                self._queued += 1
            self._queue.put(("run", rid, exe_id, feeds))
        return pending

    def _write_now(self, rid: int, exe_id: int, feeds: Mapping[str, np.ndarray]) -> bool:
        """Write the run's frame to the pipe in this thread if nothing is queued before it and
        the pipe has room for it (so the write cannot block); whether it did."""
        if self._queued or not self._pages or not self._wlock.acquire(blocking=False):
            return False
        try:
            unread = _unread(self._fd) if not (self._queued or self._stdin_closed) else None
            size = sum(a.nbytes for a in feeds.values()) + _PAGE
            # Pages: what is unread, this frame, and up to three part-filled ones (a write
            # each) per run frame not answered yet (cancelled runs' too).
            if unread is None or (unread + size) // _PAGE + 3 * (self._sent - self.completed) + 4 > self._pages:
                return False
            try:
                data = b"".join(encode_frame({"op": "run", "rid": rid, "exe": exe_id}, feeds))
            except TypeError as exc:  # refused before a byte is written, as the writer thread does
                self._fail_one(rid, f"cannot send the feeds: {exc}")
                return True
            self._sent += 1
            view, done = memoryview(data), 0
            try:
                while done < len(data):
                    done += os.write(self._fd, view[done:])
            except OSError as exc:  # the child is gone (broken pipe): the reader reports it
                log.debug("%s: writing failed: %s", self.name, exc)
            return True
        finally:
            self._wlock.release()

    def forget(self, rid: int) -> None:
        """A cancelled run: drop its reply when it comes."""
        with self._lock:
            self._pending.pop(rid, None)

    def _write_loop(self) -> None:
        stdin = self.proc.stdin
        assert stdin is not None
        try:
            while True:
                item = self._queue.get()
                if item is None:
                    break
                with self._wlock:  # a submit writes again once this item is written
                    with self._lock:
                        self._queued -= 1
                        self._sent += item[0] == "run"
                    if item[0] == "load":
                        _, exe_id, om, threads = item
                        write_frame(stdin, {"op": "load", "exe": exe_id, "threads": threads}, blobs=(om,))
                        continue
                    _, rid, exe_id, feeds = item
                    try:
                        write_frame(stdin, {"op": "run", "rid": rid, "exe": exe_id}, feeds)
                    except TypeError as exc:  # a feed no frame carries: refused before a byte is written
                        self._fail_one(rid, f"cannot send the feeds: {exc}")
        except (OSError, ValueError) as exc:  # the child is gone (broken pipe); the reader reports it
            log.debug("%s: writing failed: %s", self.name, exc)
        finally:
            with self._wlock:  # no submit writes to the fd once it is closed (its number may be reused)
                self._stdin_closed = True
                try:
                    stdin.close()  # the child's end of input: it exits after what it has read
                except OSError:
                    pass

    def _read_loop(self) -> None:
        stdout = self.proc.stdout
        assert stdout is not None
        reason = "its process ended"
        try:
            while True:
                frame = read_frame(stdout, f"reply of {self.name}")
                if frame is None:
                    break
                self._deliver(frame[0], frame[1])
        except Exception as exc:  # a reply we cannot read: treat the device as lost
            reason = f"unreadable reply: {exc}"
            self.proc.kill()
        code = self.proc.wait()
        stdout.close()
        self._fail_all(f"{reason} (exit code {code})")
        # The writer may be waiting for work that will never come: let it end (and close the
        # child's stdin), or every replaced device would leave a thread and a pipe behind.
        self._queue.put(None)

    def _deliver(self, msg: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
        if msg.get("op") == "load_failed":  # the runs of that model fail on their own replies too
            log.warning("%s could not load a model: %s", self.name, msg.get("message"))
            return
        self.completed += 1
        with self._lock:
            pending = self._pending.pop(msg["rid"], None)
        if pending is None:
            return  # cancelled meanwhile
        if "error" in msg:
            e = msg["error"]
            pending.error = ExecutionError(
                f"{e['message']} (on {self.name})",
                graph=e.get("graph"),
                node=e.get("node"),
                op_type=e.get("op_type"),
                engine=e.get("engine"),
            )
        else:
            pending.outputs = arrays  # fresh writable arrays over the reply's own buffer
            pending.seconds = float(msg.get("seconds", 0.0))
        pending.done.tick()

    def _fail_one(self, rid: int, reason: str) -> None:
        with self._lock:
            pending = self._pending.pop(rid, None)
        if pending is not None:
            pending.error = ExecutionError(f"{self.name}: {reason}")
            pending.done.tick()

    def _fail_all(self, reason: str) -> None:
        with self._lock:
            self.dead = reason
            pending, self._pending = self._pending, {}
        if pending:
            log.warning("%s stopped with %d run(s) in flight: %s", self.name, len(pending), reason)
        for p in pending.values():
            p.error = self._gone(f"{self.name} stopped: {reason}")
            p.done.tick()

    def _gone(self, message: str) -> ExecutionError | SessionClosedError:
        if self.stopping:
            return SessionClosedError(f"the session closed while this run was in flight: {message}")
        return ExecutionError(message)

    def stop(self) -> None:
        """Ask the child to exit after what is queued (never blocks)."""
        self.stopping = True
        self._queue.put(None)

    def join(self, timeout: float) -> None:
        """Wait (blocking) for the process to end, killing it after ``timeout`` s."""
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            log.warning("%s did not exit in %.0f s: killed", self.name, timeout)
            self.proc.kill()
            self.proc.wait()
        self._reader.join(timeout)
        self._writer.join(timeout)


class DevicePool:
    """``count`` device processes, started on first use and replaced when one dies."""

    def __init__(self, count: int) -> None:
        if count < 1:
            raise ValueError(f"a device pool needs at least one device, not {count}")
        self.count = count
        self._devices: list[_Device | None] = [None] * count
        self._lock = threading.Lock()
        self._rids = itertools.count()
        self._om: weakref.WeakKeyDictionary[Executable, tuple[int, bytes]] = weakref.WeakKeyDictionary()
        self._exe_ids = itertools.count()
        self._closed = False
        self._started: list[_Device] = []
        self._finalizer = weakref.finalize(self, _stop_devices, self._started)

    @property
    def started(self) -> bool:
        """Whether any device process was ever started."""
        return bool(self._started)

    @property
    def pids(self) -> list[int]:
        """The process ids of the live devices."""
        return [d.proc.pid for d in self._devices if d is not None and d.dead is None]

    @property
    def completed(self) -> list[int]:
        """Per device slot, the runs its current process has answered (0 for one not started)."""
        return [d.completed if d is not None else 0 for d in self._devices]

    @staticmethod
    def eligible(exe: Executable) -> bool:
        """Whether runs of ``exe`` go to a device: no variables (their state lives here),
        inputs and outputs of dtypes a frame carries (tensors, no strings: no sequences or
        optionals either), and not a short run. A run
        that computes for under ``INLINE_US`` (as measured on the devices) costs less in this
        process, on the event loop's thread, than its hand-off to a device and back."""
        g = exe.model.graph
        return (
            not g.variables
            and all(v.desc.is_tensor and v.desc.dtype in ARRAY_DTYPES for v in (*g.inputs, *g.outputs))
            and not exe.short
        )

    def _complete(self) -> bool:
        return all(d is not None and d.dead is None for d in self._devices)

    def start(self) -> None:
        """Start the devices not running yet and replace dead ones (blocking: a fork and exec each).

        Raises:
            SessionClosedError: the pool is closed.
        """
        with self._lock:
            if self._closed:
                raise SessionClosedError("the session closed: its device processes are stopped")
            for k, d in enumerate(self._devices):
                if d is None or d.dead is not None:
                    if d is not None:
                        log.warning("replacing %s: %s", d.name, d.dead)
                        self._started.remove(d)  # its threads end by themselves; keep no reference
                    d = self._devices[k] = _Device(k)
                    self._started.append(d)

    def _pick(self) -> _Device:
        """The device with the fewest runs in flight."""
        with self._lock:
            if self._closed:
                raise SessionClosedError("the session closed: its device processes are stopped")
            return min((d for d in self._devices if d is not None), key=lambda d: (d.dead is not None, d.in_flight))

    def prepare(self, exe: Executable) -> tuple[int, bytes]:
        """The executable's id and ``.om`` bytes, encoded once (blocking: run it in a worker thread)."""
        from aioge.plan.serialize import encode_model

        with self._lock:
            known = self._om.get(exe)
        if known is None:
            # Weights inline, also for a model compiled with ge.externalWeight=1 or loaded from a
            # cache's weight/: the child has no path to them and refuses references.
            om, _ = encode_model(exe.model, external=False)
            with self._lock:
                known = self._om.setdefault(exe, (next(self._exe_ids), om))
        return known

    async def run(self, exe: Executable, feeds: Mapping[str, np.ndarray], threads: str = "auto") -> dict[str, np.ndarray]:
        """Run ``exe`` on checked feeds on a device; its outputs by name.

        Raises:
            ExecutionError: a kernel failed on the device, or the device's process died.
            SessionClosedError: the pool is closed.
        """
        with self._lock:
            known = self._om.get(exe)
        if known is None:
            known = await anyio.to_thread.run_sync(self.prepare, exe)
        if not self._complete():
            await anyio.to_thread.run_sync(self.start)
        exe_id, om = known
        device = self._pick()
        if exe_id not in device.loaded:
            device.load(exe_id, om, threads)
        rid = next(self._rids)
        pending = device.submit(rid, exe_id, feeds)
        try:
            await pending.done.wait()
        except BaseException:
            device.forget(rid)
            raise
        if pending.error is not None:
            raise pending.error
        assert pending.outputs is not None
        exe.observe(pending.seconds)
        return pending.outputs

    def stop_nowait(self) -> None:
        """Refuse new runs and let every device exit after its queued work, without waiting."""
        with self._lock:
            self._closed = True
        self._finalizer()

    def close(self, timeout: float = 10.0) -> None:
        """Stop every device after the work queued so far (blocking up to ``timeout`` per device)."""
        with self._lock:
            self._closed = True
            devices = [d for d in self._devices if d is not None]
            self._devices = [None] * self.count
        self._finalizer.detach()
        for d in devices:
            d.stop()
        for d in devices:
            d.join(timeout)


def _stop_devices(devices: list[_Device]) -> None:
    """Finalizer of an unclosed pool: close the children's input, so they exit (never blocks)."""
    for d in devices:
        d.stop()
