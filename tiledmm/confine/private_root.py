"""A private root for a confined child: a mount namespace in which only the paths its policy
grants exist (tiledmm/confine/sandbox.py's confine() enters it before Landlock).

Why: Landlock decides which files a process may open, not which it may see. stat(), access(),
readlink() and the compiler's __has_include answer for any path (whether it exists, its size
and times), and open() answers ENOENT where a file is missing but EACCES where it is refused.
In a private root a path outside the grants does not exist at all.

How: unshare(CLONE_NEWNS) where this process may (root with CAP_SYS_ADMIN), else
unshare(CLONE_NEWUSER | CLONE_NEWNS) with this uid and gid mapped to themselves (any user,
where user namespaces are allowed); every mount made private (nothing propagates back); a tmpfs
as the new root holding each granted path bind-mounted at its own path (symbolic links on the
way recreated, their targets granted too); pivot_root into it, the old root detached, the
tmpfs made read-only. The seccomp filter applied after it refuses mount, umount2, unshare and
pivot_root, so the child cannot undo it. Where neither unshare is allowed (Docker's default
profile refuses both to a container without CAP_SYS_ADMIN), enter() says why, the child goes
on without a private root, and `python -m tiledmm info` says that file metadata is exposed.

This file is loaded by path, standard library only, like sandbox.py (in a child, before
tiledmm is importable).
"""
import ctypes
import errno
import os
import stat

_CLONE_NEWNS, _CLONE_NEWUSER = 0x00020000, 0x10000000
_MS_RDONLY, _MS_NOSUID, _MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = 1, 2, 32, 4096, 16384, 1 << 18
_MNT_DETACH = 2
_SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}
# where the new root's tmpfs is mounted before pivot_root: any folder; every source is opened
# before it is covered, and the old root is detached afterwards
_MOUNT_POINTS = ("/tmp", "/mnt", "/var/tmp", "/media")

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong,
                        ctypes.c_void_p]
_libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
_libc.unshare.argtypes = [ctypes.c_int]
_libc.syscall.restype = ctypes.c_long


def _check(rc, what):
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount(source, target, fstype, flags):
    _check(_libc.mount(source and source.encode(), target.encode(), fstype and fstype.encode(),
                       flags, None), f"mount {target}")


def _write(path, text):
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _unshare():
    """Enter a new mount namespace; "" on success, else why not."""
    uid, gid = os.geteuid(), os.getegid()
    if _libc.unshare(_CLONE_NEWNS) == 0:
        return ""
    first = ctypes.get_errno()
    if _libc.unshare(_CLONE_NEWUSER | _CLONE_NEWNS) != 0:
        second = ctypes.get_errno()
        return (f"no mount namespace (unshare: {errno.errorcode.get(first, first)}; with a user "
                f"namespace: {errno.errorcode.get(second, second)})")
    try:   # this user, mapped to itself: files keep their owners as far as it can tell
        _write("/proc/self/setgroups", "deny")
        _write("/proc/self/uid_map", f"{uid} {uid} 1")
        _write("/proc/self/gid_map", f"{gid} {gid} 1")
    except OSError as exc:
        return f"no user namespace mapping ({exc})"
    return ""


def _plan(paths):
    """(binds, links): the real paths to bind (none inside another) and the symbolic links on
    the way to any granted path, as (path, target), outside every bound folder."""
    real, links = set(), {}
    for p in paths:
        p = os.path.normpath(os.path.abspath(p))
        if not os.path.lexists(p):
            continue
        cur = "/"
        for part in p.strip("/").split("/"):   # links on the way: recreated
            nxt = os.path.join(cur, part)
            if os.path.islink(nxt):
                links[nxt] = os.readlink(nxt)
            cur = os.path.realpath(nxt)
        if os.path.exists(p):
            real.add(os.path.realpath(p))
    binds = []
    for r in sorted(real):   # sorted: a folder comes before what lies inside it
        if not any(r == b or r.startswith(b.rstrip("/") + "/") for b in binds):
            binds.append(r)

    def inside_bind(p):
        return any(p.startswith(b.rstrip("/") + "/") or p == b for b in binds)
    return binds, sorted((p, t) for p, t in links.items() if not inside_bind(p))


def _bind(fd, target):
    """Bind the file or folder open as O_PATH `fd` at `target` (made on the new root's tmpfs)."""
    if stat.S_ISDIR(os.fstat(fd).st_mode):
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        if not os.path.lexists(target):
            os.close(os.open(target, os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o600))
    _mount(f"/proc/self/fd/{fd}", target, None, _MS_BIND | _MS_REC)


def enter(paths, writable, cwd, own=None):
    """Make this process's root a tmpfs holding only `paths` and `writable` (writable),
    bind-mounted at their own paths; `own`: {path: bytes}, an empty tmpfs of that size at each
    path (a /dev/shm of its own). The working folder becomes `cwd` where it is visible, else
    "/". Call before any thread exists and before Landlock.
    A path that cannot be bound is left out (not visible). Returns "" when done, else why not
    (the process keeps the root it had). Raises OSError when pivot_root fails (the caller then
    stops the child)."""
    machine = os.uname().machine
    if machine not in _SYS_PIVOT_ROOT:
        return f"no private root on {machine}"
    why = _unshare()
    if why:
        return why
    _mount(None, "/", None, _MS_REC | _MS_PRIVATE)
    binds, links = _plan(list(paths) + list(writable))
    sources, missed = [], []
    for b in binds:   # opened before the new root covers anything
        try:
            sources.append((b, os.open(b, os.O_PATH | os.O_CLOEXEC)))
        except OSError:
            missed.append(b)
    new = next((p for p in _MOUNT_POINTS if os.path.isdir(p) and not os.path.islink(p)), None)
    if new is None:
        return "no folder to mount a private root on"
    try:
        _mount("tmpfs", new, "tmpfs", _MS_NOSUID)
        for b, fd in sources:
            try:
                _bind(fd, new + b)
            except OSError:   # a path this host will not bind (a locked mount): not visible
                missed.append(b)
    finally:
        for _, fd in sources:
            os.close(fd)
    if any(os.path.realpath(w) in missed for w in writable):   # without its scratch folder it cannot work
        _libc.umount2(new.encode(), _MNT_DETACH)
        return f"cannot bind its scratch folder into a private root ({', '.join(missed)})"
    for p, size in (own or {}).items():
        os.makedirs(new + p, exist_ok=True)
        _check(_libc.mount(b"tmpfs", (new + p).encode(), b"tmpfs", _MS_NOSUID,
                           f"size={int(size)},mode=1777".encode()), f"mount {p}")
    for p, target in links:
        os.makedirs(os.path.dirname(new + p), exist_ok=True)
        if not os.path.lexists(new + p):
            os.symlink(target, new + p)
    os.chmod(new, 0o755)
    os.chdir(new)
    _check(_libc.syscall(ctypes.c_long(_SYS_PIVOT_ROOT[machine]), b".", b"."), "pivot_root")
    _check(_libc.umount2(b".", _MNT_DETACH), "umount2 of the old root")
    # the tmpfs itself read-only (the binds keep their own modes: the scratch folder writable)
    _libc.mount(None, b"/", None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | _MS_NOSUID, None)
    os.chdir(cwd if os.path.isdir(cwd) else "/")
    return ""
