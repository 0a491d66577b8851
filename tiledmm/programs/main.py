"""The runner of a built program (tm.run): loads the program's shared object and calls its
`main(argc, argv)`, in a process that is the program's own.

tiledmm/programs/run.py starts it through tiledmm.confine.sandbox.run_python with a run policy (no exec,
scratch writable), so the program needs nothing once running but what is loaded here. stdin,
stdout and stderr are the program's; `exit()` ends this process with the program's code, and a
return from `main` does the same (through the program's tm_prog_exit on emu: device printf not
yet shown appears, stdio is flushed). The report file (launches, faults: JSON lines) is opened
here and handed to the program's runtime.

usage: program_main SO REPORT BACKEND PROGRAM_NAME [-- ARGS...]
"""
import ctypes
import os
import signal


def main(args):
    so, report, backend, name, *rest = args
    argv = [name, *(rest[1:] if rest[:1] == ["--"] else rest)]
    # A program on a terminal stops at Ctrl-C and at a closed pipe, as a C program does.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    fd = os.open(report, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
    lib = ctypes.CDLL(os.path.abspath(so), mode=os.RTLD_NOW | os.RTLD_LOCAL)
    lib.tm_prog_setup.argtypes = [ctypes.c_int]
    lib.tm_prog_setup(fd)
    if hasattr(lib, "tm_prog_check_setup"):   # built for check mode: its reports at exit
        lib.tm_prog_check_setup()
    c_argv = (ctypes.c_char_p * (len(argv) + 1))(*[os.fsencode(a) for a in argv], None)
    entry = lib.main
    entry.restype = ctypes.c_int
    entry.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
    code = entry(len(argv), c_argv)
    lib.tm_prog_exit.argtypes = [ctypes.c_int]
    lib.tm_prog_exit(code)   # exit(code): never returns
    return code
