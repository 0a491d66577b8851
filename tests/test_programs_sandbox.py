"""Whole programs (tm.run) run confined as kernels do (issues 29, 30): a program computes and
prints; it cannot start programs, fork, open sockets, read files outside what it was given, or
see the caller's environment. Each attack fails and changes nothing outside."""
import os
import textwrap

import pytest

import tiledmm as tm
from tiledmm.confine import sandbox

pytestmark = pytest.mark.skipif(not sandbox.available(),
                                reason=f"no confinement here: {sandbox.describe()}")
SECONDS = 120


def run(body, tmp_path, **kwargs):
    source = textwrap.dedent("""
        #include <cstdio>
        #include <cstdlib>
        #include <unistd.h>
        #include <sys/socket.h>
        #include <netinet/in.h>
        int main(int argc, char **argv) {
        %s
            return 0;
        }""") % textwrap.indent(textwrap.dedent(body), "    ")
    return tm.run(source, backend="emu", timeout=SECONDS, **kwargs)


def test_system_is_refused_and_said_so(tmp_path):
    target = tmp_path / "pwned"
    res = run(f'printf("before\\n"); fflush(stdout);\n'
              f'system("echo pwned > {target}");\nprintf("after\\n");', tmp_path)
    assert res.returncode == -31 and res.stdout == "before\n"
    assert "sandbox refused a system call" in res.stderr
    assert not target.exists()


def test_fork_is_refused(tmp_path):
    res = run('pid_t p = fork(); printf("forked %d\\n", (int)p);', tmp_path)
    assert res.returncode == -31 and "forked" not in res.stdout


def test_a_socket_is_refused(tmp_path):
    res = run('int s = socket(AF_INET, SOCK_STREAM, 0); printf("socket %d\\n", s);', tmp_path)
    assert res.returncode == -31 and "socket" not in res.stdout


def test_files_outside_are_not_readable(tmp_path):
    secret = tmp_path / "secret" / "solution.txt"
    secret.parent.mkdir()
    secret.write_text("the instructor's answer")
    work = tmp_path / "work"
    work.mkdir()
    cwd = os.getcwd()
    os.chdir(work)
    try:
        res = run(f'FILE *f = fopen("{secret}", "r");\n'
                  'printf("%s\\n", f ? "read" : "denied");', tmp_path)
    finally:
        os.chdir(cwd)
    assert res.returncode == 0 and res.stdout == "denied\n"


def test_the_callers_environment_is_not_passed(tmp_path, monkeypatch):
    monkeypatch.setenv("SECRET_TOKEN", "hunter2")
    res = run('const char *t = getenv("SECRET_TOKEN"); printf("[%s]\\n", t ? t : "");',
              tmp_path)
    assert res.returncode == 0 and res.stdout == "[]\n"


def test_a_correct_program_still_runs_with_device_memory(tmp_path):
    res = run('''
        int h[3] = {1, 2, 3}, *d = 0, back[3] = {0, 0, 0};
        cudaMalloc(&d, sizeof h);
        cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice);
        cudaMemcpy(back, d, sizeof h, cudaMemcpyDeviceToHost);
        printf("%d %d %d\\n", back[0], back[1], back[2]);
        cudaFree(d);''', tmp_path)
    assert res.returncode == 0 and res.stdout == "1 2 3\n", res.stderr
