"""JAX's persistent cache as jaxfeed turns it on: programs that took 0.1 s to compile are kept,
not only those over JAX's default of 1 s, unless the user set a threshold."""

import os
import threading
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

from jaxfeed.runtime.compile_cache import MIN_COMPILE_SECONDS, use_compile_cache

ENV = "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"
OPTION = "jax_persistent_cache_min_compile_time_secs"


@pytest.fixture
def threshold():
    """Leave JAX's cache options as this test found them (the session's own cache stays on)."""
    before = {name: getattr(jax.config, name) for name in (OPTION, "jax_enable_compilation_cache")}
    yield
    for name, value in before.items():
        jax.config.update(name, value)


@pytest.mark.parametrize(("env", "configured", "kept"), [
    (None, 1.0, MIN_COMPILE_SECONDS),  # JAX's default: the small programs are kept too
    ("2", 1.0, 1.0),  # the variable set: its value stands (JAX read it at start, here 1.0)
    (None, 5.0, 5.0),  # set through jax.config before: kept
])  # fmt: skip
def test_the_threshold_is_a_tenth_of_a_second_unless_the_user_set_one(
    env, configured, kept, threshold, monkeypatch, tmp_path
):
    if env is None:
        monkeypatch.delenv(ENV, raising=False)
    else:
        monkeypatch.setenv(ENV, env)
    jax.config.update(OPTION, configured)
    assert use_compile_cache(tmp_path) is not None
    assert getattr(jax.config, OPTION) == kept


def test_turning_the_cache_off_leaves_the_threshold(threshold, monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    jax.config.update(OPTION, 1.0)
    assert use_compile_cache(None) is None
    assert not jax.config.jax_enable_compilation_cache
    assert getattr(jax.config, OPTION) == 1.0


# ---------------------------------------------------------------------------------- issue 63
CACHE_OPTIONS = (
    "jax_compilation_cache_dir",
    "jax_enable_compilation_cache",
    "jax_compilation_cache_max_size",
    "jax_persistent_cache_min_entry_size_bytes",
    OPTION,
)


@pytest.fixture
def own_cache(tmp_path, monkeypatch):
    """JAX's persistent cache as a run with none of its own finds it (this session's folder set
    aside), every program kept; what the test's folder holds is read by a later compilation only
    after ``later_run()``. JAX's cache options are put back after."""
    from jax.experimental.compilation_cache import compilation_cache

    before = {name: getattr(jax.config, name) for name in CACHE_OPTIONS}
    monkeypatch.delenv("JAX_COMPILATION_CACHE_DIR", raising=False)
    monkeypatch.delenv("JAX_COMPILATION_CACHE_MAX_SIZE", raising=False)
    monkeypatch.setenv(ENV, "0")
    jax.config.update("jax_compilation_cache_dir", None)
    jax.config.update("jax_compilation_cache_max_size", -1)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    jax.config.update(OPTION, 0.0)
    compilation_cache.reset_cache()
    yield tmp_path / "xla"
    for name, value in before.items():
        jax.config.update(name, value)
    compilation_cache.reset_cache()


def later_run():
    """What a new process finds: JAX's cache opened afresh on the same folder."""
    from jax.experimental.compilation_cache import compilation_cache

    compilation_cache.reset_cache()


def compile_program(scale):
    """Compile (or load) one small program of its own for each ``scale``; its result."""
    import numpy as np

    step = jax.jit(lambda x: jnp.tanh(x * scale) + jnp.cos(x) ** 2)
    return np.asarray(step(np.arange(7.0, dtype=np.float32)))


def entries(folder):
    return {p.name for p in folder.iterdir() if p.name.endswith("-cache")}


def compiled_alone(scale, folder):
    """Compile the program of ``scale``, and its entry's path (the one new entry)."""
    before = entries(folder) if folder.is_dir() else set()
    compile_program(scale)
    [entry] = entries(folder) - before
    return folder / entry


def caught(action, timeout=60):
    """Run ``action`` in a thread (a hang fails the test instead of stopping the suite): the
    warnings it gave, as text."""
    done, found = threading.Event(), []
    with warnings.catch_warnings(record=True) as raised:
        warnings.simplefilter("always")

        def run():
            action()
            done.set()

        worker = threading.Thread(target=run, daemon=True)
        worker.start()
        finished = done.wait(timeout)
        found = [f"{w.category.__name__}: {w.message}" for w in raised]
    assert finished, f"still compiling after {timeout} s (hung reading the cache); {found}"
    return found


def test_a_damaged_entry_is_written_again_with_one_warning_and_then_loads(own_cache):
    """D17: an entry cut short (JAX writes an entry in place: a process killed meanwhile, a full
    disk) warned on every later run, as JAX's raw UserWarning, and was never written again. Now
    one warning names it, the program is compiled and written again, and the next run loads it."""
    assert use_compile_cache(own_cache) == own_cache
    entry = compiled_alone(1.5, own_cache)
    whole = entry.read_bytes()
    entry.write_bytes(whole[: len(whole) // 2])
    later_run()
    found = caught(lambda: compile_program(1.5))
    assert len(found) == 1, found
    assert found[0].startswith(f"RuntimeWarning: the compilation cache entry {entry} was damaged")
    assert "removed; this program is compiled afresh" in found[0] and "\n" not in found[0]
    assert entry.stat().st_size > len(whole) // 2  # written again, whole
    later_run()
    assert caught(lambda: compile_program(1.5)) == []  # loaded: no warning, nothing written


def _unblock(path):
    """Open a FIFO's other end, so that a reader stuck opening it goes on (the old code)."""
    import contextlib
    import stat

    with contextlib.suppress(OSError):
        if stat.S_ISFIFO(os.lstat(path).st_mode):
            os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))


@pytest.mark.parametrize(
    ("planted", "said"),
    [("fifo", "a FIFO, not a file"), ("dev-zero", "a link, not a file"), ("huge", "bytes, over")],
)
def test_only_a_regular_file_of_bounded_size_is_read_at_an_entry_s_name(
    planted, said, own_cache, monkeypatch
):
    """D09: JAX read whatever sat at an entry's name: a FIFO hung the run, a link to /dev/zero
    took all the memory there was. Now only a regular file of at most ENTRY_LIMIT bytes is read;
    anything else is removed with one warning and the program written again."""
    from jaxfeed.runtime import compile_cache

    assert use_compile_cache(own_cache) == own_cache
    entry = compiled_alone(2.5, own_cache)
    entry.unlink()
    if planted == "fifo":
        os.mkfifo(entry)
    elif planted == "dev-zero":
        entry.symlink_to("/dev/zero")
    else:  # a sparse file over the limit (lowered here to 1 MiB)
        monkeypatch.setattr(compile_cache, "ENTRY_LIMIT", 1 << 20)
        with open(entry, "wb") as file:
            file.truncate(2 << 20)
    later_run()
    try:
        found = caught(lambda: compile_program(2.5))
    finally:
        _unblock(entry)
    assert len(found) == 1 and f"entry {entry} was" in found[0] and said in found[0], found
    assert entry.is_file() and not entry.is_symlink() and entry.stat().st_size < 1 << 20
    later_run()
    assert caught(lambda: compile_program(2.5)) == []


def test_a_folder_written_with_and_without_filelock_is_used_bounded(own_cache):
    """Also (issue 63): entries written where filelock was not installed have no -atime file;
    once it is installed JAX's bounded cache failed every write on the first of them (a
    UserWarning with FileNotFoundError ... -atime) and kept no new program. Now the missing
    files are written when the bounded cache opens the folder, and the writes go on."""
    assert use_compile_cache(own_cache) == own_cache
    assert jax.config.jax_compilation_cache_max_size == 4 << 30  # filelock is installed here
    with_atime = compiled_alone(3.5, own_cache)
    without = compiled_alone(4.5, own_cache)
    Path(str(without).removesuffix("-cache") + "-atime").unlink()  # as a core install wrote it
    assert Path(str(with_atime).removesuffix("-cache") + "-atime").is_file()
    later_run()
    assert use_compile_cache(own_cache) == own_cache  # the next run, bounded
    assert Path(str(without).removesuffix("-cache") + "-atime").is_file()
    new = caught(lambda: compiled_alone(6.5, own_cache))  # a write: JAX's scan of the entries
    assert new == []
    assert caught(lambda: compile_program(4.5)) == []  # and the old entries load


def test_a_bounded_cache_evicts_entries_without_atime_by_their_age(tmp_path):
    """An entry another process writes meanwhile without its -atime file is ranked by its
    modification time, not a failed write."""
    from jaxfeed.runtime.compile_cache import CheckedCache

    cache = CheckedCache(str(tmp_path), max_size=3000)
    for i, key in enumerate(["old", "mid"]):
        (tmp_path / f"{key}-cache").write_bytes(b"x" * 1000)  # no -atime: ranked by mtime
        os.utime(tmp_path / f"{key}-cache", ns=(i * 10**9, i * 10**9))
    cache.put("new", b"y" * 1500)
    assert entries(tmp_path) == {"mid-cache", "new-cache"}


def test_a_write_that_fits_reads_no_entry_s_last_use(tmp_path, monkeypatch):
    """Each write sized the folder and read every entry's -atime file, ~600 file reads a write
    in a test session's cache: the last uses are read only when something must go."""
    from jaxfeed.runtime import compile_cache

    reads = []
    real = compile_cache._read_atime
    monkeypatch.setattr(compile_cache, "_read_atime", lambda path: reads.append(path) or real(path))
    cache = compile_cache.CheckedCache(str(tmp_path), max_size=10_000)
    for key in ("a", "b", "c"):
        cache.put(key, b"x" * 1000)
    assert reads == [] and entries(tmp_path) == {"a-cache", "b-cache", "c-cache"}
    cache.max_size = 3500
    cache.put("d", b"x" * 1000)  # 4,000 bytes: the least recently used goes
    assert len(reads) == 3 and entries(tmp_path) == {"b-cache", "c-cache", "d-cache"}


@pytest.mark.parametrize(
    "case", ["anyone can write in it", "another user owns it", "anyone can replace it"]
)
def test_a_cache_folder_another_user_could_write_is_not_used(case, own_cache, monkeypatch):
    """D05: the cache holds code every run executes; a folder anyone can write (or replace, from
    the folder above it) or another user owns was used. Now: one warning naming the folder,
    why and what to set, and no cache."""
    own_cache.mkdir(parents=True)
    if case == "anyone can write in it":
        own_cache.chmod(0o777)
    elif case == "anyone can replace it":
        own_cache.parent.chmod(0o777)
    elif os.getuid() == 0:
        os.chown(own_cache, 4242, -1)
    else:
        uid = os.getuid()
        monkeypatch.setattr(os, "getuid", lambda: uid + 1)
    try:
        with pytest.warns(RuntimeWarning) as raised:
            assert use_compile_cache(own_cache) is None
    finally:
        own_cache.parent.chmod(0o700)
    [message] = [str(w.message) for w in raised]
    assert message.startswith(f"the compilation cache folder {own_cache} is not used: ")
    reason = {"anyone can write in it": "anyone can write in it",
              "another user owns it": "belongs to another user",
              "anyone can replace it": "a folder above it, and replace it"}[case]  # fmt: skip
    assert reason in message and "set JAXFEED_CACHE" in message and "--no-compile-cache" in message
    assert not jax.config.jax_enable_compilation_cache and "\n" not in message


def test_the_folder_of_jax_compilation_cache_dir_is_checked_too(own_cache, monkeypatch):
    own_cache.mkdir(parents=True)
    own_cache.chmod(0o777)
    monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", str(own_cache))
    jax.config.update("jax_compilation_cache_dir", str(own_cache))  # as JAX read it at start
    with pytest.warns(
        RuntimeWarning, match="anyone can write in it.*set JAX_COMPILATION_CACHE_DIR"
    ):
        assert use_compile_cache(own_cache.parent / "other") is None
    own_cache.chmod(0o700)
    sticky = own_cache.parent / "shared"  # below a folder like /tmp (anyone writes, sticky bit)
    sticky.mkdir(mode=0o1777)
    sticky.chmod(0o1777)
    jax.config.update("jax_compilation_cache_dir", None)
    monkeypatch.delenv("JAX_COMPILATION_CACHE_DIR")
    assert use_compile_cache(sticky / "xla") == sticky / "xla"


def test_the_pinned_jax_reads_its_cache_through_the_checked_cache(own_cache):
    """The check relies on JAX's private jax._src.compilation_cache: a JAX release that moves
    it fails here (JAX's own cache would then read the folder unchecked)."""
    from jax._src import compilation_cache as jcc

    from jaxfeed.runtime.compile_cache import CheckedCache

    assert use_compile_cache(own_cache) == own_cache
    compile_program(5.5)
    assert isinstance(jcc._cache, CheckedCache), f"JAX {jax.__version__} moved its cache"
