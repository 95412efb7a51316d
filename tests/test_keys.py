"""aioge.keys: every key built in one place from named parts; each part changes the key."""

from __future__ import annotations

import aioge
from aioge.keys import code_digest, compile_options, graph_match_key, kernel_key_parts, versions
from aioge.options import OPTIONS
from aioge.plan import serialize


def test_graph_match_key_names_every_part_and_each_part_changes_it() -> None:
    def key(fingerprint: str | None = "f" * 64, shape: tuple = (2, 3), tier: str = "avx512", **options: str) -> dict:
        return graph_match_key(fingerprint, [("x", shape)], {"ge.exec.disableReuseMemory": "0", **options}, native=tier)

    base = key()
    assert set(base) == {"versions", "code", "fingerprint", "signature", "options"}
    assert base["versions"] == {**versions(), "native": "avx512"} and base["code"] == code_digest()
    assert base["signature"] == [["x", [2, 3]]]
    # the kernels' ISA tier (plan_versions) is a part too
    for other in (key("e" * 64), key(None), key(shape=(2, 4)), key(**{"ge.exec.disableReuseMemory": "1"}), key(tier="avx2")):
        assert other != base
    # Options that say where to cache or where to run are not part of it (exec_devices: issue 40).
    assert key(**{"ge.graph_key": "k", "aioge.exec_devices": "2"}) == base
    # aioge.exec_mode is: the compiler reads it (sink plans take native kernels, prefer_native).
    assert key(**{"aioge.exec_mode": "host"}) != key(**{"aioge.exec_mode": "sink"})


def test_compile_options_follow_the_flag_in_the_options_table() -> None:
    raw = {key: spec.default for key, spec in OPTIONS.items()}
    kept = compile_options(raw)
    assert set(kept) == {key for key, spec in OPTIONS.items() if spec.stage == "compiler"}
    assert {"ge.graph_compiler_cache_dir", "ge.graph_key", "aioge.cache_shared", "aioge.exec_devices"}.isdisjoint(kept)
    assert {"aioge.exec_threads", "aioge.tune_mode", "ge.exec.disableReuseMemory", "aioge.exec_mode"} <= set(kept)


def test_one_code_digest_for_kernel_keys_and_compiled_models() -> None:
    g = aioge.Graph("g")
    x = g.input("x", (2, 3), "float32")
    g.output(aioge.ops.relu(x))
    parts = kernel_key_parts(g.nodes[0], "AiVec", soc="s", op_debug_level=0, impl_version=1)
    assert parts["code"] == code_digest() == serialize.code_digest()
    assert {k: parts[k] for k in versions()} == versions()


def test_code_digest_covers_what_decides_a_kernel_not_the_cli_or_server(tmp_path) -> None:
    import shutil
    from pathlib import Path

    from aioge.keys import digest_of

    src = Path(aioge.__file__).parent
    root = tmp_path / "aioge"
    shutil.copytree(src, root, ignore=shutil.ignore_patterns("*.so", "__pycache__", "build"))
    base = digest_of(root)
    assert base == code_digest()
    for edit in ("cli.py", "server.py", "session.py", "serving/batcher.py", "runtime/executor.py"):
        (root / edit).write_text((root / edit).read_text() + "\n# an edit\n")
        assert digest_of(root) == base, edit  # cached kernels and graphs stay valid
    c_file = sorted((root / "kernels" / "csrc").glob("*.c"))[0].relative_to(root).as_posix()
    for edit in (c_file, "ops/nn.py", "compiler/graph.py", "plan/kernel.py"):
        text = (root / edit).read_text()
        (root / edit).write_text(text + "\n/* an edit */\n" if edit.endswith(".c") else text + "\n# an edit\n")
        assert digest_of(root) != base, edit
        (root / edit).write_text(text)
    assert digest_of(root) == base
