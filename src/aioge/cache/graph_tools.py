"""The graph cache as ``aioge cache stats / prune / clear`` see it: one tier of the report.

A graph cache dir (``ge.graph_compiler_cache_dir``) holds, per ``ge.graph_key``, an index
``<key>.idx``, compiled models ``<key>_<timestamp>[_n].om`` with their ``.rdcpkt`` and ``.packs``, a
``<key>.lock``, and the deduplicated ``weight/weight_<sha256>`` files (``graph_cache``
describes them). These tools touch only files with those names, and of them only the ones
that start with aioge's magic (weights are raw bytes: their name is the check), so nothing
else a user keeps in the dir is ever deleted.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import Any

from aioge.cache.graph_cache import read_index
from aioge.cache.stats_file import read_stats_file, update_stats_file
from aioge.errors import CacheError
from aioge.plan.io import unlink_if_ours
from aioge.plan.serialize import WEIGHT_DIR

__all__ = [
    "clear_graph_cache",
    "graph_cache_report",
    "prune_graph_cache",
    "read_graph_stats",
    "record_graph_lookup",
    "zero_graph_stats",
]

# Lookups per key, kept beside the cache's files (a name no key can take: keys have no dot).
STATS_FILE = "aioge.graph-stats"
STATS_KIND = "aioge-graph-stats"

_IDX_RE = re.compile(r"(?P<key>[A-Za-z0-9_\-]{1,128})\.idx")
_WEIGHT_RE = re.compile(r"weight_[0-9a-f]{64}")
# An .om or .rdcpkt not in its index may be a writer's, published just before its entry.
_ORPHAN_SECONDS = 600.0


def graph_cache_report(directory: str | os.PathLike[str]) -> dict[str, Any]:
    """The graph cache tier as plain data: per key its index entries, model files and bytes;
    the shared weights; totals.

    Raises:
        CacheError: ``directory`` is not a directory.
    """
    root = _checked(directory)
    keys = []
    entries = total = 0
    for key in _keys(root):
        files = _key_files(root, key)
        n, size = len(_entries(root, key)), sum(_size(f) for f in files) + _size(root / f"{key}.idx")
        keys.append({"key": key, "entries": n, "models": sum(f.suffix == ".om" for f in files), "bytes": size})
        entries, total = entries + n, total + size
    weights = _weights(root)
    weight_bytes = sum(_size(w) for w in weights)
    stats = read_graph_stats(root)
    for k in keys:
        k.update(stats["keys"].get(k["key"], {"hits": 0, "misses": 0}))
    hits, misses = (sum(c[n] for c in stats["keys"].values()) for n in ("hits", "misses"))
    return {
        "dir": str(root),
        "keys": keys,
        "entries": entries,
        "weights": len(weights),
        "weight_bytes": weight_bytes,
        "bytes": total + weight_bytes,
        "hits": hits,
        "misses": misses,
        "hit_ratio": hits / (hits + misses) if hits + misses else None,
        "since": stats["since"] or None,
    }


def read_graph_stats(directory: str | os.PathLike[str]) -> dict[str, Any]:
    """``{"since": epoch seconds (0: never), "keys": {key: {"hits": n, "misses": n}}}``;
    empty when there is no usable statistics file."""
    empty: dict[str, Any] = {"since": 0, "keys": {}}
    path = Path(directory) / STATS_FILE
    try:
        data = read_stats_file(path, STATS_KIND, what="graph cache statistics")
    except (OSError, CacheError):
        return empty
    if not isinstance(data, dict) or not isinstance(data.get("keys"), dict) or not isinstance(data.get("since"), int):
        return empty
    keys = {
        k: {n: int(c.get(n, 0)) for n in ("hits", "misses")}
        for k, c in data["keys"].items()
        if isinstance(k, str) and isinstance(c, dict) and all(isinstance(c.get(n, 0), int) for n in ("hits", "misses"))
    }
    return {"since": data["since"], "keys": keys}


def record_graph_lookup(directory: str | os.PathLike[str], key: str, hit: bool, *, mode: int = 0o600) -> None:
    """Count one graph cache lookup of ``key`` (read-modify-write under a lock, published atomically).

    Raises:
        OSError: the statistics file cannot be written.
    """
    root = Path(directory)

    def change() -> dict[str, Any]:
        stats = read_graph_stats(root)
        counts = stats["keys"].setdefault(key, {"hits": 0, "misses": 0})
        counts["hits" if hit else "misses"] += 1
        stats["since"] = stats["since"] or int(time.time())
        return stats

    update_stats_file(root / STATS_FILE, STATS_KIND, root / f".{STATS_FILE}.lock", change, mode=mode)


def zero_graph_stats(directory: str | os.PathLike[str]) -> None:
    """Forget the lookup counts and count from now (``aioge cache stats --zero``).

    Raises:
        CacheError: ``directory`` is not a directory. OSError: the file cannot be written.
    """
    root = _checked(directory)
    update_stats_file(
        root / STATS_FILE, STATS_KIND, root / f".{STATS_FILE}.lock", lambda: {"since": int(time.time()), "keys": {}}
    )


def prune_graph_cache(directory: str | os.PathLike[str], *, now: float | None = None) -> list[str]:
    """Delete the ``.om``, ``.rdcpkt`` and ``.packs`` files no index names (a writer killed between its
    files and its entry, or entries dropped as stale) once 10 minutes old. Returns their paths.

    Raises:
        CacheError: ``directory`` is not a directory.
    """
    root = _checked(directory)
    now = time.time() if now is None else now
    removed = []
    for key in _keys(root):
        named = _indexed(root, key)
        for f in _key_files(root, key):
            try:
                old = now - f.stat().st_mtime > _ORPHAN_SECONDS
            except OSError:
                continue
            if f.name not in named and old and unlink_if_ours(f):
                removed.append(str(f))
    return removed


def clear_graph_cache(directory: str | os.PathLike[str]) -> int:
    """Delete every graph cache file aioge wrote in ``directory`` (indexes, models, variable
    descs, locks, weights); anything else stays. Returns the number of files removed.

    Raises:
        CacheError: ``directory`` is not a directory.
    """
    root = _checked(directory)
    removed = 0
    for key in _keys(root):
        for f in [*_key_files(root, key), root / f"{key}.idx"]:
            removed += unlink_if_ours(f)
        lock = root / f"{key}.lock"
        removed += lock.is_file() and _size(lock) == 0 and _unlink(lock)
    removed += sum(_unlink(w) for w in _weights(root))
    try:
        (root / WEIGHT_DIR).rmdir()
    except OSError:
        pass  # absent, or holds files aioge did not write
    return removed


def _checked(directory: str | os.PathLike[str]) -> Path:
    root = Path(directory)
    if not root.is_dir():
        raise CacheError("graph cache dir does not exist (or is not a directory)", path=str(root))
    return root


def _keys(root: Path) -> list[str]:
    return sorted(m["key"] for p in root.iterdir() if (m := _IDX_RE.fullmatch(p.name)))


def _key_files(root: Path, key: str) -> list[Path]:
    pattern = re.compile(rf"{re.escape(key)}_[0-9]{{14}}(?:_[0-9]+)?\.(?:om|rdcpkt|packs)")
    return sorted(p for p in root.iterdir() if pattern.fullmatch(p.name) and p.is_file())


def _entries(root: Path, key: str) -> list[dict[str, Any]]:
    """The key's index entries (none when the index is unreadable: then it keeps nothing)."""
    try:
        entries = read_index(root / f"{key}.idx").get("cache_file_list", [])
    except CacheError:
        return []
    return [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []


def _indexed(root: Path, key: str) -> set[str]:
    """The file names the key's index names (an ``.om``'s ``.packs`` with it)."""
    names = {
        v for e in _entries(root, key) for k in ("cache_file_name", "var_desc_file_name") if isinstance(v := e.get(k), str) and v
    }
    return names | {n[: -len(".om")] + ".packs" for n in names if n.endswith(".om")}


def _weights(root: Path) -> list[Path]:
    wdir = root / WEIGHT_DIR
    return sorted(p for p in wdir.iterdir() if _WEIGHT_RE.fullmatch(p.name) and p.is_file()) if wdir.is_dir() else []


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _unlink(path: Path) -> bool:
    try:
        path.unlink()
        return True
    except OSError:
        return False
