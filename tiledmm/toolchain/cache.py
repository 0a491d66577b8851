"""The disk cache of compiled user kernels: it loads only what tiledmm itself wrote.

- The folder is private: owned by the user, not a symbolic link, and not writable by group or
  others. A folder that fails this ($TILEDMM_CACHE_DIR, ~/.cache/tiledmm, or the per-user folder
  in the temporary directory that another user could have created first) is refused with a
  warning and a private one is used instead.
- Entries are written atomically (a temporary file in the folder, then a rename), each with a
  SHA-256 digest beside it (`<entry>.sha256`). An entry is used only when the digest of its bytes
  matches; a truncated or corrupted entry is deleted and rebuilt, never loaded.
- Clearing the cache removes entries only; a compile in progress in another process keeps what
  it needs (copies of the runtime objects in its own build folder), and a compiled kernel is
  loaded from its bytes, read and verified once, not from the entry's path.
"""
import glob
import hashlib
import os
import stat
import tempfile
import threading
import warnings

from .. import _settings

_LOCK = threading.Lock()
_STATS = {"compiled": 0, "disk_hits": 0, "memory_hits": 0}
_private_fallback = None        # a per-process folder made by mkdtemp, when nothing else is safe
_warned = set()


class UnsafeCacheFolder(OSError):
    """A cache folder that another user could write into."""


def _check_private(path):
    """Raise UnsafeCacheFolder unless `path` is a real folder owned by us, writable by no one else."""
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise UnsafeCacheFolder(f"{path} is not a folder (a symbolic link or a file)")
    # the effective uid: files are made with it, and a confined child running as root keeps it
    # while its real uid is one of its own (sandbox: RLIMIT_NPROC that binds root)
    if st.st_uid != os.geteuid():
        raise UnsafeCacheFolder(f"{path} belongs to another user (uid {st.st_uid})")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise UnsafeCacheFolder(f"{path} is writable by group or others "
                                f"(mode {stat.S_IMODE(st.st_mode):o})")


def _make_private(path):
    os.makedirs(path, mode=0o700, exist_ok=True)
    _check_private(path)
    if not os.access(path, os.W_OK | os.X_OK):
        raise OSError(f"{path} is not writable")
    return path


def cache_dir():
    """Where compiled kernels are kept: $TILEDMM_CACHE_DIR, else ~/.cache/tiledmm (or
    $XDG_CACHE_HOME/tiledmm); a folder that is not private to the user is refused (with a
    warning) for a per-user folder in the temporary directory, else a new private one."""
    global _private_fallback
    path = _settings.get("TILEDMM_CACHE_DIR")
    if not path:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        path = os.path.join(base, "tiledmm")
    candidates = [path, os.path.join(tempfile.gettempdir(), f"tiledmm-cache-{os.geteuid()}")]
    for candidate in candidates:
        try:
            return _make_private(candidate)
        except UnsafeCacheFolder as exc:
            _warn_once(candidate, f"tiledmm: not using the kernel cache folder {exc}: another "
                                  "user could plant code there. Using a private folder instead.")
        except OSError:
            continue   # not writable (no home, read-only file system): try the next
    with _LOCK:
        if _private_fallback is None or not os.path.isdir(_private_fallback):
            _private_fallback = tempfile.mkdtemp(prefix="tiledmm-cache-")
        return _private_fallback


def _warn_once(key, message):
    if key not in _warned:
        _warned.add(key)
        warnings.warn(message, RuntimeWarning, stacklevel=4)


def count(what):
    """Add one to a statistic ('compiled', 'disk_hits', 'memory_hits')."""
    with _LOCK:
        _STATS[what] += 1


def cache_info():
    """Counts since import: kernels compiled, loaded from the disk cache, found in memory."""
    with _LOCK:
        return dict(_STATS)


def key(*parts):
    """A short hex key naming an entry: the SHA-256 of the parts' reprs."""
    h = hashlib.sha256()
    for p in parts:
        h.update(repr(p).encode())
        h.update(b"\0")
    return h.hexdigest()[:24]


def entry_path(name):
    """The path of entry `name` in the cache folder (names start with 'user-')."""
    return os.path.join(cache_dir(), name)


def _write_atomic(path, data):
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def store_bytes(data, path):
    """Write `data` to entry `path` atomically, with its digest beside it. Returns the digest."""
    digest = hashlib.sha256(data).hexdigest()
    _write_atomic(path, data)
    _write_atomic(path + ".sha256", digest.encode())
    return digest


def read_verified(path):
    """The bytes of entry `path` when it is ours and intact (a regular file owned by us, not
    writable by others, whose bytes match the digest stored beside it), else None, having
    deleted what was there so that it is rebuilt."""
    try:
        for p in (path, path + ".sha256"):
            st = os.lstat(p)
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or \
                    st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
                raise ValueError(p)
        with open(path + ".sha256") as f:
            stored = f.read().strip()
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return None
    except (OSError, ValueError, UnicodeDecodeError):
        data, stored = None, ""
    if data is not None and hashlib.sha256(data).hexdigest() == stored:
        return data
    remove_entry(path)
    return None


def remove_entry(path):
    for p in (path, path + ".sha256"):
        try:
            os.remove(p)
        except OSError:
            pass


def clear_disk():
    """Delete every entry from the cache folder (a compile in progress keeps working)."""
    for path in glob.glob(os.path.join(cache_dir(), "user-*")):
        try:
            os.remove(path)
        except OSError:
            pass
