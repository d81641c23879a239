"""The rules every `tpu` command follows for the files it writes.

* An output that is one of the command's inputs, or another of its
  outputs, is refused before anything is read or written. Paths are
  compared after resolving them (``./``, ``..``, symbolic links), and by
  device and inode when both files exist (hard links).
* A command writes exactly the path it is given: it never adds or changes
  an extension. (A second file a command writes beside its output, such as
  `tpu verilog`'s port map, is named in its help and checked the same way.)
* Missing parent directories are created.
* A file is written whole or not at all: into a temporary file in its
  directory, renamed over the target when complete (a device or a pipe,
  such as /dev/stdout, is written in place).
"""

import os
import tempfile
from pathlib import Path


__all__ = ["OutputRefused", "check_outputs", "write_output"]


class OutputRefused(ValueError):
    """An output path a command must not write (it names the reason)."""


def _same(a, b):
    if a.resolve() == b.resolve():
        return True
    try:
        sa, sb = os.stat(a), os.stat(b)
    except OSError:
        return False
    return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)


def check_outputs(outputs, inputs=()):
    """Refuse (`OutputRefused`) any of `outputs` that is the same file as
    one of `inputs` or as another output, or that is a directory.

    `outputs` and `inputs` are ``(what, path)`` pairs, `what` naming the
    option (``"--output"``, ``"the model"``) for the message; None paths
    are left out.
    """
    outputs = [(what, Path(path)) for what, path in outputs if path is not None]
    inputs = [(what, Path(path)) for what, path in inputs if path is not None]
    for i, (what, path) in enumerate(outputs):
        if path.is_dir():
            raise OutputRefused(f"{what} {path} is a directory, not a file to write")
        for other, source in inputs:
            if _same(path, source):
                raise OutputRefused(f"{what} {path} would overwrite the input {source} "
                                    f"({other}); choose another name")
        for other, earlier in outputs[:i]:
            if _same(path, earlier):
                raise OutputRefused(f"{what} {path} and {other} {earlier} name the same "
                                    f"file; choose different names")


def write_output(path, data):
    """Write bytes `data` (or call `data(file)` with a binary file) to
    exactly `path`, creating missing parent directories, whole or not at
    all."""
    path = Path(path)
    if path.exists() and not path.is_file():
        # A device or a pipe (/dev/stdout): written in place, never replaced.
        with open(path, "wb") as file:
            data(file) if callable(data) else file.write(data)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, scratch = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(handle, "wb") as file:
            if callable(data):
                data(file)
            else:
                file.write(data)
        try:
            os.chmod(scratch, 0o666 & ~_umask())
        except OSError:
            pass
        os.replace(scratch, path)
    except BaseException:
        Path(scratch).unlink(missing_ok=True)
        raise


def _umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask
