"""numba's on-disk caches are dropped when a source their compiled code reads changes
(``kernel.jit._drop_stale_caches``): numba itself keys a cached function on its own file only."""

import os

from fleet_marl.kernel import jit


def _tree(root):
    (root / "kernel" / "__pycache__").mkdir(parents=True)
    (root / "kernel" / "layout.py").write_text("A = 1\n")
    (root / "kernel" / "engine.py").write_text("from layout import A\n")
    return root / "kernel" / "__pycache__"


def test_a_changed_source_drops_every_cached_function_and_an_unchanged_one_keeps_them(tmp_path, monkeypatch):
    cache = _tree(tmp_path)
    monkeypatch.setattr(jit, "_PACKAGE", tmp_path)
    jit._drop_stale_caches()  # the first digest
    for name in ("engine.round_rows-70.py311.nbi", "engine.round_rows-70.py311.1.nbc"):
        (cache / name).write_bytes(b"compiled")
    jit._drop_stale_caches()  # nothing changed: the caches stay
    assert sorted(p.name for p in cache.glob("*.nb*")) == ["engine.round_rows-70.py311.1.nbc", "engine.round_rows-70.py311.nbi"]
    layout = tmp_path / "kernel" / "layout.py"
    layout.write_text("A = 2\n")  # another module's constant: numba would not notice
    st = layout.stat()
    os.utime(layout, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    jit._drop_stale_caches()
    assert not list(cache.glob("*.nb*"))
    assert (cache / "compiled_sources.sha1").is_file()
