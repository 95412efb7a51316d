"""The graph compile cache, with GE's semantics (``ge.graph_compiler_cache_dir`` + ``ge.graph_key``).

On when the session's cache dir and the graph's key are both non-empty; the dir must
already exist (E13026). Files, as GE names them, in that dir:

- ``<key>.idx``: the index, a ``plan.io`` envelope of kind ``"idx"`` around msgpack
  ``{"cache_file_list": [entry, ...]}``. Each entry has GE's ``cache_file_name``,
  ``graph_key`` and ``var_desc_file_name`` plus what aioge checks: the source graph's
  ``fingerprint``, the ``signature`` (input shapes), the ``options`` that shape a compile,
  ``versions``, ``code`` (digest of aioge's code), ``om_sha256``, ``created``.
- ``<key>_<YYYYMMDDhhmmss>[_n].om``: a compiled model (``plan.serialize``); the name is
  claimed by publishing the whole file without replacing (a hard link of its temp file), so
  two writers never share one and a killed writer leaves no empty or half file.
- ``<key>_<ts>.rdcpkt``: the variable descs (names, shapes, dtypes, formats) before and
  after compile, only when the graph has variables.
- ``<key>_<ts>.packs``: the weights the model's kernels pack, as its first run packed them
  (``cache.packs``: checked against the entry, the ISA tier and tile, and each by its BLAKE3).
- ``weight/weight_<sha256>``: external constants (``ge.externalWeight=1``), deduplicated.
  A tensor that the source graph holds byte for byte (most weights survive the passes) is
  in neither place: the ``.om`` references it by its fingerprint digest (``plan.serialize``'s
  graph references, when the caller passes ``graph_refs``) and a hit takes it from the graph
  in hand (``held``), which has just hashed it for the fingerprint, so it is not stored
  twice, read back nor hashed again. An entry whose graph lacks one is a miss, never a
  stale weight.
- ``<key>.lock``: a file lock held over load-or-compile-and-save, so that of several
  processes the first compiles and the others load. It is an optimisation only: an entry's
  files are published before the entry, the index is replaced atomically by a
  read-modify-write that appends and re-checks, so writers that race without the lock
  still leave a valid index whose every entry names whole, self-checking files.
  A writer that does not hold ``<key>.lock`` already (a direct ``save_sync``, or one that
  gave up waiting) takes it for the index's read-modify-write alone, so appends never lose
  an entry; each append also indexes whole ``.om`` files of the key that the index lacks
  (a writer killed between its files and its entry).

Matching: every entry with the key is tried in order. An entry hits when it equals the
caller's match key (``aioge.keys.graph_match_key``: versions, code digest, fingerprint --
None with ``aioge.graph_cache_check=key``, which trusts the key as GE does --, signature,
compile options) and its variable descs, and the loaded model passes the caller's fit check.
The cache never looks into a graph: the caller (``compiler.cached``) computes all of these. Otherwise the graph is recompiled, a warning names the
key and why, and a new entry is appended. A corrupt or truncated ``.om`` is dropped from
the index; a corrupt index is replaced by one rebuilt from the valid ``.om`` files.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import stat
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from aioge.cache.file_lock import SyncFileLock, async_file_lock
from aioge.errors import CacheError, CompileError, OptionError
from aioge.keys import code_digest, compile_options
from aioge.plan import io, serialize
from aioge.plan.model import CompiledModel

__all__ = [
    "IDX_KIND",
    "RDCPKT_KIND",
    "GraphCache",
    "Lookup",
    "check_cache_dir",
    "read_index",
]

log = logging.getLogger(__name__)

IDX_KIND = "idx"
RDCPKT_KIND = "rdcpkt"
_KEY_RE = re.compile(r"[A-Za-z0-9_\-]{1,128}")
_MAX_INDEX_BYTES = 64 << 20
_LOCK_TIMEOUT = 900.0  # seconds to wait for another process's compile before compiling anyway
_PUBLISH_TRIES = 5
_INDEX_LOCK_WAIT = 10.0  # seconds an index update waits for <key>.lock before going on without it
_ENTRY_STR_FIELDS = ("cache_file_name", "graph_key", "var_desc_file_name", "fingerprint", "code", "om_sha256")

VarDescs = list[list[Any]]  # [name, shape, dtype, format] per variable, by name


def check_cache_dir(directory: str, graph: str | None = None) -> str:
    """The absolute cache dir, checked to exist (GE: E13026).

    A directory this user cannot look at (permission denied, a name too long) passes: the
    lookup says so in one warning and the graph is compiled without the cache.

    Raises:
        CompileError: the directory does not exist or is not a directory.
    """
    path = os.path.abspath(directory)
    try:
        reason = None if stat.S_ISDIR(os.stat(path).st_mode) else "it is not a directory"
    except FileNotFoundError:
        reason = "the cache directory does not exist"
    except NotADirectoryError:
        reason = "a part of the path is a file, not a directory"
    except OSError:
        reason = None
    if reason is not None:
        raise CompileError(
            f"Input path {directory!r} (ge.graph_compiler_cache_dir) is invalid. Reason: {reason}; create it first",
            graph=graph,
            code="E13026",
        )
    return path


@dataclass(slots=True)
class Lookup:
    """What a lookup found: the model on a hit, and entries found broken (to drop on save)."""

    model: CompiledModel | None
    drop: list[str] = field(default_factory=list)
    save: bool = True  # False: the dir is not trusted, so nothing compiled is put in it either
    entry: dict[str, Any] | None = None  # the entry hit
    begun: Any = None  # what ``begin`` returned for it


class GraphCache:
    """One graph key's entries in one cache directory."""

    def __init__(
        self, directory: str, key: str, *, check: str = "fingerprint", external_weight: bool = False, shared: bool = False
    ) -> None:
        if not isinstance(key, str) or not _KEY_RE.fullmatch(key):
            raise OptionError("ge.graph_key", key, "1 to 128 characters out of A-Z a-z 0-9 _ - (it becomes part of file names)")
        self.dir = os.path.abspath(directory)
        self.key = key
        self.check = check
        self.external_weight = external_weight
        self.shared = shared
        self.mode = 0o660 if shared else 0o600
        # Exactly the names _publish_files gives (n < 10,000), so no other key's file matches:
        # key "a" must not claim "a_<14 digits>_<ts>.om" of key "a_<14 digits>".
        self._om_re = re.compile(rf"{re.escape(key)}_[0-9]{{14}}(?:_[0-9]{{1,4}})?\.om")
        self._warned = False

    @property
    def index_path(self) -> str:
        return os.path.join(self.dir, f"{self.key}.idx")

    @property
    def lock_path(self) -> str:
        return os.path.join(self.dir, f"{self.key}.lock")

    def _path(self, name: str) -> str:
        if os.path.basename(name) != name or name in ("", ".", "..") or "\x00" in name:
            raise CacheError(f"index names {name!r}, which is not a bare file name", path=self.index_path)
        return os.path.join(self.dir, name)

    # -- the lock -----------------------------------------------------------------------

    def locked(self) -> contextlib.AbstractAsyncContextManager[bool]:
        """Hold ``<key>.lock`` (``cache.file_lock``: polled, never blocking the loop).

        Yields whether the lock is held: on an error or after a long wait it is not, and
        the caller goes on without it (correctness never depends on it).
        """
        return async_file_lock(self.lock_path, timeout=_LOCK_TIMEOUT, mode=self.mode)

    # -- the index ------------------------------------------------------------------------

    def read_index_sync(self) -> tuple[list[dict[str, Any]], bool]:
        """The index's entries and whether the file was intact.

        A missing index is empty and intact. A corrupt, truncated or untrusted one is
        logged and rebuilt from the valid ``.om`` files of the key (not intact); an entry
        that is malformed is left out (not intact).
        """
        try:
            data = self._read_trusted(self.index_path, _MAX_INDEX_BYTES)
        except FileNotFoundError:
            return [], True
        except (OSError, CacheError) as exc:
            log.warning("graph cache %r: index unreadable (%s); rebuilding it from the .om files", self.key, exc)
            return self._recover_entries(), False
        try:
            entries, intact = _parse_index(data, self.index_path)
        except CacheError as exc:
            log.warning("graph cache %r: index is broken (%s); rebuilding it from the .om files", self.key, exc)
            return self._recover_entries(), False
        if not intact:
            log.warning(
                "graph cache %r: index %s holds malformed entries; keeping the %d valid ones",
                self.key,
                self.index_path,
                len(entries),
            )
        return entries, intact

    def _publish_index(self, entries: list[dict[str, Any]]) -> None:
        payload = io.pack({"cache_file_list": entries})
        io.write_atomic_sync(self.index_path, io.make_envelope(IDX_KIND, payload), mode=self.mode)

    def _recover_entries(self) -> list[dict[str, Any]]:
        """Entries for the valid ``.om`` files of this key, oldest first."""
        return self._orphans(set(), rebuilding=True)

    def _entry(self, om: str, rdc: str, meta: dict[str, Any]) -> dict[str, Any]:
        return {
            "cache_file_name": om,
            "graph_key": self.key,
            "var_desc_file_name": rdc,
            "fingerprint": meta["fingerprint"],
            "signature": meta["signature"],
            "options": compile_options(meta["options"]),
            "versions": meta["versions"],
            "code": meta["code"],
            "om_sha256": meta["sha256"],
            "external_weight": meta["external"],
            "created": meta["created"],
        }

    def _read_trusted(self, path: str, max_bytes: int = io.MAX_FILE_BYTES) -> bytes:
        # Untrusted (another owner, group/other-writable) is a PermissionError and a link an
        # OSError (ELOOP), not a CacheError: the file is not ours to judge (or delete), only to skip.
        st = os.lstat(path)
        if stat.S_ISLNK(st.st_mode):
            raise PermissionError(f"{path}: not trusted: {io.untrusted_reason(st)}")
        return io.read_trusted_sync(path, max_bytes=max_bytes, shared=self.shared)

    def unusable(self) -> str | None:
        """Why this cache's directory cannot be used at all (not trusted, or not readable by
        this user: permission denied, a name too long, ...), or None."""
        try:
            why = self.untrusted()
        except OSError as exc:
            return f"cannot read {exc.filename or self.dir}: {exc.strerror}"
        if why is not None:
            return f"not trusted: {why}"
        if not os.access(self.dir, os.R_OK | os.X_OK):
            return f"cannot read {self.dir}: permission denied"
        return None

    def untrusted(self) -> str | None:
        """Why this cache's directory (or its ``weight/``) must not be trusted, or None."""
        reason = io.untrusted_dir_reason(self.dir, shared=self.shared, follow=True)
        if reason is not None:
            return f"{self.dir}: {reason}"
        weights = os.path.join(self.dir, serialize.WEIGHT_DIR)
        try:
            reason = io.untrusted_dir_reason(weights, shared=self.shared)
        except FileNotFoundError:
            return None
        return None if reason is None else f"{weights}: {reason}"

    # -- lookup -------------------------------------------------------------------------

    def lookup_sync(
        self,
        graph: str,
        match_key: Callable[[], Mapping[str, Any]],
        var_descs: VarDescs,
        fits: Callable[[CompiledModel], str | None],
        held: serialize.Held | None = None,
        begin: Callable[[dict[str, Any]], Any] | None = None,
    ) -> Lookup:
        """Find and load a matching entry for graph ``graph`` (blocking; run it in a worker thread).

        ``match_key()`` gives what an entry must equal (``aioge.keys.graph_match_key``); it is
        called only when the key has entries (a fingerprint hashes every weight). ``var_descs``
        are the graph's variable descs; ``fits(model)`` says why a loaded model cannot serve
        the graph (None if it can); ``held(digest)`` the graph's array of that
        ``array_digest``, for the tensors an entry references (None: none are taken);
        ``begin(entry)`` starts work for an entry that matches, before its model is read
        (the caller's reads of the entry's other files: ``Lookup.begun`` on a hit).
        Returns a ``Lookup`` whose model (on a hit) has ``stats.graph_cache_hit`` set.
        """
        start = time.perf_counter()
        check_cache_dir(self.dir, graph)
        why_not = self.unusable()
        if why_not is not None:
            if not self._warned:  # once per graph: every later build would only repeat it
                self._warned = True
                log.warning("graph cache %r: %s; compiling without it", self.key, why_not)
            return Lookup(None, save=False)
        entries, intact = self.read_index_sync()
        if not intact:
            self._try_publish(entries)
        mine = [e for e in entries if e["graph_key"] == self.key]
        result = Lookup(None)
        if not mine:
            log.info("graph cache %r: no entry; compiling", self.key)
            return result
        want = match_key()
        reasons: list[str] = []
        only_shapes = True
        for e in mine:
            why = _mismatch(e, want)
            if why is None:
                why = self._var_mismatch(e, var_descs)
            if why is None:
                begun = None if begin is None else begin(e)
                model, why, broken = self._load_entry(e, want, fits, held)
                if model is not None:
                    model.stats.graph_cache_hit = True
                    model.stats.compile_seconds = time.perf_counter() - start
                    log.info(
                        "graph cache %r: loaded %s in %.1f ms", self.key, e["cache_file_name"], 1e3 * model.stats.compile_seconds
                    )
                    result.model, result.entry, result.begun = model, e, begun
                    return result
                if broken:
                    result.drop.append(e["cache_file_name"])
            assert why is not None
            only_shapes &= why.startswith("signature")
            reasons.append(f"{e['cache_file_name']}: {why}")
        level = logging.INFO if only_shapes else logging.WARNING
        log.log(
            level,
            "graph cache %r: none of %d entries fits graph %r; recompiling (%s)",
            self.key,
            len(mine),
            graph,
            "; ".join(reasons),
        )
        return result

    def candidate(self, want: Mapping[str, Any]) -> dict[str, Any] | None:
        """The newest entry of the key equal to ``want`` but for the fingerprint, from an index read
        quietly (None without one, or on any trouble: the lookup reports that): for a read-ahead.
        Newest: after an upgrade, the entry the new code made, not the stale one before it."""
        if self.unusable() is not None:
            return None
        try:
            entries, _ = _parse_index(self._read_trusted(self.index_path, _MAX_INDEX_BYTES), self.index_path)
        except (OSError, CacheError):
            return None
        want = {**want, "fingerprint": None}
        return next((e for e in reversed(entries) if e["graph_key"] == self.key and _mismatch(e, want) is None), None)

    def _var_mismatch(self, e: dict[str, Any], current: list[list[Any]]) -> str | None:
        name = e["var_desc_file_name"]
        if not name:
            return None if not current else f"the graph has variables {[v[0] for v in current]}, the entry none"
        path = self._path(name)
        try:
            _, payload = io.open_envelope(self._read_trusted(path), RDCPKT_KIND, path=path, check_versions=False)
            descs = io.unpack(payload, what="variable descs")
            before, after = descs["before"], descs["after"]
        except (OSError, CacheError, KeyError, TypeError) as exc:
            return f"variable descs {name} unreadable ({exc})"
        if current in (before, after):
            return None
        return f"variable descs differ (cached {before}, graph has {current})"

    def _load_entry(
        self,
        e: dict[str, Any],
        want: Mapping[str, Any],
        fits: Callable[[CompiledModel], str | None],
        held: serialize.Held | None,
    ) -> tuple[CompiledModel | None, str | None, bool]:
        """(model, why not, broken): broken means the entry's files are gone or corrupt.
        An entry referencing an array the graph in hand lacks is not broken: it serves the
        graph it was made for (with ``graph_cache_check=key`` another graph may look it up)."""
        path = self._path(e["cache_file_name"])
        lacked: list[str] = []

        def held_or_note(digest: str) -> np.ndarray | None:
            array = None if held is None else held(digest)
            if array is None:
                lacked.append(digest)
            return array

        try:
            data = self._read_trusted(path)
            model = serialize.decode_model(
                data,
                path=path,
                weight_dir=os.path.join(self.dir, serialize.WEIGHT_DIR),
                require_owner=not self.shared,
                expect_sha256=e["om_sha256"],
                held=held_or_note,
            )
        except FileNotFoundError as exc:
            return None, f"file missing ({exc.filename})", True
        except OSError as exc:
            return None, f"unreadable ({exc})", False
        except CacheError as exc:  # the one warning comes from the lookup, which names every reason
            if lacked:
                return None, "the graph lacks a constant the entry was compiled with", False
            log.info("graph cache %r: %s", self.key, exc)
            return None, f"corrupt ({exc})", True
        why = _differs_from_key(model, want) or fits(model)
        return (None, why, False) if why else (model, None, False)

    # -- save ---------------------------------------------------------------------------

    def save_sync(
        self,
        model: CompiledModel,
        var_descs: tuple[VarDescs, VarDescs] | None = None,
        drop: Sequence[str] = (),
        *,
        locked: bool = False,
        graph_refs: serialize.GraphRefs | None = None,
    ) -> dict[str, Any]:
        """Publish ``model`` as a new entry (blocking): files first, then the index.

        ``var_descs`` are the variable descs of the source graph and of the model's graph
        (None when the graph has no variables): they go to the ``.rdcpkt``. Entries named in
        ``drop`` (found broken) leave the index and their files are removed.
        ``locked`` says the caller holds ``<key>.lock`` (else it is taken, briefly, for the
        index update). ``graph_refs`` names the tensors the source graph holds (stored as
        references: ``plan.serialize.encode_model``). Returns the new entry.

        Raises:
            OSError, ModelFormatError: the files could not be written (nothing is published).
        """
        rdc_data = b""
        if var_descs is not None:
            descs = {"graph_key": self.key, "before": var_descs[0], "after": var_descs[1]}
            rdc_data = io.make_envelope(RDCPKT_KIND, io.pack(descs))
        om, rdc, sha = self._publish_files(model, rdc_data, graph_refs)
        meta = {
            "fingerprint": model.fingerprint,
            "signature": [[n, list(s)] for n, s in model.signature],
            "options": dict(model.options),
            "versions": dict(model.versions),
            "code": code_digest(),
            "sha256": sha,
            "external": self.external_weight,
            "created": time.time(),
        }
        entry = self._entry(om, rdc, meta)
        self._append(entry, drop, locked)
        log.info("graph cache %r: saved %s", self.key, om)
        return entry

    def _publish_files(
        self, model: CompiledModel, rdc_data: bytes, graph_refs: serialize.GraphRefs | None = None
    ) -> tuple[str, str, str]:
        """Publish the entry's files under the first free ``<key>_<ts>[_n]`` stem: the
        ``.rdcpkt`` (if any), then the ``.om``, each whole and only under a name nobody has
        (``exclusive``), so a name is claimed and filled in one step: a writer killed at any
        point leaves whole files or temp files, never an empty or half ``.om``.
        Returns (om name, rdcpkt name or '', payload sha256)."""
        stamp = time.strftime("%Y%m%d%H%M%S", time.localtime())
        for n in range(10_000):
            stem = f"{self.key}_{stamp}" if n == 0 else f"{self.key}_{stamp}_{n}"
            om, rdc = f"{stem}.om", f"{stem}.rdcpkt" if rdc_data else ""
            if os.path.lexists(self._path(om)) or os.path.lexists(self._path(f"{stem}.rdcpkt")):
                continue  # taken (the check saves encoding the model for nothing; the links decide)
            try:
                if rdc:
                    io.write_atomic_sync(self._path(rdc), rdc_data, mode=self.mode, exclusive=True)
            except FileExistsError:
                continue
            try:
                sha = serialize.save_model_sync(
                    self._path(om), model, external=self.external_weight, mode=self.mode, exclusive=True, graph_refs=graph_refs
                )
            except FileExistsError:
                if rdc:
                    _unlink(self._path(rdc))  # ours: the exclusive link made it
                continue
            except BaseException:
                if rdc:
                    _unlink(self._path(rdc))
                raise
            return om, rdc, sha
        raise CacheError(f"no free model file name for key {self.key!r} at {stamp}", path=self.dir)

    def _append(self, entry: dict[str, Any], drop: Sequence[str], locked: bool) -> None:
        """Read-modify-write the index under the key's lock, then re-read it.

        The lock (taken briefly here unless the caller holds it) serialises the appends of
        writers of one key, in this process or others. Without it (a file system
        without locks) a writer may still replace the index between another's read and
        write: each writer re-checks its own entry and redoes the merge, and every merge
        also takes in the whole ``.om`` files of the key that the index lacks (an entry
        lost that way, or a writer killed between publishing its files and its entry).
        """
        gone = set(drop)
        entries: list[dict[str, Any]] = []
        with contextlib.nullcontext(True) if locked else SyncFileLock(self.lock_path, mode=self.mode, wait=_INDEX_LOCK_WAIT):
            for _ in range(_PUBLISH_TRIES):
                entries, _ = self.read_index_sync()
                kept = [
                    e for e in entries if e["cache_file_name"] not in gone and e["cache_file_name"] != entry["cache_file_name"]
                ]
                orphans = self._orphans({e["cache_file_name"] for e in kept} | gone | {entry["cache_file_name"]})
                self._publish_index([*kept, *orphans, entry])
                back, _ = self.read_index_sync()
                if any(e["cache_file_name"] == entry["cache_file_name"] for e in back):
                    break
            else:
                log.warning(
                    "graph cache %r: index kept being replaced; entry %s is not in it", self.key, entry["cache_file_name"]
                )
        for e in entries:
            if e["cache_file_name"] in gone:
                self._remove_entry_files(e)

    def _remove_entry_files(self, e: dict[str, Any]) -> None:
        """Remove a dropped entry's files, only where they are provably this key's own: the
        ``.om`` named as ``_publish_files`` names them for this key, its ``.rdcpkt`` and
        ``.packs`` by the same stem, each a regular file starting with aioge's magic (or empty: a name claimed
        by a writer that crashed before filling it). An index is data anyone
        with write access to the dir could have crafted: the names in it are not trusted."""
        om, rdc = e["cache_file_name"], e["var_desc_file_name"]
        if not self._om_re.fullmatch(om):
            log.info("graph cache %r: index entry names %r, not a model file of this key; not removing it", self.key, om)
            return
        for name in (om, rdc, om[: -len(".om")] + ".packs"):
            if not name:
                continue
            if name not in (om, om[: -len(".om")] + ".rdcpkt", om[: -len(".om")] + ".packs"):
                log.info("graph cache %r: index entry names %r as the descs of %s; not removing it", self.key, name, om)
            elif not io.unlink_if_ours(self._path(name), empty_ok=True) and os.path.lexists(self._path(name)):
                log.info("graph cache %r: %s is not provably aioge's; not removing it", self.key, name)

    def _orphans(self, known: set[str], *, rebuilding: bool = False) -> list[dict[str, Any]]:
        """Entries for the valid ``.om`` files of this key that are not in ``known``, oldest first
        (``rebuilding``: the whole index is being rebuilt, so finding them is not news)."""
        try:
            names = sorted(n for n in os.listdir(self.dir) if self._om_re.fullmatch(n) and n not in known)
        except OSError:
            return []
        out = []
        for name in names:
            path = self._path(name)
            try:
                meta = serialize.decode_meta(self._read_trusted(path), path=path, check_versions=False)
            except (OSError, CacheError) as exc:
                (log.info if rebuilding else log.debug)("graph cache %r: %s is not a model to index (%s)", self.key, name, exc)
                continue
            rdc = name[: -len(".om")] + ".rdcpkt"
            out.append(self._entry(name, rdc if os.path.exists(self._path(rdc)) else "", meta))
            if not rebuilding:
                log.info("graph cache %r: indexing %s, a whole model the index lacked", self.key, name)
        out.sort(key=lambda e: e["created"])
        return out

    def _try_publish(self, entries: list[dict[str, Any]]) -> None:
        try:
            self._publish_index(entries)
        except OSError as exc:
            log.warning("graph cache %r: cannot rewrite the index (%s)", self.key, exc)


# -- matching helpers -----------------------------------------------------------------


def _mismatch(e: dict[str, Any], want: Mapping[str, Any]) -> str | None:
    if e["versions"] != want["versions"]:
        return f"versions differ (cached {e['versions']}, this is {want['versions']})"
    if want["code"] is not None and e["code"] != want["code"]:
        return "made by another build of aioge's code"
    if want["fingerprint"] is not None and e["fingerprint"] != want["fingerprint"]:
        return "the graph changed (fingerprint differs)"
    if e["signature"] != want["signature"]:
        return f"signature differs (cached {e['signature']})"
    if e["options"] != want["options"]:
        diff = sorted(k for k in set(e["options"]) | set(want["options"]) if e["options"].get(k) != want["options"].get(k))
        return f"compile options differ: {diff}"
    return None


def _differs_from_key(model: CompiledModel, want: Mapping[str, Any]) -> str | None:
    """Why a loaded model is not what its entry said (None if it is)."""
    if want["fingerprint"] is not None and model.fingerprint != want["fingerprint"]:
        return "the model's fingerprint differs from its entry's"
    if [[n, list(s)] for n, s in model.signature] != want["signature"]:
        return "the model's signature differs from its entry's"
    return None


def _parse_index(data: bytes, path: str) -> tuple[list[dict[str, Any]], bool]:
    _, payload = io.open_envelope(data, IDX_KIND, path=path, check_versions=False)
    obj = io.unpack(payload, what="graph cache index", path=path)
    if not isinstance(obj, dict) or not isinstance(obj.get("cache_file_list"), list):
        raise CacheError("index has no cache_file_list", path=path)
    entries = [e for e in obj["cache_file_list"] if _valid_entry(e)]
    return entries, len(entries) == len(obj["cache_file_list"])


def _valid_entry(e: Any) -> bool:
    if not isinstance(e, dict) or not all(isinstance(e.get(k), str) for k in _ENTRY_STR_FIELDS):
        return False
    name, rdc = e["cache_file_name"], e["var_desc_file_name"]
    return (
        bool(name)
        and name not in (".", "..")
        and rdc not in (".", "..")
        and "\x00" not in name + rdc
        and os.path.basename(name) == name
        and os.path.basename(rdc) == rdc
        and isinstance(e.get("signature"), list)
        and isinstance(e.get("options"), dict)
        and isinstance(e.get("versions"), dict)
        and isinstance(e.get("created"), (int, float))
    )


def read_index(path: str | os.PathLike[str]) -> dict[str, Any]:
    """An index file's content as plain data (for ``aioge cache show-index``).

    Raises:
        CacheError: unreadable, corrupt or not an index.
    """
    path = os.fspath(path)
    try:
        data = io.read_bytes_sync(path, max_bytes=_MAX_INDEX_BYTES)
    except OSError as exc:
        raise CacheError(f"cannot read: {exc.strerror}", path=path) from None
    _, payload = io.open_envelope(data, IDX_KIND, path=path, check_versions=False)
    obj = io.unpack(payload, what="graph cache index", path=path)
    if not isinstance(obj, dict):
        raise CacheError("not an index", path=path)
    return obj


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        log.info("cannot remove %s: %s", path, exc)
