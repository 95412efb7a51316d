"""Where the kernel cache lives and how big it may grow, exactly as GE documents it.

- Root: the option ``ge.op_compiler_cache_dir``, else env ``ASCEND_CACHE_PATH``, else
  ``$HOME/atc_data``; kernels go in ``<root>/kernel_cache/<soc>/``.
- Limits: ``<root>/kernel_cache/op_cache.ini``, section ``[op_compiler_cache]``, keys
  ``max_op_cache_size`` (MB; an integer >= 1, or -1 for no aging) and
  ``remain_cache_size_ratio`` (an integer 1..100). The file takes effect only when both
  values are valid. Otherwise env ``ASCEND_MAX_OP_CACHE_SIZE`` and
  ``ASCEND_REMAIN_CACHE_SIZE_RATIO`` apply, each when valid; otherwise the defaults 500 and 50.
"""

from __future__ import annotations

import configparser
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

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


def read_limits(kernel_dir: Path, env: Mapping[str, str]) -> CacheLimits:
    """The limits in force for ``<root>/kernel_cache`` (ini > env > defaults).

    Never raises: an unreadable or invalid ini is ignored with a warning.
    """
    ini = kernel_dir / INI_NAME
    values = _read_ini(ini)
    if values is not None:
        max_mb, ratio = _parse_max(values[0]), _parse_ratio(values[1])
        if max_mb is not None and ratio is not None:
            return CacheLimits(max_mb, ratio, "ini", "ini")
        log.warning(
            "%s: max_op_cache_size=%r and remain_cache_size_ratio=%r are not both valid (an integer >= 1 or -1, "
            "and an integer 1..100); the file is ignored", ini, values[0], values[1],
        )
    env_max, env_ratio = _parse_max(env.get(ENV_MAX)), _parse_ratio(env.get(ENV_RATIO))
    return CacheLimits(
        DEFAULT_MAX_MB if env_max is None else env_max,
        DEFAULT_RATIO if env_ratio is None else env_ratio,
        "default" if env_max is None else "env",
        "default" if env_ratio is None else "env",
    )


def _read_ini(path: Path) -> tuple[str | None, str | None] | None:
    """(max, ratio) strings from the ini, or None when there is no usable file."""
    try:
        text = read_bytes_sync(path, max_bytes=_MAX_INI_BYTES).decode("utf-8", "replace")
    except FileNotFoundError:
        return None
    except Exception as exc:  # CacheError (too large, not a file) or OSError: ignore the file
        log.warning("%s: cannot read (%s); ignored", path, exc)
        return None
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(text, source=str(path))
    except configparser.Error as exc:
        log.warning("%s: not an ini file (%s); ignored", path, exc)
        return None
    if not parser.has_section(INI_SECTION):
        return (None, None)
    section = parser[INI_SECTION]
    return section.get("max_op_cache_size"), section.get("remain_cache_size_ratio")


def write_default_ini(kernel_dir: Path, *, mode: int = 0o600) -> bool:
    """Write ``op_cache.ini`` with GE's defaults if there is none; True when written.

    Raises:
        OSError: the directory is not writable.
    """
    ini = kernel_dir / INI_NAME
    if ini.exists():
        return False
    text = (
        "# aioge kernel cache limits (GE's format). max_op_cache_size: MB, -1 = no aging;\n"
        "# remain_cache_size_ratio: percent of the maximum left after aging (1..100).\n"
        f"[{INI_SECTION}]\nmax_op_cache_size={DEFAULT_MAX_MB}\nremain_cache_size_ratio={DEFAULT_RATIO}\n"
    )
    write_atomic_sync(ini, text.encode(), mode=mode)
    return True
