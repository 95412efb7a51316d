"""Packed weight layouts a graph-cache entry keeps (``cache.packs``), found by the weight.

A model loaded from (or saved to) the graph cache registers its constants here by name
(``register``) with a ``Book``: the packs its entry stored and those a run makes since. A
kernel's ``WeightDerived`` with a layout asks ``take`` before packing (a stored pack whose
check has passed, else None) and tells ``made`` after; ``flush`` (after each run) hands a
book in which packs were made all its packs, for the cache to store.
"""

from __future__ import annotations

import logging
import threading
import weakref
from concurrent.futures import Future
from typing import Callable

import numpy as np

from aioge.kernels.contract import is_constant

__all__ = ["Book", "flush", "made", "register", "take"]

log = logging.getLogger(__name__)

Key = tuple[str, str]  # (the constant's name in the model, the layout)


class Book:
    """One model's stored packs (each with its check, run elsewhere: a future of whether it
    passed) and the packs made for its constants since (``save`` stores them)."""

    def __init__(self, stored: dict[Key, tuple[np.ndarray, Future[bool]]], save: Callable[[dict[Key, np.ndarray]], None]):
        self.stored = stored
        # the stored ones taken and the ones made (while their kernels hold them): what ``save`` writes
        self.packs: weakref.WeakValueDictionary[Key, np.ndarray] = weakref.WeakValueDictionary()
        self.save = save


_lock = threading.Lock()
_by_id: dict[int, tuple[weakref.ref[np.ndarray], str, Book]] = {}
_dirty: set[Book] = set()


def register(book: Book, constants: dict[str, np.ndarray]) -> None:
    """Name ``constants`` (read-only arrays of a loaded or saved model) in ``book``."""
    with _lock:
        for name, a in constants.items():
            if a.nbytes and is_constant(a):
                if _find(a) is None:  # one finalizer an array, however many models register it
                    weakref.finalize(a, _by_id.pop, id(a), None)
                _by_id[id(a)] = (weakref.ref(a), name, book)


def _find(w: np.ndarray) -> tuple[str, Book] | None:
    e = _by_id.get(id(w))
    return (e[1], e[2]) if e is not None and e[0]() is w else None


def take(w: np.ndarray, layout: str) -> np.ndarray | None:
    """The stored pack of ``w`` in ``layout`` whose check passed, or None (a failed check is
    one warning, and the pack is made and stored again)."""
    found = _find(w)
    if found is None:
        return None
    name, book = found
    stored = book.stored.pop((name, layout), None)
    if stored is None:
        return None
    if stored[1].result():
        book.packs[(name, layout)] = stored[0]
        return stored[0]
    log.warning("stored pack of %r (%s) does not match its checksum; packing it again", name, layout)
    return None


def made(w: np.ndarray, layout: str, value: np.ndarray) -> None:
    """Note a pack made for ``w``: its book stores it at the next ``flush``."""
    found = _find(w)
    if found is not None:
        with _lock:
            found[1].packs[(found[0], layout)] = value
            _dirty.add(found[1])


def flush() -> None:
    """Hand each book with new packs all its packs, to ``save`` (which writes them in the background)."""
    if not _dirty:
        return
    with _lock:
        saves = [(book.save, dict(book.packs)) for book in _dirty]
        _dirty.clear()
    for save, packs in saves:
        save(packs)
