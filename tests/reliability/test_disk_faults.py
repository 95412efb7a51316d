"""Disk full, read-only cache dirs, permission denied: compile and run succeed uncached.

Each case runs in a forkserver child: ``disk_full`` sets RLIMIT_FSIZE to 0 with SIGXFSZ
ignored (every write fails with EFBIG, also as root); ``read_only`` makes both cache dirs
0o500; ``permission_denied`` leaves the roots writable but the kernel cache's soc folder and
the graph cache's ``weight/`` belong to another user (as root: the child runs as nobody, the
dirs belong to root; otherwise the dirs are 0o500). The run must be right, each cache must
say so in exactly one warning, and no file may be left half-written (no temp file, nothing
that does not decode, and no cache entry at all).
"""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest

from tests.reliability import _faults as F

ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


@pytest.fixture
def base():
    # Not under tmp_path: its parents are 0o700, and the child may run as another user.
    d = tempfile.mkdtemp(prefix="aioge-faults-")
    os.chmod(d, 0o711)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _own(path: str, mode: int) -> None:
    os.chmod(path, mode)
    if ROOT:
        os.chown(path, F.NOBODY, F.NOBODY)


def _layout(base: str, fault: str) -> tuple[str, str]:
    kc, gc = os.path.join(base, "kc"), os.path.join(base, "gc")
    os.makedirs(kc)
    os.makedirs(gc)
    if fault == "read_only":
        _own(kc, 0o500)
        _own(gc, 0o500)
    elif fault == "permission_denied":
        soc = os.path.join(kc, "kernel_cache", "AiogeSim")
        weights = os.path.join(gc, "weight")
        os.makedirs(soc)
        os.makedirs(weights)
        for d in (kc, os.path.join(kc, "kernel_cache"), gc):
            _own(d, 0o700)
        for d in (soc, weights):
            os.chmod(d, 0o755 if ROOT else 0o500)  # as root: root's, so nobody may not write
    return kc, gc  # disk_full: the child runs as this user


def _probe_as_nobody(site: str, out) -> None:  # type: ignore[no-untyped-def]
    try:
        os.setgid(F.NOBODY)
        os.setuid(F.NOBODY)
        out.put(os.access(site, os.R_OK | os.X_OK))
    except Exception:  # noqa: BLE001 - any failure means: cannot run as nobody here
        out.put(False)


def _nobody_can_import() -> bool:
    """Whether a child turned uid 65534 can still read this interpreter's packages (a venv in
    a private 0700 dir, as mktemp makes, it cannot)."""
    ctx = F.mp_context()
    out = ctx.Queue()
    import threadpoolctl  # a package the fault child imports late, from site-packages

    site = os.path.dirname(os.path.abspath(threadpoolctl.__file__))  # site-packages (a one-file module)
    p = ctx.Process(target=_probe_as_nobody, args=(site, out), daemon=True)
    p.start()
    ok = bool(out.get(timeout=60))
    p.join(30)
    return ok


@pytest.mark.parametrize("fault", ["disk_full", "read_only", "permission_denied"])
def test_unwritable_cache_compiles_and_runs_uncached_with_one_warning(base, fault) -> None:
    if ROOT and fault != "disk_full" and not _nobody_can_import():
        pytest.skip("uid 65534 cannot read this interpreter's packages (a private venv dir), so the permission faults cannot run")
    kc, gc = _layout(base, fault)
    ctx = F.mp_context()
    out = ctx.Queue()
    p = ctx.Process(target=F.disk_fault_child, args=(kc, gc, fault, ROOT and fault != "disk_full", out), daemon=True)
    p.start()
    result = out.get(timeout=120)
    p.join(30)
    assert p.exitcode == 0
    assert result["error"] is None
    assert result["y"] == [True, True] and result["cache_hit"] is False
    kernel = [w for w in result["warnings"] if w.startswith("aioge.cache.kernel_cache")]
    graph = [w for w in result["warnings"] if w.startswith("aioge.cache.graph_cache")]
    assert len(kernel) == 1 and "not writable" in kernel[0] and "kernels are not cached" in kernel[0], result["warnings"]
    assert len(graph) == 1 and "could not save" in graph[0], result["warnings"]
    assert len(result["warnings"]) == 2, result["warnings"]
    for d in (kc, gc):
        os.chmod(d, 0o700)  # to look inside as any user
    counts = F.audit(base)
    assert not any(k.startswith("tmp:") for k in counts), counts
    assert not {"kernel", "om", "rdcpkt", "idx", "weight"} & set(counts), counts
    print(f"\n{fault}: run right, warnings {result['warnings']}, files left {dict(counts)}")
