"""The exceptions tiledmm raises about code a user wrote: CompileError (the compiler rejected it),
CompileWarning (a compiler's warning, at the user's line) and KernelError (a launch failed, with
its `.kind`). Their own module at the bottom floor, since the toolchain raises them, the
confined worker's client reports them and the public API exports them."""


class CompileError(ValueError):
    """The compiler rejected the kernel source. `.log` holds its diagnostics; line numbers are
    those of the source passed to `tm.compile` (file name 'kernel.cu')."""

    def __init__(self, message, log=""):
        super().__init__(message)
        self.log = log


class KernelError(RuntimeError):
    """A launch of a user kernel failed: the emulator's report (barrier, check mode's
    out-of-bounds access or shared-memory race), a fault of the kernel (an access outside an
    argument's buffer, abort, a timeout), or the CUDA runtime's error.

    `.kind` says which, as one of these strings (also the class's constants), set where the
    error is raised; decide on it, never on the message's words.

    - KernelError.TIMEOUT "timeout": the launch ran past its `timeout=` and the worker was
      stopped;
    - KernelError.SIGNAL "signal": a signal ended the worker (SIGSEGV, SIGBUS, SIGFPE, SIGILL,
      SIGABRT, ...; the fault report says where);
    - KernelError.SANDBOX "sandbox": the sandbox refused a system call (seccomp's SIGSYS);
    - KernelError.CUDA_ERROR "cuda_error": the CUDA runtime, or the emulator standing in for
      it, failed the launch (an illegal address on cuda; on emu a barrier not every thread
      reaches, check mode's out-of-bounds access or race, an invalid launch configuration);
    - KernelError.WORKER "worker": the worker ended without a signal (an exit code) or sent a
      reply outside its schema.
    """
    TIMEOUT, SIGNAL, SANDBOX, CUDA_ERROR, WORKER = \
        "timeout", "signal", "sandbox", "cuda_error", "worker"
    KINDS = (TIMEOUT, SIGNAL, SANDBOX, CUDA_ERROR, WORKER)

    def __init__(self, message, *, kind):
        if kind not in self.KINDS:
            raise ValueError(f"KernelError kind must be one of {', '.join(self.KINDS)}, "
                             f"got {kind!r}")
        super().__init__(message)
        self.kind = kind

    def __reduce__(self):   # pickle (multiprocessing) keeps the kind, a keyword argument
        return _kernel_error, (str(self), self.kind)


def _kernel_error(message, kind):
    return KernelError(message, kind=kind)


class CompileWarning(UserWarning):
    """A compiler's warning about a user kernel's source (g++ -Wall on emu, NVRTC on cuda),
    issued through Python's `warnings` with the source's line number: filename 'kernel.cu',
    `.lineno`. Shown again when the kernel comes from the cache. Silence them with
    `warnings.simplefilter("ignore", tm.CompileWarning)`."""
