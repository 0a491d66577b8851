"""A program's working folder (tm.run, issue 44): what its own folder holds, as links, and the
files it writes there, read back.

The program (tiledmm/programs/main.py) runs confined in a scratch folder of its own, never the
caller's or a grader's working folder. Before it starts, `stage` fills that folder with the
entries of the program's folder, run in the unconfined caller: a submission's own link is never
followed nor staged (a link to an instructor's file must not become readable), only regular
files and folders are. Small files other than sources are copied, so the program may
overwrite one as an nvcc build would (NVIDIA's dwtHaar1D writes result.dat, which the CLI put
beside the program after the last run); sources, larger files and folders (data/) are links,
so a large data set stays cheap, and the sandbox grants them read-only: the program reads them
and may create files beside them, never change them. After it ends, `collect` reads back what it created or changed, with
the sandbox's bounded reader (the folder's descriptor, O_NOFOLLOW, regular files only, a size
cap), and `write_back` puts them where the user asked (the CLI: beside the program, or
--outdir), never outside that folder, never over the program's own sources.
"""
import errno
import os
import stat

from ..confine import sandbox

# The most entries of a program's folder staged (each is one read grant of the sandbox)
STAGED_MOST = 200
# What comes back of a program's files: how many, each file's size, all together
FILES_MOST, FILE_BYTES_MOST, FILES_BYTES_MOST = 200, 64 << 20, 256 << 20
# How deep into the folders the program made
DEPTH_MOST = 8
# What the endings of a program's files mean. Host files: nvcc gives them to the host compiler
# (no device code). Headers: included, never compiled on their own. Included: what a build may
# read (a main.cu may #include "kernel.cu"): hashed into its cache key, never overwritten by the
# CLI's write-back, and staged as read-only links, never as copies the program may change.
HOST_ENDINGS = (".cpp", ".cc", ".cxx", ".c", ".C")
HEADER_ENDINGS = (".h", ".cuh", ".hpp", ".hh", ".inl")
INCLUDED_ENDINGS = HEADER_ENDINGS + (".cu",) + HOST_ENDINGS + (".inc", ".cuinc", ".tpp")
# The regular files of a program's folder copied rather than linked: each at most, all together
COPIED_FILE_MOST, COPIED_MOST = 1 << 20, 16 << 20


def stage(folder, work):
    """The regular files and folders of `folder` in `work` (not its links, FIFOs, sockets or
    devices): small files copied, the rest linked. Returns the linked paths (the program's read
    grants) and {name staged: the copy's bytes, or None for a link}."""
    linked, staged, copied = [], {}, 0
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError:
        return [], {}
    for entry in entries:
        if len(staged) >= STAGED_MOST:
            break
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
            continue   # a link (never followed), a FIFO, a socket, a device
        if stat.S_ISREG(st.st_mode) and not entry.name.endswith(INCLUDED_ENDINGS) and \
                st.st_size <= min(COPIED_FILE_MOST, COPIED_MOST - copied):
            try:
                data = sandbox.read_bounded(entry.name, COPIED_FILE_MOST, folder=folder,
                                            whole=True)
            except OSError:
                continue   # replaced meanwhile (a link, a larger file): not staged
            fd = os.open(os.path.join(work, entry.name), os.O_WRONLY | os.O_CREAT | os.O_EXCL |
                         os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            with open(fd, "wb") as f:
                f.write(data)
            staged[entry.name] = data
            copied += len(data)
            continue
        os.symlink(entry.path, os.path.join(work, entry.name))
        linked.append(entry.path)
        staged[entry.name] = None
    return linked, staged


def collect(work, staged):
    """({relative path: bytes} of the regular files the program made in `work` and its folders,
    and of the staged copies it changed; the tiledmm: lines for those left out). The staged
    links and any link the program made are skipped; nothing is followed or read past the
    caps."""
    files, left_out, total = {}, [], 0
    todo = [("", 0)]
    while todo:
        rel, depth = todo.pop()
        folder = os.path.join(work, rel) if rel else work
        try:
            names = sorted(os.listdir(folder))
        except OSError:
            continue
        for n in names:
            path = f"{rel}/{n}" if rel else n
            if not rel and n in staged and staged[n] is None:
                continue   # a link to the program's folder
            try:
                mode = os.lstat(os.path.join(folder, n)).st_mode
            except OSError:
                continue
            if stat.S_ISDIR(mode) and depth < DEPTH_MOST:
                todo.append((path, depth + 1))
                continue
            if not stat.S_ISREG(mode):
                continue
            if len(files) >= FILES_MOST:
                left_out.append(f"tiledmm: the program's file {path} was not returned (more "
                                f"than {FILES_MOST} files)")
                continue
            try:
                data = sandbox.read_bounded(n, min(FILE_BYTES_MOST, FILES_BYTES_MOST - total),
                                            folder=folder, whole=True)
            except OSError as exc:
                left_out.append(f"tiledmm: the program's file {path} was not returned "
                                f"({exc.strerror or exc})")
                continue
            if not rel and staged.get(n) == data:
                continue   # a staged copy the program left as it was
            files[path] = data
            total += len(data)
    return files, left_out


class UnsafeName(ValueError):
    """A returned file's name that would leave its folder."""


def _parts(name):
    parts = name.split("/")
    if not name or name.startswith("/") or os.path.isabs(name) or \
            any(p in ("", ".", "..") for p in parts) or "\\" in name or "\0" in name:
        raise UnsafeName(f"{name!r} is not a relative path inside the folder")
    return parts


def write_back(files, dest, protected=()):
    """Writes a program's files ({relative path: bytes}) into `dest`: never an absolute path or
    `..`, never through a link (O_NOFOLLOW at every step), never over a name in `protected`
    (the program's own sources). Returns (the paths written, the tiledmm: lines for those
    refused)."""
    written, refused = [], []
    for name, data in sorted(files.items()):
        try:
            parts = _parts(name)
        except UnsafeName as exc:
            refused.append(f"tiledmm: not written: {exc}")
            continue
        if name in protected:
            refused.append(f"tiledmm: not written: {name} (the program's own source)")
            continue
        try:
            _write_at(dest, parts, data)
        except OSError as exc:
            refused.append(f"tiledmm: not written: {name} ({exc.strerror or exc})")
            continue
        written.append(os.path.join(dest, *parts))
    return written, refused


def _write_at(dest, parts, data):
    """Writes data at dest/parts..., making the folders, following no link."""
    fd = os.open(dest, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for p in parts[:-1]:
            try:
                os.mkdir(p, 0o755, dir_fd=fd)
            except FileExistsError:
                pass
            nxt = os.open(p, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                          dir_fd=fd)
            os.close(fd)
            fd = nxt
        out = os.open(parts[-1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW |
                      os.O_NONBLOCK | os.O_CLOEXEC, 0o644, dir_fd=fd)
        try:
            if not stat.S_ISREG(os.fstat(out).st_mode):
                raise OSError(errno.EINVAL, "not a regular file")
            view = memoryview(data)
            while view:
                view = view[os.write(out, view):]
        finally:
            os.close(out)
    finally:
        os.close(fd)
