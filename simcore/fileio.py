"""Files in and out: input read with a bound and a clear error, output written whole.

Input (:func:`read_input_bytes`, :func:`read_input_text`): every file a user names is
read through here, so every reader fails the same way on the same problems — missing,
a directory, a device or pipe (``/dev/zero`` never ends), larger than the bound the caller
gives (what a file can make distsim allocate), not UTF-8, a name the OS refuses (longer
than 255 bytes) — as a :class:`~simcore.errors.DistsimError` naming the file.

Output (:func:`atomic_write_bytes`, :func:`atomic_write_text`) appears whole or not at
all: written to a temporary sibling, then renamed over the target — only a new path or a
regular file (never a device, link or directory), with the mode a plain ``open()`` gives.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from distsim_gpu.simcore.errors import ConfigError, DistsimError, ParseError

__all__ = [
    "MAX_INPUT_BYTES",
    "atomic_write_bytes",
    "atomic_write_text",
    "file_in_the_way",
    "read_input_bytes",
    "read_input_text",
]

# Configuration files and logs are kilobytes to megabytes; a quarter GiB is far beyond
# any meant one and still fits in memory on a laptop.
MAX_INPUT_BYTES = 256 * 2**20


def read_input_bytes(path: str | os.PathLike[str], what: str, *,
                     limit_bytes: int = MAX_INPUT_BYTES,
                     error: type[DistsimError] = ConfigError,
                     hint: str | None = None) -> bytes:
    """The bytes of the regular file ``path`` (a ``what`` file: "cluster", "nccl-tests
    log"), at most ``limit_bytes``; ``error`` (naming the file) when it cannot be read,
    is not a regular file, or is larger; ``hint`` says what to give instead when it does
    not exist."""
    name = os.fspath(path)
    try:
        _check_regular(os.stat(name).st_mode, name, what, error)  # before open: a FIFO blocks
        with open(name, "rb") as handle:
            _check_regular(os.fstat(handle.fileno()).st_mode, name, what, error)
            data = handle.read(limit_bytes + 1)
    except FileNotFoundError:
        raise error(f"no {what} file here: the path does not exist", source=name,
                    hint=hint) from None
    except IsADirectoryError:
        raise error(f"expected a {what} file, found a directory", source=name) from None
    except OSError as problem:
        raise error(f"cannot read {what} file: {problem.strerror or problem}",
                    source=_short(name)) from None
    if len(data) > limit_bytes:
        raise error(f"{what} file is larger than {limit_bytes // 2**20} MiB, more than "
                    "distsim reads", source=name, hint="is this the right file?")
    return data


def read_input_text(path: str | os.PathLike[str], what: str, *,
                    limit_bytes: int = MAX_INPUT_BYTES,
                    error: type[DistsimError] = ConfigError) -> str:
    """The UTF-8 text of ``path`` (a byte-order mark is dropped) as
    :func:`read_input_bytes` reads it; :class:`ParseError` with the line of the first
    byte that is not UTF-8."""
    data = read_input_bytes(path, what, limit_bytes=limit_bytes, error=error)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as problem:
        line = data.count(b"\n", 0, problem.start) + 1
        raise ParseError(f"{what} file is not UTF-8 text (byte {data[problem.start]:#04x})",
                         source=os.fspath(path), line=line,
                         hint="save it as UTF-8") from None


def _check_regular(mode: int, name: str, what: str, error: type[DistsimError]) -> None:
    if stat.S_ISDIR(mode):
        raise error(f"expected a {what} file, found a directory", source=name)
    if not stat.S_ISREG(mode):
        raise error(f"expected a {what} file, found a device, pipe or socket",
                    source=name, hint="save the data to a file first")


def _short(name: str) -> str:
    """A path as messages print it: a name the OS found too long is cut in the middle."""
    return name if len(name) <= 120 else f"{name[:60]}...{name[-40:]}"


def _check_output(target: Path, name: str) -> int | None:
    """The mode an existing regular ``target`` has (None: it does not exist yet); a
    :class:`ConfigError` naming it when it is anything else: a rename over a device
    (``-o /dev/null`` run as root) would replace the device with a file, over a symbolic
    link the link with a file, over a directory nothing sensible."""
    try:
        mode = os.lstat(name).st_mode
    except FileNotFoundError:
        return None
    except OSError as problem:
        raise _write_error(problem, target, name) from None
    if stat.S_ISREG(mode):
        return stat.S_IMODE(mode)
    kind = ("a directory" if stat.S_ISDIR(mode) else "a symbolic link"
            if stat.S_ISLNK(mode) else "a device, pipe or socket")
    raise ConfigError(f"cannot write output file: the path is {kind}, not a regular file",
                      source=_short(name),
                      hint="give the name of a new file or of a regular file to replace")


def _write_error(problem: OSError, target: Path, name: str) -> ConfigError:
    """Why ``target`` cannot be written; a file where a folder of its path should be is
    named (the OS says only "Not a directory", or "File exists" from mkdir)."""
    blocker = file_in_the_way(target.parent)
    why = (f"{blocker} is a file, not a directory" if blocker is not None
           else problem.strerror or problem)
    return ConfigError(f"cannot write output file: {why}", source=_short(name))


def _default_mode() -> int:
    """What ``open()`` would give a new file under the process's umask (0644 under 022)."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (rename over it once fully written), with the
    mode a plain ``open()`` would give it (an existing file keeps its own); only a new path
    or a regular file is written (:func:`_check_output`)."""
    name = os.fspath(path)
    target = Path(name)
    mode = _check_output(target, name)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name[:64]}.", dir=target.parent)
    except OSError as problem:
        raise _write_error(problem, target, name) from None
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fchmod(handle.fileno(), _default_mode() if mode is None else mode)
            os.fsync(handle.fileno())
        os.replace(tmp_name, target)
    except OSError as problem:
        Path(tmp_name).unlink(missing_ok=True)
        raise ConfigError(f"cannot write output file: {problem.strerror or problem}",
                          source=_short(name)) from None
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    atomic_write_bytes(path, text.encode("utf-8"))


def file_in_the_way(directory: Path) -> Path | None:
    """The first of ``directory`` and its parents that exists and is not a directory (what
    made creating ``directory`` fail with "File exists" or "Not a directory"), or None."""
    for path in (directory, *directory.parents):
        if path.exists():
            return None if path.is_dir() else path
    return None
