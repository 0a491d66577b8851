"""The sandbox's attack suite (issue 29): kernels that compute C = A + B correctly and do one
thing more. Each entry is a snippet run by thread 0 of block 0 (`EVIL`), or a whole source
(`SOURCE`), with placeholders filled by the test: @SECRET_FILE@ (an instructor's file),
@OUTSIDE@ (a path outside any scratch folder), @PORT@ (a listening TCP port on 127.0.0.1).
Anything an attack obtains is printed after "LEAK:", so that a leak shows in the output.

    python tests/attacks/attacks.py CONFIG.json   # through tm.compile: one JSON object out
"""
import json
import sys

HEADERS = ("#include <cstdio>\n#include <cstdlib>\n#include <cstring>\n#include <unistd.h>\n"
           "#include <fcntl.h>\n#include <pthread.h>\n#include <signal.h>\n#include <sys/mman.h>\n"
           "#include <sys/ioctl.h>\n#include <sys/ptrace.h>\n#include <sys/socket.h>\n"
           "#include <sys/stat.h>\n#include <sys/syscall.h>\n#include <netinet/in.h>\n"
           "#include <arpa/inet.h>\n#include <termios.h>\n#include <cerrno>\n")
KERNEL = """
__global__ void vec_add(const float *A, const float *B, float *C, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i == 0) {
@EVIL@
    }
    if (i < n) C[i] = A[i] + B[i];
}
"""
ATTACKS = {
    "read_instructor_file": r"""
        FILE *f = fopen("@SECRET_FILE@", "r");
        if (f) { char b[128] = {0}; fread(b, 1, 127, f); printf("LEAK:%s\n", b); fclose(f); }""",
    "mmap_instructor_file": r"""
        int fd = open("@SECRET_FILE@", O_RDONLY);
        if (fd >= 0) { char *p = (char *)mmap(0, 64, PROT_READ, MAP_PRIVATE, fd, 0);
                       if (p != MAP_FAILED) printf("LEAK:%.40s\n", p); }""",
    "write_outside": r"""
        FILE *f = fopen("@OUTSIDE@", "w"); if (f) { fputs("pwned", f); fclose(f); }""",
    "write_cache": r"""
        FILE *f = fopen("@CACHE@/user-planted.so", "w"); if (f) { fputs("pwned", f); fclose(f); }""",
    "write_cwd": r"""
        FILE *f = fopen("@CWD@/planted.txt", "w"); if (f) { fputs("pwned", f); fclose(f); }""",
    "system": r"""
        int rc = system("echo pwned > @OUTSIDE@"); (void)rc;""",
    "fork_exec": r"""
        if (fork() == 0) { execl("/bin/sh", "sh", "-c", "echo pwned > @OUTSIDE@", (char *)0); _exit(0); }""",
    "background_child": r"""
        if (fork() == 0) { setsid(); sleep(3); FILE *f = fopen("@OUTSIDE@", "w"); if (f) fclose(f); _exit(0); }""",
    "tcp_connect": r"""
        int s = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a; memset(&a, 0, sizeof a); a.sin_family = AF_INET;
        a.sin_port = htons(@PORT@); a.sin_addr.s_addr = htonl(0x7f000001);
        if (s >= 0 && connect(s, (struct sockaddr *)&a, sizeof a) == 0) printf("LEAK:connected\n");""",
    "environment": r"""
        const char *s = getenv("SECRET_TOKEN"); if (s) printf("LEAK:%s\n", s);""",
    "parent_environ": r"""
        char p[64]; snprintf(p, sizeof p, "/proc/%d/environ", (int)getppid());
        int fd = open(p, O_RDONLY); char b[4096] = {0};
        if (fd >= 0) { int n = read(fd, b, sizeof b - 1); for (int k = 0; k < n; ++k) if (!b[k]) b[k] = ' ';
                       printf("LEAK:%s\n", b); }""",
    "parent_cmdline": r"""
        char p[64]; snprintf(p, sizeof p, "/proc/%d/cmdline", (int)getppid());
        int fd = open(p, O_RDONLY); char b[512] = {0};
        if (fd >= 0 && read(fd, b, sizeof b - 1) > 0) printf("LEAK:cmdline %s\n", b);""",
    "ptrace_parent": r"""
        if (ptrace(PTRACE_ATTACH, getppid(), 0, 0) == 0) printf("LEAK:attached\n");""",
    "kill_parent": r"""
        if (kill(getppid(), SIGKILL) == 0) printf("LEAK:killed\n");""",
    "huge_allocation": r"""
        size_t n = (size_t)100 << 30; char *p = (char *)malloc(n);
        if (p) { memset(p, 1, n); printf("LEAK:allocated\n"); }""",
    "shared_anonymous_mapping": r"""
        void *p = mmap(0, (size_t)1 << 30, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        if (p != MAP_FAILED) printf("LEAK:shared mapping\n");""",
    "thread_bomb": r"""
        int made = 0; pthread_t t;
        for (int k = 0; k < 100000; ++k) {
            if (pthread_create(&t, 0, [](void *) -> void * { sleep(30); return 0; }, 0) != 0) break;
            ++made; }
        if (made >= 100000) printf("LEAK:threads %d\n", made);""",
    # issue 45: the arguments' shared file, found in /proc/self/fd, shrunk (the caller's copies
    # would fault: SIGBUS) or grown (memory outside every limit): sealed, both refused
    "truncate_arguments": r"""
        for (int fd = 0; fd < 1024; fd++) {
            char p[64], t[256] = {0}; snprintf(p, sizeof p, "/proc/self/fd/%d", fd);
            if (readlink(p, t, sizeof t - 1) > 0 && strstr(t, "tiledmm-args")) ftruncate(fd, 0);
        }""",
    "grow_arguments": r"""
        for (int fd = 0; fd < 1024; fd++) {
            char p[64], t[256] = {0}; snprintf(p, sizeof p, "/proc/self/fd/%d", fd);
            if (readlink(p, t, sizeof t - 1) > 0 && strstr(t, "tiledmm-args")
                && ftruncate(fd, 600L << 20) == 0) printf("LEAK:grown\n");
        }""",
    # issue 45: naming the caller as the owner to signal (SIGIO kills by default; F_SETSIG
    # picks any signal), where Landlock has no signal scope (ABI < 6): refused by seccomp
    "signal_owner": r"""
        int me = (int)getppid(); struct f_owner_ex o = {F_OWNER_PID, me};
        if (fcntl(1, F_SETOWN, me) == 0) printf("LEAK:setown\n");
        if (fcntl(1, F_SETSIG, SIGKILL) == 0) printf("LEAK:setsig\n");
        if (fcntl(1, F_SETOWN_EX, &o) == 0) printf("LEAK:setown_ex\n");
        if (ioctl(1, 0x8901, &me) == 0) printf("LEAK:fiosetown\n");
        if (ioctl(1, 0x8902, &me) == 0) printf("LEAK:siocspgrp\n");
        if (fcntl(1, F_GETFL) < 0) printf("LEAK:fcntl F_GETFL refused\n");""",
    # TCSETS2 (0x402C542B): the terminal's type 0x54 with direction and size bits set; it must
    # not reach the kernel (ENOTTY from a stdin that is no terminal says it did)
    "tcsets2": r"""
        char buf[64] = {0}; errno = 0;
        if (ioctl(0, 0x402C542B, buf) == 0 || errno == ENOTTY) printf("LEAK:tcsets2 passed\n");""",
    # issue 45: threads with small stacks (RLIMIT_DATA alone allows ~770,000); how many it got
    "small_stack_threads": r"""
        int made = 0; pthread_t t; pthread_attr_t a; pthread_attr_init(&a);
        pthread_attr_setstacksize(&a, 16384);
        for (int k = 0; k < 2000; ++k) {
            if (pthread_create(&t, &a, [](void *) -> void * { sleep(3); return 0; }, 0) != 0) break;
            ++made; }
        printf("THREADS:%d\n", made);""",
    # issue 45: a thread that outlives its launch and spins with no call in progress (detached:
    # the launch returns at once); the caller must find it and end it
    "spinning_thread": r"""
        pthread_t t;
        if (pthread_create(&t, 0, [](void *) -> void * { for (volatile long k = 0;; ++k) {} return 0; }, 0) == 0)
            pthread_detach(t);""",
    "tiocsti": r"""
        char c = 'x'; if (ioctl(0, TIOCSTI, &c) == 0) printf("LEAK:typed\n");""",
    "crafted_reply": r"""
        // a pickle that runs os.system when unpickled, sent as a reply on every socket it finds
        static const char pk[] = "\x80\x04\x95\x2a\x00\x00\x00\x00\x00\x00\x00\x8c\x02os\x94\x8c\x06system"
            "\x94\x93\x94\x8c\x12touch @OUTSIDE@\x94\x85\x94R\x94.";
        unsigned long long n = sizeof pk - 1;
        for (int fd = 3; fd < 64; ++fd) { struct stat st;
            if (fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode)) { write(fd, &n, 8); write(fd, pk, n); } }""",
}
# the includes the old text filter missed: each names the instructor's file
INCLUDES = {
    "include_instructor_file": '#include "@SECRET_FILE@"\n',
    "include_comment_spelling": '#/**/include "@SECRET_FILE@"\n',
    "include_digraph_spelling": '%:include "@SECRET_FILE@"\n',
    "import_spelling": '#import "@SECRET_FILE@"\n',
}


def source(name, fill):
    if name in INCLUDES:
        text = INCLUDES[name] + HEADERS + KERNEL.replace("@EVIL@", "")
    else:
        text = HEADERS + KERNEL.replace("@EVIL@", ATTACKS[name])
    for k, v in fill.items():
        text = text.replace(f"@{k}@", str(v))
    return text


def main():
    """Each attack through tm.compile (isolate=True, emu): {name: {"error", "correct"}}."""
    import numpy as np

    import tiledmm as tm
    config = json.load(open(sys.argv[1]))
    out = {}
    rng = np.random.default_rng(0)
    for name in config["names"]:
        A = rng.random(1000, dtype=np.float32)
        B = rng.random(1000, dtype=np.float32)
        C = np.zeros_like(A)
        try:
            k = tm.compile(source(name, config["fill"]), backend="emu")
            k(4, 256, A, B, C, 1000, backend="emu", timeout=config.get("timeout", 20))
            error = None
        except Exception as exc:   # the attack's failure, whatever its form
            error = f"{type(exc).__name__}: {exc}"
        out[name] = {"error": error, "correct": bool(np.array_equal(C, A + B))}
    sys.stdout.write("\n@@attacks@@" + json.dumps(out))


if __name__ == "__main__":
    main()
