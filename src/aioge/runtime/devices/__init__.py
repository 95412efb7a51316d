"""Simulated devices: worker processes that run compiled models, so concurrent runs use every core.

In one process the GIL serialises the Python between kernels, and most of a small model's run
is that Python: 64 concurrent runs of a 4-op MLP on lanes barely beat one at a time. GE runs a
model on a device; here a device is a child process (``aioge.runtime.devices.child``)
with its own engines, arenas and kernels, so N devices run N models at once.

``aioge.exec_devices = N`` (default 0: run in this process) starts N devices on the first
eligible run. A compiled model is sent to a device once, as ``.om`` bytes (the graph cache's
format: data, never code; the child binds the kernels itself), and each run sends its feeds
and gets its outputs back, all length-prefixed msgpack (``plan.io``'s bounded codec) over
the child's stdin and stdout. Nothing is pickled. Runs that compute for under a millisecond
(measured on the device, reported with each reply) stay in this process, where they run
inline on the event loop's thread: for them the hand-off costs more than it wins.

Three modules: ``protocol`` (the frames both sides read and write), ``pool`` (the parent's
side: ``DevicePool``) and ``child`` (the device process's loop). On the parent's side the
event loop writes a request to the pipe itself when it fits without blocking, else a writer
thread does; a reader thread reads replies and wakes the waiting task through the event
loop's thread-safe callback, like a lane, so the event loop is woken once per run.
The child runs one request at a time on its main thread (``Executable.run_sync``: no thread
hop for a one-thread plan, one C call for a native program); requests queued behind it wait in the pipe, so it never idles
while the parent has work.

Runs go to the device with the fewest in flight. A device whose process dies fails the runs
it held with ``ExecutionError`` (naming the device, its pid and exit code) and is replaced on
the next run. A cancelled run's reply is dropped when it comes. Devices run at nice 5
(``AIOGE_DEVICE_NICE`` changes it), so the parent's event loop gets a core as soon as it wakes. Graphs with variables run in
this process (their state lives here), and so do traced and host-mode runs.
"""

from aioge.runtime.devices.child import serve
from aioge.runtime.devices.pool import DevicePool

__all__ = ["DevicePool", "serve"]
