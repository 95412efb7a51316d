"""``csrc/aioge.h`` is the C tier's contract: native.py's job numbers, activation and error
codes and ctypes signatures must be the header's, and no .c file declares an exported
function by hand (issue 40, item 3)."""

from __future__ import annotations

import ctypes
import re
from pathlib import Path

from aioge.kernels import native

CSRC = Path(native.__file__).parent / "csrc"
HEADER = (CSRC / "aioge.h").read_text()


def _enum(name: str) -> dict[str, int]:
    body = re.search(r"enum " + name + r" \{(.*?)\};", HEADER, re.S)
    assert body, name
    return {k: int(v) for k, v in re.findall(r"^\s*(\w+) = (-?\d+),", body.group(1), re.M)}


_CTYPES = {
    "int": ctypes.c_int,
    "int64_t": ctypes.c_int64,
    "int32_t": ctypes.c_int32,
    "float": ctypes.c_float,
    "size_t": ctypes.c_size_t,
}


def _ctype(decl: str) -> object:
    """The ctypes type of a C declaration (a parameter with its name, or a result type)."""
    if "*" in decl:
        return ctypes.c_void_p
    words = decl.replace("const", "").split()
    return None if words == ["void"] else _CTYPES[words[0]]


def _prototypes() -> dict[str, tuple[object, tuple[object, ...]]]:
    out = {}
    for result, name, params in re.findall(r"^([\w ]+?\**)\s*(aioge_\w+)\(([^)]*)\);", HEADER, re.M | re.S):
        args = () if params.strip() == "void" else tuple(_ctype(p) for p in params.split(","))
        out[name] = (_ctype(result), args)
    return out


def test_abi_job_numbers_and_codes_are_the_headers() -> None:
    assert int(re.search(r"#define AIOGE_ABI (\d+)", HEADER).group(1)) == native.ABI  # type: ignore[union-attr]
    jobs = _enum("aioge_job")
    assert jobs.pop("AIOGE_NJOBS") == len(jobs) == 33
    assert jobs == {k: getattr(native, k) for k in dir(native) if k.startswith("JOB_")}
    acts = _enum("aioge_act")
    assert {k.removeprefix("ACT_").replace("_", "").lower(): v for k, v in acts.items()} == {
        (k.lower() or "none"): v for k, v in native.ACT.items()
    }
    errors = _enum("aioge_error")
    assert errors.pop("AIOGE_OK") == 0
    assert set(errors.values()) == set(native.ERRORS)


def test_every_ctypes_signature_is_the_headers_prototype() -> None:
    protos = _prototypes()
    assert len(protos) >= 38
    for name, (result, args) in native.SIGNATURES.items():
        assert name in protos, f"{name} is not declared in aioge.h"
        assert (result, args) == protos[name], name


def test_every_c_file_includes_the_header_and_declares_nothing_by_hand() -> None:
    files = sorted(CSRC.glob("*.c"))
    assert {f.name for f in files} >= {"alloc.c", "dwconv.c", "pool.c", "gemm.c", "module.c", "norm.c", "par.c", "queue.c"}
    for f in files:
        text = f.read_text()
        assert '#include "aioge.h"' in text, f.name
        # a prototype at file level: a declaration of an aioge_ function ending in ");"
        declared = re.findall(r"^[A-Za-z][\w ]*\**\s*(aioge_\w+)\([^;{]*\);", text, re.M)
        assert declared == [], f"{f.name} declares {declared}: they belong in aioge.h"
    defined = set()
    for f in files:
        defined |= set(re.findall(r"^[A-Za-z][\w ]*\**\s*(aioge_\w+)\([^;{]*\)\s*\{", f.read_text(), re.M))
    assert set(_prototypes()) <= defined | {"aioge_float_of"}  # every prototype has its function
