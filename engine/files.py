"""Files tokensim writes: whole or not at all, never over one of the run's own inputs.

A file is written to a temporary file beside its target and renamed into place only when the writer finishes, so
Ctrl+C, SIGTERM or a full disk half-way leaves the previous file as it was (a rename within one directory is atomic
on POSIX). A target that is one of the run's inputs (a trace, a workload, a model file) is refused before the run
starts: writing it would destroy what the run reads.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO

from engine.errors import InputError


def _same_file(a: Path, b: Path) -> bool:
    """Whether two paths name one file (resolved, and by inode where both exist: hard links, bind mounts)."""
    try:
        if a.exists() and b.exists():
            return os.path.samefile(a, b)
    except OSError:
        pass
    return a.resolve() == b.resolve()


def check_target(path: str | os.PathLike[str], flag: str, inputs: Iterable[str | os.PathLike[str] | None] = ()) -> Path:
    """The target of `flag` as a Path, refused (InputError, one line) when it is empty or a directory, its folder
    does not exist, or it is one of the run's `inputs` (or of the other outputs passed among them)."""
    if not str(path):
        raise InputError(f"{flag} needs a file name")
    p = Path(path)
    if p.is_dir():
        raise InputError(f"{flag} {path} is a directory; give a file name")
    if not p.parent.exists():
        raise InputError(f"{flag} {path}: the folder {p.parent} does not exist")
    for src in inputs:  # only those that are files: a preset name such as llama-3.1-8b is not one
        if src is not None and str(src) and Path(src).is_file() and _same_file(p, Path(src)):
            raise InputError(f"{flag} {path} is also one of this run's inputs; writing it would destroy it: "
                             "give another file name")
    return p


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike[str], flag: str,
                  inputs: Iterable[str | os.PathLike[str] | None] = ()) -> Iterator[IO[str]]:
    """A text file to write `path` through: a temporary file beside it, renamed over `path` when the block ends
    without an exception, removed otherwise (KeyboardInterrupt and SystemExit included). An OSError (no room, no
    permission) becomes one InputError line naming `flag`."""
    target = check_target(path, flag, inputs)
    if target.exists() and not target.is_file():
        yield from _straight(target, flag)
        return
    folder = target.parent if str(target.parent) else Path(".")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".part", dir=folder)
    except OSError as e:
        raise InputError(f"{flag} {path}: cannot write there ({e.strerror or e})") from None
    done = False
    try:
        os.chmod(tmp, _mode_for(target))  # mkstemp makes it 0600: a report or plot should read like any file
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
        done = True
    except OSError as e:
        raise InputError(f"{flag} {path}: could not finish writing it ({e.strerror or e}); "
                         "the previous file, if any, is unchanged") from None
    finally:
        if not done:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def _mode_for(target: Path) -> int:
    """The permissions the file gets: those of the file it replaces, else what the umask gives a new file (0644
    under the usual 022), as `open()` would have made it."""
    try:
        return target.stat().st_mode & 0o777
    except OSError:
        mask = os.umask(0)
        os.umask(mask)
        return 0o666 & ~mask


def _straight(target: Path, flag: str) -> Iterator[IO[str]]:
    """A target that is not a regular file (/dev/null, /dev/stdout, a FIFO) written in place: renaming a temporary
    file over it would replace the device or pipe itself with a file (as root, /dev/full became one)."""
    try:
        with open(target, "w", encoding="utf-8") as f:
            yield f
            f.flush()
    except OSError as e:
        raise InputError(f"{flag} {target}: could not finish writing it ({e.strerror or e})") from None


def write_text_atomic(path: str | os.PathLike[str], text: str, flag: str,
                      inputs: Iterable[str | os.PathLike[str] | None] = ()) -> None:
    """Write `text` to `path` whole or not at all (see atomic_output)."""
    with atomic_output(path, flag, inputs) as f:
        f.write(text)
