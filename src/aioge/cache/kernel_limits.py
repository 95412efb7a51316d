"""Where the kernel cache lives and how big it may grow, as GE documents it.

- Root: the option ``ge.op_compiler_cache_dir``, else env ``ASCEND_CACHE_PATH``, else
  ``$HOME/atc_data``; kernels go in ``<root>/kernel_cache/<soc>/``.
- Limits: an ``op_cache.ini``, section ``[op_compiler_cache]``, keys ``max_op_cache_size``
  (MB; an integer >= 1, or -1 for no aging) and ``remain_cache_size_ratio`` (an integer
  1..100). GE's code reads ``<root>/kernel_cache/op_cache.ini``; its documentation puts the
  file directly in ``<root>``. Both are read: ``kernel_cache/op_cache.ini`` wins when it sets
  both values validly, else ``<root>/op_cache.ini`` (a warning when both set different values).
  A file takes effect only when both values are valid. Otherwise env
  ``ASCEND_MAX_OP_CACHE_SIZE`` and ``ASCEND_REMAIN_CACHE_SIZE_RATIO`` apply, each when valid
  (an invalid value is one warning naming the variable); otherwise the defaults 500 and 50.
- The ``kernel_cache/op_cache.ini`` that a compile generates when there is none holds the
  section and the two keys *commented out*: it documents the format and never overrides the
  env variables or the defaults (GE's generated file holds only its section too). A user
  who uncomments or writes the values sets them, above the env, as in GE. A file generated
  by older aioge versions with the defaults written in (500/50, unchanged) counts as
  generated: it sets nothing either.
"""

from __future__ import annotations

import configparser
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

from aioge.plan.io import read_bytes_sync, write_atomic_sync

__all__ = [
    "AGING_IDLE_SECONDS",
    "DEFAULT_MAX_MB",
    "DEFAULT_RATIO",
    "INI_NAME",
    "CacheLimits",
    "read_limits",
    "resolve_cache_root",
    "write_default_ini",
]

log = logging.getLogger(__name__)

INI_NAME = "op_cache.ini"
INI_SECTION = "op_compiler_cache"
DEFAULT_MAX_MB = 500
DEFAULT_RATIO = 50
AGING_IDLE_SECONDS = 1800.0  # GE's MIN_CACHE_AGING_TIME: entries used in the last 30 minutes stay
ENV_ROOT = "ASCEND_CACHE_PATH"
ENV_MAX = "ASCEND_MAX_OP_CACHE_SIZE"
ENV_RATIO = "ASCEND_REMAIN_CACHE_SIZE_RATIO"
_INT_MAX = 2**31 - 1
_MAX_INI_BYTES = 64 << 10


@dataclass(frozen=True, slots=True)
class CacheLimits:
    """The effective size limits of a kernel cache and where each came from."""

    max_mb: int  # -1: no aging, and hits do not update access times
    ratio: int  # percent of max_mb that aging leaves
    max_source: str  # "ini", "env" or "default"
    ratio_source: str
    ini: str = ""  # the op_cache.ini that set them, when one did

    @property
    def aging(self) -> bool:
        return self.max_mb != -1

    @property
    def max_bytes(self) -> int:
        return self.max_mb << 20

    @property
    def remain_bytes(self) -> int:
        """The size aging shrinks an over-full soc folder to."""
        return self.max_bytes * self.ratio // 100


def resolve_cache_root(option: str, env: Mapping[str, str]) -> Path:
    """The kernel cache root: option, then ``$ASCEND_CACHE_PATH``, then ``$HOME/atc_data``.

    ``env`` is the environment the session resolved its options under (read then, never at
    import). The option's characters were checked when it was given.
    """
    if option:
        return Path(option).expanduser()
    if env.get(ENV_ROOT):
        return Path(env[ENV_ROOT]).expanduser()
    home = env.get("HOME") or os.path.expanduser("~")
    return Path(home) / "atc_data"


def _parse_max(text: str | None) -> int | None:
    if text is None or not re.fullmatch(r"\s*-?[0-9]{1,18}\s*", text):  # bounded: int() refuses 4300+ digits
        return None
    v = int(text)
    return v if v == -1 or 1 <= v < _INT_MAX else None


def _parse_ratio(text: str | None) -> int | None:
    if text is None or not re.fullmatch(r"\s*[0-9]{1,18}\s*", text):
        return None
    v = int(text)
    return v if 1 <= v <= 100 else None


_MAX_ALLOWED = f"an integer from 1 to {_INT_MAX - 1} (MB), or -1 for no aging"
_RATIO_ALLOWED = "an integer from 1 to 100 (percent)"

Warn = Callable[[str, str], None]  # (what, message): a caller may say each ``what`` once


def _log_warning(what: str, message: str) -> None:
    log.warning("%s", message)


def read_limits(kernel_dir: Path, env: Mapping[str, str], *, warn: Warn | None = None) -> CacheLimits:
    """The limits in force for ``<root>/kernel_cache``: ``kernel_cache/op_cache.ini``, else
    ``<root>/op_cache.ini``, else the env variables, else the defaults (see the module doc).

    ``warn(what, message)`` receives each warning (an invalid ini or env value, two inis
    that disagree) with a key naming it, so a caller can say each once; by default they
    are logged. Never raises: an unreadable or invalid ini is ignored with a warning.
    """
    warn = warn or _log_warning
    found = []
    for ini in (kernel_dir / INI_NAME, kernel_dir.parent / INI_NAME):
        values = _ini_values(ini, warn)
        if values is not None:
            found.append((ini, values))
    env_max, env_ratio = (
        _env_value(env, ENV_MAX, _parse_max, _MAX_ALLOWED, warn),
        _env_value(env, ENV_RATIO, _parse_ratio, _RATIO_ALLOWED, warn),
    )
    if found:
        ini, (max_mb, ratio) = found[0]
        if len(found) > 1 and found[1][1] != found[0][1]:
            other, (omax, oratio) = found[1]
            warn(
                f"shadowed:{other}:{omax}:{oratio}",
                f"{other} (max_op_cache_size={omax}, remain_cache_size_ratio={oratio}) is ignored: {ini} sets "
                f"max_op_cache_size={max_mb}, remain_cache_size_ratio={ratio} and wins",
            )
        return CacheLimits(max_mb, ratio, "ini", "ini", str(ini))
    return CacheLimits(
        DEFAULT_MAX_MB if env_max is None else env_max,
        DEFAULT_RATIO if env_ratio is None else env_ratio,
        "default" if env_max is None else "env",
        "default" if env_ratio is None else "env",
    )


def _env_value(
    env: Mapping[str, str], name: str, parse: Callable[[str | None], int | None], allowed: str, warn: Warn
) -> int | None:
    text = env.get(name)
    if text is None or not text.strip():
        return None  # unset (or set empty): nothing to say
    value = parse(text)
    if value is None:
        warn(f"env:{name}={text}", f"{name}={text[:64]!r} is not valid (expected {allowed}); it is ignored")
    return value


def _ini_values(ini: Path, warn: Warn) -> tuple[int, int] | None:
    """(max, ratio) when ``ini`` sets both validly; None when it is absent, a template (both
    keys missing), or invalid (one warning)."""
    values = _read_ini(ini, warn)
    if values is None or values == (None, None):
        return None
    max_mb, ratio = _parse_max(values[0]), _parse_ratio(values[1])
    if max_mb is not None and ratio is not None:
        return max_mb, ratio
    warn(
        f"ini:{ini}:{values}",
        f"{ini}: max_op_cache_size={values[0]!r} and remain_cache_size_ratio={values[1]!r} are not both valid "
        f"(expected {_MAX_ALLOWED}, and {_RATIO_ALLOWED}); the file is ignored",
    )
    return None


def _read_ini(path: Path, warn: Warn) -> tuple[str | None, str | None] | None:
    """(max, ratio) strings from the ini, or None when there is no usable file."""
    try:
        data = read_bytes_sync(path, max_bytes=_MAX_INI_BYTES)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except Exception as exc:  # CacheError (too large, not a file) or OSError: ignore the file
        warn(f"ini-read:{path}", f"{path}: cannot read ({exc}); ignored")
        return None
    if data in _OLD_GENERATED:
        return None  # written by an older aioge with the defaults filled in: it sets nothing
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(data.decode("utf-8", "replace"), source=str(path))
    except configparser.Error as exc:
        warn(f"ini-parse:{path}:{exc}", f"{path}: not an ini file ({exc}); ignored")
        return None
    if not parser.has_section(INI_SECTION):
        if parser.sections():  # a file of other sections only: its values would be ignored unseen
            others = ", ".join(f"[{s}]" for s in parser.sections())
            warn(f"ini-section:{path}", f"{path}: has {others}, not [{INI_SECTION}]; its values are ignored")
        return (None, None)
    section = parser[INI_SECTION]
    return section.get("max_op_cache_size"), section.get("remain_cache_size_ratio")


# What ``write_default_ini`` wrote before it left the values commented out.
_OLD_GENERATED = frozenset(
    {
        (
            "# aioge kernel cache limits (GE's format). max_op_cache_size: MB, -1 = no aging;\n"
            "# remain_cache_size_ratio: percent of the maximum left after aging (1..100).\n"
            f"[{INI_SECTION}]\nmax_op_cache_size={DEFAULT_MAX_MB}\nremain_cache_size_ratio={DEFAULT_RATIO}\n"
        ).encode(),
    }
)


def write_default_ini(kernel_dir: Path, *, mode: int = 0o600) -> bool:
    """Write ``op_cache.ini`` if there is none, with its section and the two keys commented
    out (so it never overrides the env variables); True when written.

    Raises:
        OSError: the directory is not writable.
    """
    ini = kernel_dir / INI_NAME
    if ini.exists():
        return False
    text = (
        "# aioge kernel cache limits (GE's format). Uncomment a value to set it; a file sets the\n"
        "# limits only with both values valid, and then beats $ASCEND_MAX_OP_CACHE_SIZE and\n"
        "# $ASCEND_REMAIN_CACHE_SIZE_RATIO. While commented out, those apply, else the defaults.\n"
        "# max_op_cache_size: MB, -1 = no aging; remain_cache_size_ratio: percent of the maximum\n"
        "# left after aging (1..100).\n"
        f"[{INI_SECTION}]\n# max_op_cache_size={DEFAULT_MAX_MB}\n# remain_cache_size_ratio={DEFAULT_RATIO}\n"
    )
    write_atomic_sync(ini, text.encode(), mode=mode)
    return True
