"""The sandbox: every process that compiles or runs student code is confined (Landlock for files
and signals, seccomp-bpf for system calls, rlimits for resources); the caller never is.

A confined child confines ITSELF, first thing, before any other thread exists (Landlock cannot
reach threads that already run; seccomp is loaded with TSYNC all the same): `run_python` and the
worker start a fresh interpreter whose first statements load this file on its own (it imports
only the standard library, so no NumPy/OpenBLAS thread exists yet), call `confine(policy)`, and
only then import tiledmm. `run` (a compiler: g++, nvcc) goes through the same interpreter, which
confines itself and then execs the program: Landlock and seccomp are inherited across exec.

What each rule is for is said beside it. The rules are facts checked on Linux 6.18 (Landlock ABI
7) in a root Docker container and as an unprivileged user:
- Landlock: read only what the run needs, write one scratch folder, TCP neither bound nor
  connected (ABI 4), signals and abstract Unix sockets only inside the sandbox (ABI 6).
- seccomp: an allow-list; the refusals worth a message are SECCOMP_RET_TRAP (the SIGSYS reaches
  tiledmm_fault.h in the worker, which names the call); the rest answer ENOSYS.
- rlimits: memory (RLIMIT_DATA: private mappings, thread stacks included, so it bounds a thread
  bomb where RLIMIT_NPROC, which root ignores, cannot), file size, CPU time, no core files;
  oom_score_adj 1000 so that a memory bomb takes the child, not the notebook or the grader.
"""
import ctypes
import dataclasses
import errno
import fcntl
import glob
import importlib.machinery
import importlib.util
import json
import os
import re
import resource
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
import warnings

PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))   # tiledmm/
PACKAGE_PARENT = os.path.dirname(PACKAGE_DIR)


def _load_by_path(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# This file is also loaded on its own, by path, in a child before it confines itself (no package
# around it: _bootstrap); the settings table (standard library only) comes in the same way.
_SETTINGS = _load_by_path("_tiledmm_settings", os.path.join(PACKAGE_DIR, "_settings.py"))
_PRIVATE_ROOT = _load_by_path("_tiledmm_private_root",
                              os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                           "private_root.py"))
GiB = 1 << 30


class SandboxWarning(UserWarning):
    """Student code runs unconfined here (Landlock or seccomp is missing); said once."""


@dataclasses.dataclass(frozen=True)
class Policy:
    """What a confined process may do.

    read:       paths (files or folders, recursively) it may read
    execute:    paths it may read and execute (the toolchain of a compile child)
    write:      folders it may write (its scratch folder)
    allow_exec: True for a compile child (the compiler starts its passes): exec and fork allowed,
                sockets, ptrace and the rest still denied. False for anything that runs student
                code: no exec, no new processes (threads allowed)
    devices:    /dev/nvidia* read, write and ioctl (the cuda backend)
    memory_bytes, file_bytes, cpu_seconds: rlimits (None: tiledmm's default)
    threads:    the most threads (RLIMIT_NPROC, where it binds; None: threads_most())
    """
    read: tuple = ()
    execute: tuple = ()
    write: tuple = ()
    allow_exec: bool = False
    devices: bool = False
    memory_bytes: int = None
    file_bytes: int = None
    cpu_seconds: int = None
    threads: int = None
    exec_program: bool = False   # set by run(): the one execve of argv[0] (see run)

    def to_json(self):
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text):
        d = json.loads(text)
        for k in ("read", "execute", "write"):
            d[k] = tuple(d[k])
        return cls(**d)


@dataclasses.dataclass
class Completed:
    """A confined child that ended: returncode negative for a signal (as subprocess reports
    it), -9 after a timeout; stdout/stderr are None where they were not captured."""
    returncode: int
    stdout: bytes
    stderr: bytes
    timed_out: bool
    confined: bool


# ---------------------------------------------------------------------------------------------
# the environment

_ENV_KEEP = ("PATH", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "LC_MESSAGES", "TZ", "CUDA_HOME",
             "CUDA_PATH", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "CUDA_MODULE_LOADING",
             "CUDA_CACHE_DISABLE", "NVIDIA_VISIBLE_DEVICES", "CXX", "OMP_NUM_THREADS",
             "OMP_STACKSIZE", "OMP_PROC_BIND", "OMP_PLACES", "OPENBLAS_NUM_THREADS",
             "MKL_NUM_THREADS", "LD_LIBRARY_PATH", "LD_PRELOAD", "ASAN_OPTIONS",
             "UBSAN_OPTIONS", "LSAN_OPTIONS", "TSAN_OPTIONS")


def minimal_env(extra=None):
    """The allow-listed environment every confined child gets: never the caller's whole one (a
    notebook's tokens and keys stay in the notebook). Kept: PATH, the locale, the CUDA and
    OpenMP settings, the dynamic loader's paths and preloads (the CUDA libraries, a sanitizer's
    runtime), $CXX, and the TILEDMM_* settings marked for children (tiledmm/_settings.py)."""
    env = {k: v for k, v in os.environ.items() if k in _ENV_KEEP}
    env.update(_SETTINGS.inherited())
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env.update(extra or {})
    return env


# ---------------------------------------------------------------------------------------------
# policies

# The packages a confined child imports besides tiledmm and the standard library (the worker:
# NumPy; the compile child: libclang). Where one is found on $PYTHONPATH (pip install --target;
# a child's isolated mode ignores $PYTHONPATH) only its own folder is granted, never the whole
# entry (an instructor's folder on $PYTHONPATH holds hidden tests).
CHILD_PACKAGES = ("numpy", "clang")


_PACKAGES_FOUND = {}


def _import_packages():
    """{name: (origin, [package folder] or None)} of CHILD_PACKAGES found on $PYTHONPATH (the
    caller resolves them, as the child's import would), other than in tiledmm's own folder."""
    key = (os.environ.get("PYTHONPATH", ""), CHILD_PACKAGES)
    if key not in _PACKAGES_FOUND:   # once per $PYTHONPATH: every child's start asks
        _PACKAGES_FOUND[key] = _find_packages(*key)
    return dict(_PACKAGES_FOUND[key])


def _find_packages(pythonpath, names):
    parent = os.path.realpath(PACKAGE_PARENT)
    entries = [p for p in pythonpath.split(os.pathsep)
               if p and os.path.isabs(p) and os.path.isdir(p) and os.path.realpath(p) != parent]
    found = {}
    for name in names:
        try:
            spec = importlib.machinery.PathFinder.find_spec(name, entries) if entries else None
        except (ImportError, ValueError, OSError):
            continue
        if spec is None or not spec.origin or not os.path.isabs(spec.origin):
            continue
        locations = list(spec.submodule_search_locations or []) or None
        found[name] = (spec.origin, locations)
    return found


def _import_dirs():
    """What a child may read of the packages _import_packages found: each package's folder (or
    module file) and its wheel's `<name>.libs` folder beside it (shared libraries)."""
    out = []
    for name, (origin, locations) in _import_packages().items():
        for p in locations or [origin]:
            out.append(p)
            libs = os.path.join(os.path.dirname(p), f"{name}.libs")
            if os.path.isdir(libs):
                out.append(libs)
    return tuple(out)


def _python_paths():
    """What an interpreter needs to read: its prefixes (the standard library, the venv and its
    site-packages: NumPy, libclang) and tiledmm's package folder, never the folder above it (a
    source checkout: tests, notes, an instructor's files)."""
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, PACKAGE_DIR,
             *_import_dirs()}
    for p in sys.path:   # site-packages outside the prefixes (pip install --user, a .pth)
        if p and os.path.isdir(p) and "site-packages" in p:
            paths.add(p)
    # what the dynamic loader is told to load from ($LD_LIBRARY_PATH, $LD_PRELOAD)
    for p in os.environ.get("LD_LIBRARY_PATH", "").split(":"):
        if p and os.path.isabs(p):
            paths.add(p)
    for p in os.environ.get("LD_PRELOAD", "").replace(" ", ":").split(":"):
        if p and os.path.isabs(p):
            paths.add(p)
    return tuple(sorted(paths))


# What the CUDA driver reads besides its device files.
_DEVICE_READ = ("/proc/driver/nvidia", "/sys", "/proc/sys/vm", "/proc/devices", "/proc/modules",
                "/etc/nvidia")
# A child with the GPU gets a /dev/shm of its own in its private root (an empty tmpfs of this
# size, writable): the driver may keep its files there, and no other process's shared memory
# is in sight. Without a private root /dev/shm is not granted at all.
GPU_SHM_BYTES = 64 << 20

# Read by every child: the shared libraries and the toolchain (/usr, /lib*), the loader's cache,
# the time zone. /etc as a whole is not granted (/etc/shadow, an instructor's config); nor /tmp,
# /home, /root, /work or the caller's working folder.
_SYSTEM_READ = ("/usr", "/lib", "/lib64", "/lib32", "/libx32", "/bin", "/sbin", "/opt",
                "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime",
                "/etc/alternatives", "/dev/null", "/dev/zero", "/dev/urandom", "/dev/random",
                "/proc/meminfo", "/proc/cpuinfo", "/proc/stat", "/sys/fs/cgroup",
                "/sys/devices/system/cpu", "/sys/devices/system/node")


def compile_policy(scratch, read=(), *, memory_bytes=4 * GiB, cpu_seconds=600):
    """A compile child: the toolchain and system headers, tiledmm's headers (tiledmm/native, in
    the package folder that _python_paths grants), `read` (the student's sources) readable; `scratch` writable (TMPDIR points there); exec allowed."""
    return Policy(read=tuple(read) + _python_paths(),
                  execute=_SYSTEM_READ[:8] + _python_paths(), write=(scratch,), allow_exec=True,
                  memory_bytes=memory_bytes, cpu_seconds=cpu_seconds)


def run_policy(scratch, read=(), devices=False, *, memory_bytes=None, threads=None):
    """A child that runs student code: what it loads readable, `scratch` writable, no exec."""
    return Policy(read=tuple(read) + _python_paths(), write=(scratch,),
                  devices=devices,
                  memory_bytes=memory_bytes, threads=threads)


def _default_memory():
    """RLIMIT_DATA when the policy names none: half the machine's memory, at least 2 GiB (the
    arguments' shared file is the caller's and is not counted). $TILEDMM_SANDBOX_MEMORY (bytes)
    overrides it."""
    given = _SETTINGS.get("TILEDMM_SANDBOX_MEMORY", "")
    if given.isdigit():
        return int(given)
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        total = 8 * GiB
    return max(2 * GiB, total // 2)


def _gpu_memory():
    """RLIMIT_DATA of a child with the GPU (a cuda program, the cuda worker): the CUDA driver's
    own private mappings count too. $TILEDMM_SANDBOX_GPU_MEMORY (bytes; 0: no limit), else as
    for any child (_default_memory). The driver's reservations of address space are PROT_NONE
    and device memory is a shared mapping of /dev/nvidia*, neither counted;
    tests/test_sandbox_round2.py's gpu case measures what a program uses."""
    given = _SETTINGS.get("TILEDMM_SANDBOX_GPU_MEMORY", "")
    if given.isdigit():
        return int(given) or None
    return _default_memory()


# ---------------------------------------------------------------------------------------------
# Landlock (linux/landlock.h)

_SYS_LANDLOCK_CREATE_RULESET, _SYS_LANDLOCK_ADD_RULE, _SYS_LANDLOCK_RESTRICT_SELF = 444, 445, 446
_LANDLOCK_CREATE_RULESET_VERSION = 1
_LANDLOCK_RULE_PATH_BENEATH = 1
_FS = {name: 1 << i for i, name in enumerate((
    "EXECUTE", "WRITE_FILE", "READ_FILE", "READ_DIR", "REMOVE_DIR", "REMOVE_FILE", "MAKE_CHAR",
    "MAKE_DIR", "MAKE_REG", "MAKE_SOCK", "MAKE_FIFO", "MAKE_BLOCK", "MAKE_SYM", "REFER",
    "TRUNCATE", "IOCTL_DEV"))}
_FILE_ONLY = _FS["EXECUTE"] | _FS["WRITE_FILE"] | _FS["READ_FILE"] | _FS["TRUNCATE"] | \
    _FS["IOCTL_DEV"]     # the rights a rule on a file (not a folder) may carry
_NET_BIND_TCP, _NET_CONNECT_TCP = 1, 2
_SCOPE_ABSTRACT_UNIX_SOCKET, _SCOPE_SIGNAL = 1, 2
_PR_SET_NO_NEW_PRIVS = 38
_O_PATH = getattr(os, "O_PATH", 0o10000000)


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def _landlock_abi():
    """(ABI version or None, why not). EPERM (an older Docker seccomp profile), ENOSYS (no
    Landlock in the kernel) and EOPNOTSUPP (disabled at boot) all mean unavailable."""
    if not sys.platform.startswith("linux") or os.uname().machine not in ("x86_64", "aarch64"):
        return None, f"Landlock needs Linux on x86-64 or aarch64 (this is {sys.platform})"
    abi = _libc.syscall(ctypes.c_long(_SYS_LANDLOCK_CREATE_RULESET), None, ctypes.c_size_t(0),
                        ctypes.c_uint32(_LANDLOCK_CREATE_RULESET_VERSION))
    if abi < 0:
        err = ctypes.get_errno()
        return None, f"Landlock is unavailable ({errno.errorcode.get(err, err)}: " \
                     f"{os.strerror(err)})"
    return int(abi), ""


def _landlock(policy, abi, own_shm=False):
    """Restrict this process (and what it execs) to the policy's paths. own_shm: /dev/shm is
    this process's own tmpfs (a child with the GPU in a private root): writable."""
    handled = 0
    for name, bit in _FS.items():   # the rights this ABI knows, all handled: denied by default
        if name == "REFER" and abi < 2 or name == "TRUNCATE" and abi < 3 or \
                name == "IOCTL_DEV" and abi < 5:
            continue
        handled |= bit
    attr = _RulesetAttr(handled_access_fs=handled)
    size = 8
    if abi >= 4:   # no TCP: neither bind nor connect (seccomp refuses the sockets too)
        attr.handled_access_net, size = _NET_BIND_TCP | _NET_CONNECT_TCP, 16
    if abi >= 6:   # signals only to processes of this sandbox; no abstract sockets outside it
        attr.scoped, size = _SCOPE_ABSTRACT_UNIX_SOCKET | _SCOPE_SIGNAL, 24
    fd = _libc.syscall(ctypes.c_long(_SYS_LANDLOCK_CREATE_RULESET), ctypes.byref(attr),
                       ctypes.c_size_t(size), ctypes.c_uint32(0))
    if fd < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset")
    read = _FS["READ_FILE"] | _FS["READ_DIR"]
    # writing the scratch folder: every right but making device nodes (root could mknod a disk)
    write = handled & ~(_FS["MAKE_CHAR"] | _FS["MAKE_BLOCK"] | _FS["EXECUTE"])
    rules = [(p, read) for p in policy.read + _SYSTEM_READ]
    rules += [(p, read | _FS["EXECUTE"]) for p in policy.execute]
    rules += [(p, write) for p in policy.write]
    # its own /proc/<pid>, never /proc as a whole (root would read /proc/<parent>/environ);
    # write and truncate where the CUDA driver needs them (devices), else read only (it could
    # otherwise lower its own oom_score_adj again)
    proc_access = read | ((_FS["WRITE_FILE"] | (handled & _FS["TRUNCATE"])) if policy.devices
                          else 0)
    rules.append((f"/proc/{os.getpid()}", proc_access))
    if policy.devices:   # the GPU: its device files with ioctl, and what the driver reads
        dev = _FS["READ_FILE"] | _FS["WRITE_FILE"] | (handled & _FS["IOCTL_DEV"])
        rules += [(os.path.join("/dev", n), dev) for n in sorted(os.listdir("/dev"))
                  if n.startswith("nvidia")]
        rules += [(p, read) for p in _DEVICE_READ]
        if own_shm:
            rules.append(("/dev/shm", write))
    try:
        for path, access in rules:
            _landlock_rule(fd, path, access & handled)
        if _libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
        if _libc.syscall(ctypes.c_long(_SYS_LANDLOCK_RESTRICT_SELF), ctypes.c_int(fd),
                         ctypes.c_uint32(0)) != 0:
            raise OSError(ctypes.get_errno(), "landlock_restrict_self")
    finally:
        os.close(fd)


def _visible(policy):
    """Every path a child of `policy` may see in its private root: what Landlock grants it."""
    paths = [*policy.read, *policy.execute, *_SYSTEM_READ, "/proc"]
    if policy.devices:
        paths += [os.path.join("/dev", n) for n in os.listdir("/dev") if n.startswith("nvidia")]
        paths += _DEVICE_READ
    return paths


def _landlock_rule(ruleset, path, access):
    try:
        fd = os.open(path, _O_PATH | os.O_CLOEXEC)
    except OSError:
        return   # not on this system: nothing to grant
    try:
        if not os.path.isdir(path):
            access &= _FILE_ONLY
        attr = _PathBeneath(allowed_access=access, parent_fd=fd)
        if _libc.syscall(ctypes.c_long(_SYS_LANDLOCK_ADD_RULE), ctypes.c_int(ruleset),
                         ctypes.c_int(_LANDLOCK_RULE_PATH_BENEATH), ctypes.byref(attr),
                         ctypes.c_uint32(0)) != 0:
            raise OSError(ctypes.get_errno(), f"landlock_add_rule {path}")
    finally:
        os.close(fd)


# ---------------------------------------------------------------------------------------------
# seccomp-bpf through libseccomp.so.2 (a small ctypes layer: the pyseccomp package declares
# Python <= 3.8 and costs 20-38 ms to import)

_ACT_ALLOW, _ACT_TRAP = 0x7fff0000, 0x00030000
_ACT_ERRNO = lambda e: 0x00050000 | (e & 0xffff)   # noqa: E731
_FLTATR_CTL_TSYNC = 4
_CMP_NE, _CMP_EQ, _CMP_MASKED_EQ = 1, 4, 7
_CLONE_THREAD = 0x00010000
_MAP_TYPE, _MAP_PRIVATE, _MAP_ANONYMOUS = 0x0f, 0x02, 0x20
_AF_UNIX = 1


class _ArgCmp(ctypes.Structure):
    _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int), ("datum_a", ctypes.c_uint64),
                ("datum_b", ctypes.c_uint64)]


_seccomp_lib = None


def _libseccomp():
    """libseccomp.so.2, or None."""
    global _seccomp_lib
    if _seccomp_lib is None:
        for name in ("libseccomp.so.2", "libseccomp.so"):
            try:
                lib = ctypes.CDLL(name, use_errno=True)
                break
            except OSError:
                continue
        else:
            _seccomp_lib = False
            return None
        lib.seccomp_init.restype = ctypes.c_void_p
        lib.seccomp_init.argtypes = [ctypes.c_uint32]
        lib.seccomp_rule_add_array.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int,
                                               ctypes.c_uint, ctypes.POINTER(_ArgCmp)]
        lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
        lib.seccomp_syscall_resolve_num_arch.restype = ctypes.c_void_p
        lib.seccomp_syscall_resolve_num_arch.argtypes = [ctypes.c_uint32, ctypes.c_int]
        lib.seccomp_attr_set.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32]
        lib.seccomp_load.argtypes = [ctypes.c_void_p]
        lib.seccomp_release.argtypes = [ctypes.c_void_p]
        lib.seccomp_export_bpf.argtypes = [ctypes.c_void_p, ctypes.c_int]
        _seccomp_lib = lib
    return _seccomp_lib or None


# Allowed as they are: what the worker used serving emu kernels (plain, check and profile mode,
# a fault) by `strace -f`, Python's start-up and imports, libgomp, g++'s passes, and the CUDA
# driver's reported needs. Files are Landlock's to judge, so the file calls are all here.
_ALLOW = """
read write readv writev pread64 pwrite64 preadv pwritev preadv2 pwritev2 close close_range
open openat openat2 creat lseek stat fstat lstat newfstatat statx fstatfs statfs access
faccessat faccessat2 readlink readlinkat getdents getdents64 getcwd chdir fchdir flock
fsync fdatasync ftruncate truncate dup dup2 dup3 pipe pipe2 poll ppoll select pselect6
epoll_create epoll_create1 epoll_ctl epoll_wait epoll_pwait epoll_pwait2 eventfd eventfd2
timerfd_create timerfd_settime timerfd_gettime signalfd signalfd4 rename renameat renameat2
unlink unlinkat mkdir mkdirat rmdir link linkat symlink symlinkat umask fallocate sendfile
copy_file_range splice tee fadvise64 readahead getxattr lgetxattr fgetxattr listxattr llistxattr
flistxattr munmap mprotect mremap madvise mlock munlock mlock2 mincore msync brk
rt_sigaction rt_sigprocmask rt_sigreturn rt_sigsuspend rt_sigpending rt_sigtimedwait sigaltstack
futex futex_waitv get_robust_list set_robust_list set_tid_address rseq restart_syscall
nanosleep clock_nanosleep clock_gettime clock_getres gettimeofday time times getrusage sysinfo
uname getpid getppid gettid getuid geteuid getgid getegid getresuid getresgid getgroups getpgid
getpgrp getsid setsid setpgid getcpu getpriority sched_yield sched_getaffinity
sched_setaffinity sched_getparam sched_getscheduler sched_get_priority_max
sched_get_priority_min getrandom membarrier arch_prctl prctl exit exit_group capget
socketpair sendto recvfrom sendmsg recvmsg sendmmsg recvmmsg shutdown bind listen accept accept4
getsockname getpeername getsockopt setsockopt mbind get_mempolicy set_mempolicy
inotify_init inotify_init1 inotify_add_watch inotify_rm_watch
""".split()
# Signals: Landlock's signal scope (ABI 6) keeps them inside the sandbox; without it, only to
# this process's own pid (seccomp cannot express "outside the process group").
_SIGNALS = ("kill", "tkill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo")
# A compile child runs the compiler's passes.
_ALLOW_EXEC = ("execve", "execveat", "fork", "vfork", "wait4", "waitid", "clone")
# Refused with SIGSYS (RET_TRAP), each with what it would have done, in words: the one list of
# them. The worker's fault report (tiledmm_fault.h) gives the call's number and the caller names
# it from here (describe_refused_call). clone, socket and ioctl are trapped for some arguments
# only (rules below); the rest always.
REFUSED_CALLS = {
    "execve": "start a program", "execveat": "start a program", "fork": "start a process",
    "vfork": "start a process", "clone": "start a process", "ptrace": "trace another process",
    "process_vm_readv": "read another process's memory",
    "process_vm_writev": "write another process's memory", "socket": "open a network socket",
    "connect": "connect to a socket", "io_uring_setup": "use io_uring",
    "io_uring_enter": "use io_uring", "io_uring_register": "use io_uring",
    "mount": "mount a file system", "umount2": "unmount a file system",
    "unshare": "leave its namespaces", "setns": "enter another namespace",
    "pidfd_getfd": "take another process's file", "pidfd_open": "take hold of another process",
    "open_by_handle_at": "open a file by its handle", "bpf": "load a BPF program",
    "userfaultfd": "handle its own page faults", "perf_event_open": "read performance counters",
    "ioctl": "type into a terminal (TIOCSTI)",
}
_TRAP = tuple(name for name in REFUSED_CALLS if name not in ("clone", "socket", "ioctl"))
# Harmless TTY ioctls (isatty's TCGETS, the window size, FIONREAD, FIONBIO, FIOCLEX): every other
# ioctl in the terminal range 0x54xx is refused (TIOCSTI types into the terminal, TIOCLINUX too)
_TTY_IOCTLS = (0x5401, 0x5413, 0x541B, 0x5421, 0x5450, 0x5451)
_TIOCSTI = 0x5412
# Calls that would make the kernel signal another process for this one's files (SIGIO, or any
# signal by F_SETSIG, sent to the owner it names: the caller, on a kernel without Landlock's
# signal scope): fcntl F_SETOWN, F_SETSIG, F_SETOWN_EX and the ioctls FIOSETOWN, SIOCSPGRP,
# refused (EPERM). The rest of fcntl is allowed.
_F_SETOWN, _F_SETSIG, _F_SETOWN_EX = 8, 10, 15
_FIOSETOWN, _SIOCSPGRP = 0x8901, 0x8902


def _cover(bits, refused):
    """[(mask, value)]: prefix patterns over the low `bits` bits whose union is every value but
    those in `refused` (a set of (first, last) ranges): "not one of these" as the masked
    comparisons seccomp can make, one allow rule each (none overlaps a refusal)."""
    out = []

    def walk(value, length):
        lo, hi = value, value + (1 << (bits - length)) - 1
        hit = [(a, b) for a, b in refused if a <= hi and b >= lo]
        if not hit:
            out.append((((1 << bits) - 1) ^ ((1 << (bits - length)) - 1), value))
        elif not any(a <= lo and b >= hi for a, b in hit) and length < bits:
            walk(value, length + 1)
            walk(value | (1 << (bits - length - 1)), length + 1)
    walk(0, 0)
    return out


def _seccomp(policy, lib, scoped_signals, export=False):
    """Load the allow-list for every thread of this process (TSYNC); with `export`, return the
    BPF program instead (the caller builds it once per kind of policy and the child loads it
    with one system call: libseccomp's compiler costs milliseconds, the load microseconds)."""
    # the rest: "no such call" (TILEDMM_SANDBOX_TRAP_ALL=1: SIGSYS, naming it, to find a call
    # that a new driver or library needs)
    default = _ACT_TRAP if _SETTINGS.get("TILEDMM_SANDBOX_TRAP_ALL") == "1" else \
        _ACT_ERRNO(errno.ENOSYS)
    ctx = lib.seccomp_init(default)
    if not ctx:
        raise OSError(errno.ENOMEM, "seccomp_init")

    def nr(name):
        return lib.seccomp_syscall_resolve_name(name.encode())

    def rule(action, name, *cmps):
        n = nr(name)
        if n < 0 or action == default:
            return   # not a call of this architecture (open, stat... on aarch64); the default
        arr = (_ArgCmp * len(cmps))(*[_ArgCmp(*c) for c in cmps]) if cmps else None
        rc = lib.seccomp_rule_add_array(ctx, action, n, len(cmps), arr)
        if rc < 0:
            raise OSError(-rc, f"seccomp_rule_add {name}")

    try:
        allowed = set(_ALLOW)
        if policy.allow_exec:
            allowed.update(_ALLOW_EXEC)
        elif policy.exec_program:   # run() execs the program: Landlock lets only it be executed
            allowed.update(("execve", "execveat"))
        if policy.devices:   # the CUDA driver makes its own shared memory
            allowed.update(("memfd_create", "mmap"))
        for name in sorted(allowed):
            rule(_ACT_ALLOW, name)
        for name in _TRAP:
            if name in allowed:
                continue
            if name == "connect" and policy.devices:
                # The CUDA driver tries a UNIX socket at start (the persistence daemon's, MPS's;
                # seen on the H200) and goes on without it: it gets a plain refusal, not a trap.
                # Sockets themselves stay AF_UNIX-only, so no network either way.
                rule(_ACT_ERRNO(errno.EACCES), name)
            else:
                rule(_ACT_TRAP, name)
        # clone3 answers ENOSYS so that glibc falls back to clone, whose flags seccomp can see
        # (on EPERM Python could not start a thread, and libgomp would exit the process)
        rule(_ACT_ERRNO(errno.ENOSYS), "clone3")
        if not policy.allow_exec:   # threads yes, processes no
            rule(_ACT_ALLOW, "clone", (0, _CMP_MASKED_EQ, _CLONE_THREAD, _CLONE_THREAD))
            rule(_ACT_TRAP, "clone", (0, _CMP_MASKED_EQ, _CLONE_THREAD, 0))
        if not policy.devices:
            # mappings: of files, or private anonymous memory (counted by RLIMIT_DATA); a
            # shared anonymous mapping of its own would escape the limit
            rule(_ACT_ALLOW, "mmap", (3, _CMP_MASKED_EQ, _MAP_ANONYMOUS, 0))
            rule(_ACT_ALLOW, "mmap", (3, _CMP_MASKED_EQ, _MAP_ANONYMOUS | _MAP_TYPE,
                                      _MAP_ANONYMOUS | _MAP_PRIVATE))
            rule(_ACT_ERRNO(errno.EPERM), "memfd_create")
        # sockets: AF_UNIX only (the CUDA driver makes and binds one); no network
        rule(_ACT_ALLOW, "socket", (0, _CMP_EQ, _AF_UNIX, 0))
        rule(_ACT_TRAP, "socket", (0, _CMP_NE, _AF_UNIX, 0))
        # ioctl: everything whose bits 8-15 (the type) are not the terminal's 0x54, whatever
        # bits 16-31 (direction and size: TCSETS2 is 0x402C542B) hold, but FIOSETOWN and
        # SIOCSPGRP; the harmless terminal queries; TIOCSTI refused with a message
        for mask, value in _cover(16, {(0x5400, 0x54ff), (_FIOSETOWN, _SIOCSPGRP)}):
            rule(_ACT_ALLOW, "ioctl", (1, _CMP_MASKED_EQ, mask, value))
        for cmd in (_FIOSETOWN, _SIOCSPGRP):
            rule(_ACT_ERRNO(errno.EPERM), "ioctl", (1, _CMP_MASKED_EQ, 0xffff, cmd))
        # fcntl: all but naming a process to signal (the command read as 32 bits)
        for mask, value in _cover(32, {(c, c) for c in (_F_SETOWN, _F_SETSIG, _F_SETOWN_EX)}):
            rule(_ACT_ALLOW, "fcntl", (1, _CMP_MASKED_EQ, mask, value))
        for cmd in (_F_SETOWN, _F_SETSIG, _F_SETOWN_EX):
            rule(_ACT_ERRNO(errno.EPERM), "fcntl", (1, _CMP_MASKED_EQ, 0xffffffff, cmd))
        for cmd in _TTY_IOCTLS:
            rule(_ACT_ALLOW, "ioctl", (1, _CMP_MASKED_EQ, 0xffffffff, cmd))
        rule(_ACT_TRAP, "ioctl", (1, _CMP_MASKED_EQ, 0xffffffff, _TIOCSTI))
        # its own rlimits may be read and lowered (a sanitizer's runtime sets RLIMIT_CORE);
        # never raised past the hard limits, which _limits set and CAP_SYS_RESOURCE, dropped
        # there, alone could pass; never another process's
        rule(_ACT_ALLOW, "prlimit64", (0, _CMP_EQ, 0, 0))
        rule(_ACT_ALLOW, "getrlimit")
        rule(_ACT_ALLOW, "setrlimit")
        for name in _SIGNALS:
            if scoped_signals:
                rule(_ACT_ALLOW, name)
            elif name != "tkill":
                rule(_ACT_ALLOW, name, (0, _CMP_EQ, os.getpid(), 0))
        if export:
            r, w = os.pipe()
            try:
                rc = lib.seccomp_export_bpf(ctx, w)
                os.close(w)
                w = -1
                if rc < 0:
                    raise OSError(-rc, "seccomp_export_bpf")
                chunks = []
                while True:
                    chunk = os.read(r, 65536)
                    if not chunk:
                        break
                    chunks.append(chunk)
                return b"".join(chunks)
            finally:
                os.close(r)
                if w >= 0:
                    os.close(w)
        rc = lib.seccomp_attr_set(ctx, _FLTATR_CTL_TSYNC, 1)
        if rc < 0:
            raise OSError(-rc, "seccomp TSYNC")
        rc = lib.seccomp_load(ctx)
        if rc < 0:
            raise OSError(-rc, "seccomp_load")
    finally:
        lib.seccomp_release(ctx)


def describe_refused_call(number):
    """The words for a call the sandbox trapped, from its number on this machine (the worker's
    fault report gives the number: tiledmm_fault.h): 'start a program (execve, system call
    59)'."""
    lib = _libseccomp()
    name = None
    if lib is not None:
        found = lib.seccomp_syscall_resolve_num_arch(0, number)   # 0: SCMP_ARCH_NATIVE
        if found:
            name = ctypes.string_at(found).decode()
            ctypes.CDLL(None).free(ctypes.c_void_p(found))
    what = REFUSED_CALLS.get(name, "do what student code may not do")
    return f"{what} ({name or 'a system call'}, system call {number})"


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


_SYS_SECCOMP = {"x86_64": 317, "aarch64": 277}
_SECCOMP_SET_MODE_FILTER, _SECCOMP_FILTER_FLAG_TSYNC = 1, 1
_BPF_CACHE = {}


def _precompiled(policy):
    """The policy's BPF program, built here (once per kind of policy) for a child to load; None
    where it depends on the child's pid (no Landlock signal scope) or libseccomp is missing."""
    abi, _ = _landlock_abi()
    lib = _libseccomp()
    if abi is None or abi < 6 or lib is None or os.uname().machine not in _SYS_SECCOMP:
        return None
    kind = (policy.allow_exec, policy.exec_program, policy.devices,
            _SETTINGS.get("TILEDMM_SANDBOX_TRAP_ALL") == "1")
    if kind not in _BPF_CACHE:
        try:
            _BPF_CACHE[kind] = _seccomp(policy, lib, True, export=True)
        except OSError:
            _BPF_CACHE[kind] = None
    return _BPF_CACHE[kind]


def _load_bpf(program):
    """seccomp(SECCOMP_SET_MODE_FILTER, TSYNC, program): what seccomp_load does, without
    libseccomp (no_new_privs is already set by the Landlock step)."""
    if _libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
    buf = ctypes.create_string_buffer(program, len(program))
    prog = _SockFprog(len(program) // 8, ctypes.addressof(buf))
    rc = _libc.syscall(ctypes.c_long(_SYS_SECCOMP[os.uname().machine]),
                       ctypes.c_uint(_SECCOMP_SET_MODE_FILTER),
                       ctypes.c_uint(_SECCOMP_FILTER_FLAG_TSYNC), ctypes.byref(prog))
    if rc != 0:
        err = ctypes.get_errno() if rc < 0 else errno.EBUSY   # > 0: a thread that cannot sync
        raise OSError(err, "seccomp(SECCOMP_SET_MODE_FILTER)")


# ---------------------------------------------------------------------------------------------
# resources

def _limits(policy):
    # no core files: a crash must not write the process's memory (the arguments) anywhere
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    memory = policy.memory_bytes or _default_memory()
    # a sanitizer's runtime preloaded (tests/test_asan.py) reserves terabytes of shadow memory
    # as private writable mappings
    sanitized = any(t in os.path.basename(p) for p in
                    os.environ.get("LD_PRELOAD", "").replace(" ", ":").split(":")
                    for t in ("libasan", "libtsan", "libmsan", "libhwasan"))
    if policy.devices and not policy.memory_bytes:
        memory = _gpu_memory()
    if memory and not sanitized:
        resource.setrlimit(resource.RLIMIT_DATA, (memory, memory))
    size = policy.file_bytes or 2 * GiB
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))
    if policy.cpu_seconds:
        resource.setrlimit(resource.RLIMIT_CPU, (int(policy.cpu_seconds),
                                                 int(policy.cpu_seconds) + 5))
    try:   # a memory bomb takes this process, not the notebook or the grader
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write("1000")
    except OSError:
        pass
    drop = (_CAP_SYS_RESOURCE,)
    if not policy.allow_exec and _bind_threads(policy.threads or threads_most()):
        drop += (_CAP_SYS_ADMIN,)
    _drop_sys_resource(drop)


# Root's children: RLIMIT_NPROC binds a real uid other than 0 without CAP_SYS_ADMIN and
# CAP_SYS_RESOURCE. Each confined child takes the real uid NPROC_UID_BASE + its pid (its own:
# the limit counts every task of that uid on the host), keeps effective and saved uid 0 (file
# access stays root's: the interpreter under a 0700 /root still loads, Landlock still
# confines), and cannot take real uid 0 back (seccomp allows no setuid call).
NPROC_UID_BASE = 0x7f000000


# The most blocks a cooperative launch holds on the emulator: every block resident at once, at
# most 32 per SM (emu_internal.h kMaxBlocksPerSM) on the emulated device with the most SMs (132:
# program_runtime.h's presets); scheduler.cpp runs each on an OS thread of its own, so that a
# block waiting in grid.sync() keeps its own static __shared__ variables (thread_local there)
COOPERATIVE_BLOCKS_MOST = 132 * 32


def threads_most(program=False):
    """The most tasks (threads) a confined child that runs student code may have: 8 a core, at
    least 128; a whole program on the emulator (`program`) also a thread for each block of the
    largest cooperative launch. Memory bounds a thread bomb too: each thread's stack counts
    toward RLIMIT_DATA."""
    return max(128, 8 * (os.cpu_count() or 1)) + (COOPERATIVE_BLOCKS_MOST if program else 0)


def _bind_threads(n):
    """Where this process is root: RLIMIT_NPROC of `n` and the real uid change that makes it
    bind. True when the limit binds (the caller then drops CAP_SYS_ADMIN)."""
    if os.getuid() != 0 or os.geteuid() != 0:
        # not root: RLIMIT_NPROC would count every process of the user (a desktop session),
        # and RLIMIT_DATA already bounds the threads (their stacks)
        return False
    try:
        resource.setrlimit(resource.RLIMIT_NPROC, (n, n))
        os.setresuid(NPROC_UID_BASE + os.getpid(), 0, 0)
    except (ValueError, OSError):   # a user namespace without that uid mapped: no bound
        return False
    return True


_CAP_SYS_ADMIN, _CAP_SYS_RESOURCE = 21, 24
_SYS_CAPGET = {"x86_64": 125, "aarch64": 90}
_SYS_CAPSET = {"x86_64": 126, "aarch64": 91}


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32)]


def _drop_sys_resource(caps=(_CAP_SYS_RESOURCE,)):
    """Drop CAP_SYS_RESOURCE (root has it): without it the hard rlimits and oom_score_adj set
    here cannot be undone, and with no_new_privs an exec does not give it back. `caps`: the
    capabilities dropped (CAP_SYS_ADMIN too where RLIMIT_NPROC is to bind)."""
    machine = os.uname().machine
    if machine not in _SYS_CAPGET:
        return
    hdr = _CapHeader(0x20080522, 0)   # _LINUX_CAPABILITY_VERSION_3
    data = (_CapData * 2)()
    if _libc.syscall(ctypes.c_long(_SYS_CAPGET[machine]), ctypes.byref(hdr), data) != 0:
        return
    bit = 0xffffffff
    for cap in caps:
        bit &= ~(1 << cap)
    for field in ("effective", "permitted", "inheritable"):
        setattr(data[0], field, getattr(data[0], field) & bit)
    _libc.prctl(47, 4, 0, 0, 0)   # PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL
    for cap in caps:
        _libc.prctl(24, cap, 0, 0, 0)   # PR_CAPBSET_DROP (needs CAP_SETPCAP)
    if _libc.syscall(ctypes.c_long(_SYS_CAPSET[machine]), ctypes.byref(hdr), data) != 0:
        raise OSError(ctypes.get_errno(), "capset (dropping CAP_SYS_RESOURCE)")


# ---------------------------------------------------------------------------------------------
# what is in force

_STATUS = None


def status():
    """What confinement is available here: {"landlock": ABI or None, "seccomp": bool,
    "confined": both, "reason": text for what is missing, "private_root": bool (paths outside
    the grants hidden), "metadata": why file metadata is exposed, or ""}. Tried for real once per process in
    a throw-away child (qemu-user answers PR_SET_SECCOMP with EINVAL only when a filter loads)."""
    global _STATUS
    if _STATUS is None:
        if _SETTINGS.get("TILEDMM_SANDBOX") == "off":
            _STATUS = {"landlock": None, "seccomp": False, "confined": False,
                       "reason": "switched off by TILEDMM_SANDBOX=off", "private_root": False,
                       "metadata": "no sandbox"}
            return dict(_STATUS)
        code = (f"import importlib.util as u, json, sys; s = u.spec_from_file_location("
                f"'_tiledmm_sandbox_probe', {os.path.abspath(__file__)!r}); m = "
                "u.module_from_spec(s); s.loader.exec_module(m); print(json.dumps(m._probe()))")
        try:
            out = subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True,
                                 timeout=60, env=minimal_env(), stdin=subprocess.DEVNULL)
            _STATUS = json.loads(out.stdout.decode().strip().splitlines()[-1])
        except (OSError, subprocess.TimeoutExpired, ValueError, IndexError) as exc:
            _STATUS = {"landlock": None, "seccomp": False, "confined": False,
                       "reason": f"the confinement probe failed ({exc})",
                       "private_root": False, "metadata": "no sandbox"}
    return dict(_STATUS)


def _private_root_off():
    """Why the private root is switched off by its setting (a host where it misbehaves; the
    tests of the fallback), else ""."""
    return ("switched off by TILEDMM_SANDBOX_PRIVATE_ROOT=off"
            if _SETTINGS.get("TILEDMM_SANDBOX_PRIVATE_ROOT") == "off" else "")


def _private_root_probe():
    """"" where a child can enter a private root (tried in a forked child: its root is
    replaced), else why not."""
    if _private_root_off():
        return _private_root_off()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            why = _PRIVATE_ROOT.enter(("/usr",), (), "/usr")
        except OSError as exc:
            why = f"pivot_root failed ({exc})"
        os.write(w, why.encode()[:4000])
        os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        why = f.read().decode(errors="replace")
    os.waitpid(pid, 0)
    return why


def _probe():
    abi, why = _landlock_abi()
    reasons = [why] if why else []
    if abi is not None:
        try:
            _landlock(Policy(), abi)
        except OSError as exc:
            abi, _ = None, reasons.append(f"Landlock is unavailable ({exc})")
    seccomp = False
    lib = _libseccomp()
    if lib is None:
        reasons.append("libseccomp.so.2 is not installed (apt-get install libseccomp2)")
    else:
        try:
            _seccomp(Policy(allow_exec=True), lib, abi is not None and abi >= 6)
            seccomp = True
        except OSError as exc:
            reasons.append(f"seccomp is unavailable ({exc})")
    hidden = _private_root_probe()
    return {"landlock": abi, "seccomp": seccomp, "confined": bool(abi and seccomp),
            "reason": "; ".join(reasons), "private_root": not hidden, "metadata": hidden}


def describe():
    """One line: what confinement is in force for student code (python -m tiledmm info)."""
    s = status()
    if s["confined"]:
        scope = "files, TCP and signals" if s["landlock"] >= 6 else "files"
        seen = ("a private root: paths outside the grants do not exist" if s["private_root"]
                else f"file metadata (stat, __has_include) exposed: {s['metadata']}")
        return (f"sandbox: confined (Landlock ABI {s['landlock']}: {scope}; seccomp-bpf "
                "allow-list: no exec, no processes, no sockets but AF_UNIX, no ptrace; rlimits; "
                f"{seen})")
    have = [w for w, ok in (("Landlock", s["landlock"]), ("seccomp", s["seccomp"])) if ok]
    return (f"sandbox: NOT confined{' (only ' + ', '.join(have) + ')' if have else ''}: "
            f"{s['reason']}. Student code runs with this account's rights.")


_WARNED = False


def available():
    """Whether this system has what confinement needs (Landlock answers, libseccomp loads):
    checked in this process, without the child status() starts (worker start-up stays fast).
    status() also finds the rarer case of a seccomp that refuses to load (qemu-user)."""
    if _SETTINGS.get("TILEDMM_SANDBOX") == "off":
        return False
    if _STATUS is not None:
        return _STATUS["confined"]
    return _landlock_abi()[0] is not None and _libseccomp() is not None


def warn_if_unconfined(what="student code"):
    """A SandboxWarning, once per process, where confinement is missing (tm.compile, tm.run go
    on; `grade` refuses unless told --allow-unconfined)."""
    global _WARNED
    ok = available()
    if not ok and not _WARNED:
        _WARNED = True
        warnings.warn(f"tiledmm: {what} runs unconfined here: {status()['reason']}",
                      SandboxWarning, stacklevel=3)
    return ok


def confine(policy, bpf=None):
    """Confine the calling process for the rest of its life. Call it before any thread exists.
    Returns True when confined (Landlock and seccomp both), False when this system cannot
    (status() says why; what it can is applied all the same), or with TILEDMM_SANDBOX=off.
    `bpf`: the policy's seccomp program, built by the caller (_precompiled). Raises OSError
    when a step that this system supports fails."""
    if _SETTINGS.get("TILEDMM_SANDBOX") == "off":
        return False
    # first, while root may still mount: a root that holds only what the policy grants
    private = not _private_root_off() and not _PRIVATE_ROOT.enter(
        _visible(policy), policy.write, os.getcwd(),
        {"/dev/shm": GPU_SHM_BYTES} if policy.devices else {})
    _limits(policy)
    abi, _ = _landlock_abi()
    lib = None if bpf else _libseccomp()
    if abi is not None:   # first: the seccomp filter does not let landlock_* through
        _landlock(policy, abi, own_shm=private and policy.devices)
    filtered = False
    if bpf or lib is not None:
        try:
            if bpf:
                _load_bpf(bpf)
            else:
                _seccomp(policy, lib, abi is not None and abi >= 6)
            filtered = True
        except OSError as exc:
            if exc.errno != errno.EINVAL:   # EINVAL: qemu-user does not emulate PR_SET_SECCOMP
                raise
    return abi is not None and filtered


# ---------------------------------------------------------------------------------------------
# starting confined children

def _bootstrap(policy, then, required):
    """The `python -c` text of a child that loads this file on its own, confines itself by
    `policy` (exiting with code 120 where `required` and confinement fails), then does `then`."""
    bpf = _precompiled(policy) if required else None
    return (
        "import importlib.util as _u, sys, os\n"
        # the packages found on the caller's $PYTHONPATH, loaded from their own folders only
        f"_P = {_import_packages()!r}\n"
        "class _F:\n"
        "    find_spec = staticmethod(lambda n, p=None, t=None: n in _P and "
        "_u.spec_from_file_location(n, _P[n][0], submodule_search_locations=_P[n][1]) or None)\n"
        "sys.meta_path.append(_F)\n"
        f"_s = _u.spec_from_file_location('_tiledmm_sandbox_boot', {os.path.abspath(__file__)!r})\n"
        "_m = _u.module_from_spec(_s); _s.loader.exec_module(_m)\n"
        f"_ok = _m._confine_or_exit({policy.to_json()!r}, {bool(required)!r}, {bpf!r})\n"
        f"{then}\n")


def _confine_or_exit(policy_json, required, bpf=None):
    """confine(); where the caller found the sandbox available (`required`), a step that fails
    ends this process (exit code 120) rather than let it run unconfined."""
    try:
        return confine(Policy.from_json(policy_json), bpf)
    except OSError as exc:
        if required:
            os.write(2, f"tiledmm sandbox: cannot confine this process ({exc}); stopped\n"
                     .encode())
            os._exit(120)
        return False


def _load_package():
    """Import tiledmm from its own folder without listing the folder above it (Landlock lets
    the child read tiledmm/, not the checkout around it)."""
    if "tiledmm" in sys.modules:
        return sys.modules["tiledmm"]
    spec = importlib.util.spec_from_file_location(
        "tiledmm", os.path.join(PACKAGE_DIR, "__init__.py"),
        submodule_search_locations=[PACKAGE_DIR])
    mod = importlib.util.module_from_spec(spec)
    sys.modules["tiledmm"] = mod
    spec.loader.exec_module(mod)
    return mod


def python_argv(module, policy, *, call="main(sys.argv[1:])", die_with_parent=False):
    """argv of a fresh interpreter that confines itself by `policy`, imports tiledmm.<module>
    and exits with `<module>.<call>`'s value (isolated mode: no PYTHON* variables, no user
    site, no .pyc written). die_with_parent: SIGKILL when the thread that started it ends
    (PR_SET_PDEATHSIG: start it from a thread that lives as long as the caller)."""
    then = (f"_m._load_package(); import importlib; _t = importlib.import_module("
            f"'tiledmm.' + {module!r}); sys.exit(_t.{call})")
    text = _bootstrap(policy, then, available())
    if die_with_parent:
        text = _DIE_WITH_PARENT % os.getpid() + text
    return [sys.executable, "-I", "-B", "-u", "-c", text]


# PR_SET_PDEATHSIG(SIGKILL), then a check that the parent did not end before it was set
_DIE_WITH_PARENT = ("import ctypes as _c, os as _o\n"
                    "_c.CDLL(None).prctl(1, 9, 0, 0, 0)\n"
                    "_o.getppid() == %d or _o._exit(0)\n")


def _exec_argv(argv, policy):
    then = f"os.execvp({argv[0]!r}, {list(argv)!r})"
    return [sys.executable, "-I", "-S", "-B", "-c", _bootstrap(policy, then, available())]


def run(argv, policy, *, cwd, stdin=b"", timeout=None, env=None, capture=True):
    """Run `argv` confined by `policy`, in a session of its own; its whole process group is
    ended before this returns. stdin: bytes fed to it (b"" an empty stdin), or None to inherit
    the caller's (with capture=False: a terminal program). timeout: seconds, None for no limit;
    on timeout the group gets SIGKILL and returncode is -9. TMPDIR is the first folder of
    `policy.write` (g++ writes its temporary files there, not in /tmp)."""
    env = minimal_env() if env is None else dict(env)
    if policy.write:
        env["TMPDIR"] = policy.write[0]
    if policy.allow_exec:   # a compiler: not the caller's preloads (a sanitizer's runtime would
        env.pop("LD_PRELOAD", None)   # look for its children's /proc/<pid>, which it may not)
    else:
        # a program that runs student code (a whole program): execve is let through seccomp for
        # the exec that starts it, and Landlock lets nothing be executed but it and the ELF
        # loader: it cannot start /bin/sh or anything else (and fork stays refused)
        program = shutil.which(argv[0], path=env.get("PATH")) or argv[0]
        _make_executable(program, policy.write)
        policy = dataclasses.replace(policy, exec_program=True, execute=policy.execute + (
            os.path.realpath(program), *elf_loaders()))
    return _run(_exec_argv(argv, policy), cwd=cwd, stdin=stdin, timeout=timeout, env=env,
                capture=capture)


def _make_executable(program, folders):
    """A program the compile child built in a scratch folder is not executable: the sandbox
    refuses chmod (Landlock does not cover it, and root could chmod any file it names). The
    caller sets the owner's execute bit, on the file itself, never through a link."""
    path = os.path.realpath(os.path.dirname(os.path.abspath(program)))
    if not any(path == os.path.realpath(f) or path.startswith(os.path.realpath(f) + os.sep)
               for f in folders):
        return
    try:
        fd = os.open(program, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return
    try:
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode):
            os.fchmod(fd, stat.S_IMODE(st.st_mode) | stat.S_IXUSR)
    finally:
        os.close(fd)


def elf_loaders():
    """The dynamic loaders (ld-linux...): what Landlock must let execute for any ELF program."""
    found = set()
    for pattern in ("/lib64/ld-linux*.so*", "/lib/ld-linux*.so*", "/lib/*-linux-gnu/ld-linux*.so*",
                    "/usr/lib/*-linux-gnu/ld-linux*.so*", "/lib/ld-musl-*.so*"):
        found.update(os.path.realpath(p) for p in glob.glob(pattern))
    return tuple(sorted(found))


def run_python(module, args, policy, *, cwd, stdin=b"", timeout=None, env=None, capture=True,
               pass_fds=()):
    """A fresh interpreter that confines itself by `policy` first, then calls
    `tiledmm.<module>.main(list(args))`; `main`'s return value is the exit code. pass_fds: open
    file descriptors the child inherits (memory the caller made and sealed: the child may not
    make shared memory of its own)."""
    env = minimal_env() if env is None else dict(env)
    if policy.write:
        env["TMPDIR"] = policy.write[0]
    return _run([*python_argv(module, policy), *args], cwd=cwd, stdin=stdin, timeout=timeout,
                env=env, capture=capture, pass_fds=pass_fds)


class UnsafeFile(OSError):
    """A file a child could have touched is not a regular file of bounded size in its folder."""


def read_bounded(path, limit, *, folder=None, whole=False):
    """The first `limit` bytes of `path`, a file a child or a submission could have written or
    replaced: opened relative to its folder's descriptor without following a link
    (O_NOFOLLOW: the name must be one component of `folder`) and without blocking (a FIFO, a
    terminal), then checked to be a regular file. whole=True: a file larger than `limit` is an
    UnsafeFile rather than cut. Never hangs, never reads without bound."""
    if folder is None:
        folder, name = os.path.split(os.path.abspath(path))
    else:
        name = path
    if not name or "/" in name or name in (".", ".."):
        raise UnsafeFile(errno.EINVAL, "not a file name in its folder", path)
    dfd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY
                     | os.O_CLOEXEC, dir_fd=dfd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafeFile(errno.ELOOP, "a symbolic link, not followed",
                             os.path.join(folder, name)) from None
        raise
    finally:
        os.close(dfd)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafeFile(errno.EINVAL, "not a regular file", os.path.join(folder, name))
        if whole and st.st_size > limit:
            raise UnsafeFile(errno.EFBIG, f"larger than {limit} bytes", os.path.join(folder, name))
        chunks, left = [], limit
        while left > 0:
            b = os.read(fd, min(left, 1 << 20))
            if not b:
                break
            chunks.append(b)
            left -= len(b)
        if whole and os.read(fd, 1):   # grown while read
            raise UnsafeFile(errno.EFBIG, f"larger than {limit} bytes", os.path.join(folder, name))
        return b"".join(chunks)
    finally:
        os.close(fd)


def _start_time(pid):
    """A process's start time (clock ticks since boot, /proc/PID/stat field 22), or None when
    there is no such process: with the pid, it names one process for the life of the system."""
    try:
        with open(f"/proc/{int(pid)}/stat", "rb") as f:
            text = f.read(4096)
        return int(text[text.rindex(b")") + 2:].split()[19])
    except (OSError, ValueError, IndexError):
        return None


_swept = set()


def sweep_scratch(folder=None):
    """Remove the scratch folders (tiledmm-KIND-PID.START-*) in `folder` ($TMPDIR) whose owner is
    gone: a caller that died (SIGBUS, SIGKILL) leaves its worker's folder behind. Only folders
    this user owns; a live owner's folder is never touched."""
    folder = folder or tempfile.gettempdir()
    pattern = re.compile(r"tiledmm-[a-z-]+?-(\d+)\.(\d+)-")
    try:
        names = os.listdir(folder)
    except OSError:
        return
    for name in names:
        m = pattern.match(name)
        if not m:
            continue
        path = os.path.join(folder, name)
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
            continue
        if _start_time(m.group(1)) != int(m.group(2)):
            shutil.rmtree(path, ignore_errors=True)


def scratch_folder(kind):
    """A new private scratch folder named with its owner's pid and start time (so that a later
    caller can tell whether the owner is gone); the first in a process sweeps $TMPDIR first."""
    folder = tempfile.gettempdir()
    if folder not in _swept:
        _swept.add(folder)
        sweep_scratch(folder)
    return tempfile.mkdtemp(prefix=f"tiledmm-{kind}-{os.getpid()}.{_start_time(os.getpid())}-")


class scratch:
    """`with scratch(kind) as path:` a scratch_folder, removed at the end."""

    def __init__(self, kind):
        self.kind = kind

    def __enter__(self):
        self.path = scratch_folder(self.kind)
        return self.path

    def __exit__(self, *exc):
        shutil.rmtree(self.path, ignore_errors=True)


def sealed_memory(name, size):
    """A memfd of `size` bytes that can be neither grown nor shrunk (sealed), for a confined
    child's shared memory: the child may map it, never make more (the caller owns the bound)."""
    fd = os.memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        os.ftruncate(fd, size)
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS,
                    fcntl.F_SEAL_GROW | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_SEAL)
    except BaseException:
        os.close(fd)
        raise
    return fd


def run_unconfined(argv, *, cwd, stdin=b"", timeout=None, env=None, capture=True):
    """`argv` NOT confined, for NVIDIA's tools that cannot work in the sandbox (compute-sanitizer
    starts and instruments its target: under seccomp and Landlock it cannot launch it, as the
    H200 showed). Still in a session of its own, with the allow-listed environment, its whole
    process group ended before this returns. Only tm.run(check=True) and profile runs on cuda
    use it; the grader never does."""
    return _run(argv, cwd=cwd, stdin=stdin, timeout=timeout,
                env=minimal_env() if env is None else dict(env), capture=capture)


def _run(argv, *, cwd, stdin, timeout, env, capture, pass_fds=()):
    pipe = subprocess.PIPE if capture else None
    proc = subprocess.Popen(argv, cwd=cwd, env=env, start_new_session=True,
                            stdin=None if stdin is None else subprocess.PIPE,
                            stdout=pipe, stderr=pipe, pass_fds=tuple(pass_fds))
    timed_out = False
    outputs = [_BoundedReader(p, OUTPUT_MOST) for p in (proc.stdout, proc.stderr) if p]
    readers = outputs + ([_Feeder(proc.stdin, stdin)] if stdin is not None else [])
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        kill_group(proc.pid)
        proc.wait()
    except BaseException:
        kill_group(proc.pid)
        proc.wait()
        raise
    kill_group(proc.pid)   # whatever it left behind, before anyone reads its results
    for r in readers:
        r.join(10)
    out, err = (outputs[0].text(), outputs[1].text()) if capture else (None, None)
    return Completed(-9 if timed_out else proc.returncode, out, err, timed_out, available())


# The most of a child's stdout and of its stderr kept (the rest is read and dropped): a child
# that prints without end costs the caller no more memory than this.
OUTPUT_MOST = 8 << 20


class _BoundedReader:
    """Reads a child's pipe to its end on a thread of its own, keeping the first `most` bytes."""

    def __init__(self, pipe, most):
        self.pipe, self.most, self.kept, self.dropped = pipe, most, [], 0
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        n, fd = 0, self.pipe.fileno()
        try:
            while True:
                b = os.read(fd, 1 << 16)
                if not b:
                    break
                take = b[:max(0, self.most - n)]
                if take:
                    self.kept.append(take)
                    n += len(take)
                self.dropped += len(b) - len(take)
        except OSError:
            pass

    def join(self, timeout):
        self.thread.join(timeout)
        try:
            self.pipe.close()
        except OSError:
            pass

    def text(self):
        data = b"".join(self.kept)
        if self.dropped or self.thread.is_alive():
            data += (f"\n[tiledmm: output cut at {self.most} bytes]\n").encode()
        return data


class _Feeder:
    """Writes `data` into a child's stdin on a thread of its own, then closes it."""

    def __init__(self, pipe, data):
        self.pipe, self.data = pipe, data
        self.thread = threading.Thread(target=self._write, daemon=True)
        self.thread.start()

    def _write(self):
        try:
            if self.data:
                self.pipe.write(self.data)
        except (OSError, ValueError):
            pass
        finally:
            try:
                self.pipe.close()
            except OSError:
                pass

    def join(self, timeout):
        self.thread.join(timeout)


def kill_group(pid):
    """SIGKILL the process group `pid` leads (a confined child's session)."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass
    time.sleep(0)
