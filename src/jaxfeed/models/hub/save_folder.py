"""A checkpoint or adapter folder written whole: :func:`replace_checkpoint` is how
``save_pretrained`` and ``save_adapter`` write, so that the folder afterwards loads as exactly
what was saved, and at every moment as one whole save.

The new files are written into a new folder beside the target (a
:class:`~jaxfeed._base.files.LockedTemporary`), with the target's other files linked in (a
README, the tokenizer of an adapter folder: anything that is not a checkpoint's weights or
settings); then the two folders trade places in one atomic step
(:func:`~jaxfeed._base.files.exchange`) and the old one is removed. What an older save left
there (the shards and index of a sharded checkpoint, an adapter beside a merged model, a merged
model beside an adapter) is gone, and nothing of it mixes with the new save: a crash before the
swap leaves the previous folder as it was, one after it the new one; two processes saving into
one folder leave one's whole save, the last to swap.

Where the folders cannot trade places (a mount point, a parent folder that is not writable, a
system without Linux's ``renameat2``), or should not (a folder holding sub-folders or many other
files, such as a ``git`` clone of a Hub repository; the working folder of this process), the
files are replaced in place under an OS lock on the folder: each new file whole (written aside and renamed), then the old files removed, the index
first. A crash there may leave the new weights beside the old settings; that is the fallback
only.

>>> import tempfile
>>> folder = Path(tempfile.mkdtemp()) / "ckpt"
>>> def write(into):
...     (into / "model.safetensors").write_bytes(b"new")
...     return ["model.safetensors"]
>>> folder.mkdir(); _ = (folder / "model.safetensors.index.json").write_text("{}")
>>> _ = (folder / "README.md").write_text("mine")
>>> sorted(p.name for p in replace_checkpoint(folder, write).iterdir())
['README.md', 'model.safetensors']
"""

from __future__ import annotations

import errno
import fnmatch
import os
import shutil
import stat
from collections.abc import Callable, Iterable
from pathlib import Path

from jaxfeed._base.files import (
    WRITER_LOCK,
    FolderLock,
    LockedTemporary,
    exchange,
    fsync_folder,
    remove_abandoned,
)

# the files of a saved model or adapter, what an older save left and the next one removes: its
# weights (any *.safetensors: a lone one is read as the model), indexes and settings
STALE = ("*.safetensors", "*.safetensors.index.json", "pytorch_model*.bin",
         "pytorch_model.bin.index.json", "adapter_model.bin", "tf_model*.h5", "flax_model*.msgpack",
         "flax_model.msgpack.index.json", "adapter_config.json", "config.json")  # fmt: skip
MAX_KEPT = 64  # other files a swapped folder may hold (hard-linked into the new one)
# errors of a swap that cannot be done here (not of a save that failed): then the files in place
CANNOT_SWAP = {errno.EINVAL, errno.ENOSYS, errno.EBUSY, errno.EXDEV, errno.EPERM, errno.EACCES,
               errno.ENOTSUP, errno.EROFS}  # fmt: skip


def stale(names: Iterable[str], also: Iterable[str] = ()) -> list[str]:
    """The ``names`` a save replaces (:data:`STALE`: a model's or adapter's weights, indexes and
    settings), and those in ``also``.

    >>> stale(["model-00001-of-00002.safetensors", "README.md", "adapter_config.json"])
    ['adapter_config.json', 'model-00001-of-00002.safetensors']
    """
    also = set(also)
    return sorted(n for n in names if n in also or any(fnmatch.fnmatchcase(n, p) for p in STALE))


def replace_checkpoint(path: str | os.PathLike, write: Callable[[Path], list[str]],
                       also: Iterable[str] = ()) -> Path:  # fmt: skip
    """Make the folder ``path`` hold what ``write(folder)`` writes (it returns the names it
    wrote) in place of the model or adapter saved there before (the files :func:`stale` names,
    and ``also``), whole and at once (see the module docstring); its other files stay."""
    target = Path(os.path.realpath(path))  # a link to a folder: the folder it leads to
    if target.exists() and not target.is_dir():
        raise FileExistsError(f"{path} is a file: save into a folder (a new or existing one)")
    target.parent.mkdir(parents=True, exist_ok=True)
    remove_abandoned(target.parent, f".{target.name}.tmp-")  # left by a save that crashed
    if target.is_dir() and not _swappable(target, also):
        return _in_place(target, write, also)
    try:
        writing = LockedTemporary(target, "checkpoint being saved")
    except PermissionError:  # the parent folder is not writable: the target may still be
        return _in_place(target, write, also)
    with writing:
        write(writing.path)
        if target.is_dir():
            _keep(target, writing.path, also)
        try:
            writing.publish(move=_swap)
        except OSError as err:
            if err.errno not in CANNOT_SWAP:
                raise
            return _in_place(target, write, also)
    fsync_folder(target.parent)
    return Path(path)


def _swappable(target: Path, also: Iterable[str]) -> bool:
    """Whether ``target`` is a folder of a save to trade places with: a few files beside the
    save's own (at most :data:`MAX_KEPT`, no sub-folder: not a project or a ``git`` clone, which
    would be copied), and not the working folder of this process (or one above it), which would
    be left pointing at the old folder."""
    here = os.path.realpath(os.getcwd())
    if here == str(target) or here.startswith(str(target) + os.sep):
        return False
    names = [p.name for p in target.iterdir()]
    kept = [n for n in names if n not in set(stale(names, also))]
    if len(kept) > MAX_KEPT:
        return False
    return not any((target / n).is_dir() and not (target / n).is_symlink() for n in kept)


def _swap(staged: Path, target: Path) -> None:
    """``staged`` in place of ``target``: the two trade places (the old folder is left at
    ``staged``, which the writer removes), or a rename when there is no target yet."""
    for _ in range(3):  # another save may create or swap the target meanwhile
        try:
            exchange(staged, target)
            return
        except FileNotFoundError:
            pass
        try:
            os.rename(staged, target)
            return
        except OSError as err:
            if err.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                raise
    raise OSError(errno.EBUSY, "the folder kept changing while it was saved", str(target))


def _keep(target: Path, staged: Path, also: Iterable[str]) -> None:
    """Link (or copy) into ``staged`` the entries of ``target`` that the save keeps, and give
    ``staged`` the target's permissions."""
    names = [p.name for p in target.iterdir()]
    dropped = set(stale(names, also)) | {WRITER_LOCK}
    for name in names:
        source, copy = target / name, staged / name
        if name in dropped or os.path.lexists(copy) or _temporary(name):
            continue
        if source.is_symlink():
            os.symlink(os.readlink(source), copy)
        else:
            _link(source, copy)
    os.chmod(staged, stat.S_IMODE(os.stat(target).st_mode))


def _temporary(name: str) -> bool:
    """A file a crashed write left (``.NAME.KEY.tmp``): never carried into the new folder."""
    return name.startswith(".") and name.endswith(".tmp")


def _link(source: str | os.PathLike, copy: str | os.PathLike) -> None:
    try:
        os.link(source, copy)
    except OSError:
        shutil.copy2(source, copy)


def _in_place(target: Path, write: Callable[[Path], list[str]], also: Iterable[str]) -> Path:
    """The fallback: each new file written whole into ``target``, under an OS lock on the folder
    (two such saves never interleave), then the old files removed, indexes first."""
    target.mkdir(parents=True, exist_ok=True)
    with FolderLock(target, "checkpoint folder being saved"):
        written = set(write(target))
        old = [n for n in stale([p.name for p in target.iterdir()], also) if n not in written]
        for name in sorted(old, key=lambda n: (not n.endswith(".json"), n)):
            (target / name).unlink(missing_ok=True)
    fsync_folder(target)
    return target


__all__ = ["STALE", "replace_checkpoint", "stale"]
