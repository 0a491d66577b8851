"""The trust boundary (issue 29): what the caller accepts from the worker and the compile child,
and the environment children get. The attacks themselves are tests/test_sandbox_attacks.py."""
import json
import os
import pickle
import socket
import struct
import subprocess
import sys
import time

import pytest

from tiledmm.toolchain import compile_emu
from tiledmm.confine import isolation
from tiledmm.confine import sandbox
from conftest import pythonpath


class _Boom:
    def __reduce__(self):
        return (os.system, ("touch /tmp/tiledmm-pickle-ran",))


def _reply_bytes(sock, payload):
    sock.sendall(struct.pack("=Q", len(payload)) + payload)


def test_a_pickled_reply_is_refused_and_never_run(tmp_path):
    ours, theirs = socket.socketpair()
    marker = "/tmp/tiledmm-pickle-ran"
    if os.path.exists(marker):
        os.unlink(marker)
    _reply_bytes(theirs, pickle.dumps(_Boom()))
    with pytest.raises(isolation.ProtocolError, match="not JSON"):
        isolation.recv_reply(ours)
    assert not os.path.exists(marker)


def test_an_oversized_reply_is_refused_before_it_is_read():
    ours, theirs = socket.socketpair()
    theirs.sendall(struct.pack("=Q", 1 << 40))
    with pytest.raises(isolation.ProtocolError, match="at most"):
        isolation.recv_reply(ours)


def test_a_reply_that_stops_halfway_does_not_hang_the_caller(monkeypatch):
    monkeypatch.setattr(isolation, "REPLY_SECONDS", 0.5)
    ours, theirs = socket.socketpair()
    theirs.sendall(struct.pack("=Q", 100) + b'{"ok": ')
    with pytest.raises(isolation.ProtocolError, match="middle of a reply"):
        isolation.recv_reply(ours)


def test_descriptors_sent_by_the_worker_are_not_accepted():
    ours, theirs = socket.socketpair()
    r, w = os.pipe()
    data = json.dumps({"ok": True, "pid": 5}).encode()
    socket.send_fds(theirs, [struct.pack("=Q", len(data))], [r])
    theirs.sendall(data)
    before = set(os.listdir("/proc/self/fd"))
    assert isolation.check_reply(isolation.recv_reply(ours), "ping")["pid"] == 5
    assert set(os.listdir("/proc/self/fd")) <= before   # nothing new arrived
    os.close(r), os.close(w)


@pytest.mark.parametrize("reply", [
    {"ok": True, "raw": {"samples_ms": [1.0], "h2d_ms": 0, "d2h_ms": 0, "grid": [1, 1, 1],
                         "block": [1, 1, 1], "__class__": "x"}},            # a field not known
    {"ok": True, "raw": {"samples_ms": "1", "h2d_ms": 0, "d2h_ms": 0, "grid": [1, 1, 1],
                         "block": [1, 1, 1]}},                              # a wrong type
    {"ok": True, "raw": {"samples_ms": [1.0], "h2d_ms": 0, "d2h_ms": 0, "grid": [1, 1],
                         "block": [1, 1, 1]}},                              # a wrong shape
    {"ok": True, "raw": {"samples_ms": [1.0], "h2d_ms": 0, "d2h_ms": 0, "grid": [1, 1, 1],
                         "block": [1, 1, 1], "profile_counts": {"a": "b"}}},
    {"ok": True, "raw": {"samples_ms": [1.0]}},                             # missing fields
    {"ok": True, "raw": {}, "extra": 1},
])
def test_replies_outside_the_schema_are_refused(reply):
    with pytest.raises(isolation.ProtocolError):
        isolation.check_reply(reply, "launch")


def test_a_good_reply_passes_with_its_values_and_long_text_is_cut():
    raw = {"samples_ms": [1.5, 2.5], "h2d_ms": 0.25, "d2h_ms": 0.5, "h2d_bytes": 8,
           "d2h_bytes": 4, "grid": [2, 1, 1], "block": [32, 1, 1], "shared_bytes": 0,
           "static_shared_bytes": 0, "registers": 0, "launches": 1, "blocks_per_sm": 0,
           "occupancy": 0.5, "model_bytes": 0.0}
    out = isolation.check_reply({"ok": True, "raw": raw}, "launch")
    assert out["raw"]["grid"] == (2, 1, 1) and out["raw"]["samples_ms"] == [1.5, 2.5]
    err = isolation.check_reply({"error": "os.system", "message": "x" * 200000}, "launch")
    assert err["error"] == "RuntimeError" and len(err["message"]) < 70000
    # NVRTC's time limit, in the cuda worker, reaches the caller as what it is
    late = isolation.check_reply({"error": "CompileTimeout", "message": "took more than 3 s"},
                                 "compile_cuda")
    assert late["error"] == "CompileTimeout"


def _param(**kw):
    d = {"name": "y", "ctype": "float", "kind": "pointer", "const": False, "volatile": False,
         "row_quals": "", "lanes": 1, "inner": [], "decl_text": "float *y", "vector": None,
         "span": [0, 8]}
    d.update(kw)
    return d


@pytest.mark.parametrize("bad", [
    {"name": "y; system(1)"}, {"ctype": "struct evil"}, {"kind": "callable"},
    {"lanes": 99}, {"inner": [-1]}, {"const": "yes"}, {"volatile": 1}, {"row_quals": "*"},
    {"vector": "float9"},
])
def test_the_compile_childs_parameters_are_checked(bad):
    with pytest.raises(compile_emu.CompileProtocolError):
        compile_emu.compile_reply({"ok": True, "name": "k", "params": [_param(**bad)],
                                    "log": ""})


def test_a_good_signature_reply_builds_params():
    out = compile_emu.compile_reply({"ok": True, "name": "k", "log": "",
                                      "params": [_param(), _param(name="n", ctype="int",
                                                                  kind="scalar")]})
    assert [p.decl() for p in out["params"]] == ["float *y", "int n"]


def test_children_get_an_allow_listed_environment(monkeypatch):
    monkeypatch.setenv("SECRET_TOKEN", "abc")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "def")
    monkeypatch.setenv("TILEDMM_KERNEL_TIMEOUT", "7")
    env = sandbox.minimal_env()
    assert "SECRET_TOKEN" not in env and "AWS_SECRET_ACCESS_KEY" not in env
    assert env["TILEDMM_KERNEL_TIMEOUT"] == "7" and "PATH" in env


needs_sandbox = pytest.mark.skipif(not sandbox.status()["confined"],
                                   reason=f"no sandbox here: {sandbox.status()['reason']}")


@needs_sandbox
def test_run_confines_a_program_to_its_scratch_folder(tmp_path):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    secret = tmp_path / "secret.txt"
    secret.write_text("nope")
    done = sandbox.run(["sh", "-c", f"cat {secret}; echo ok > {scratch}/a; "
                                     f"echo no > {tmp_path}/b; cat {scratch}/a"],
                        sandbox.compile_policy(str(scratch)), cwd=str(scratch), timeout=60)
    assert b"nope" not in done.stdout and done.stdout.strip() == b"ok", done
    assert not (tmp_path / "b").exists() and done.confined


@needs_sandbox
def test_a_run_program_cannot_start_another(tmp_path):
    src = tmp_path / "p.c"
    src.write_text('#include <stdlib.h>\n#include <stdio.h>\nint main(void) { puts("up"); '
                   'fflush(stdout); return system("true"); }\n')
    exe = tmp_path / "p"
    built = sandbox.run(["gcc", "-o", str(exe), str(src)], sandbox.compile_policy(
        str(tmp_path)), cwd=str(tmp_path), timeout=120)
    assert built.returncode == 0, built.stderr
    done = sandbox.run([str(exe)], sandbox.run_policy(str(tmp_path)), cwd=str(tmp_path),
                        timeout=60)
    assert done.stdout == b"up\n" and done.returncode == -31, done   # SIGSYS


@needs_sandbox
def test_run_python_confines_itself_before_calling_main(tmp_path):
    done = sandbox.run_python("confine.sandbox", [], sandbox.run_policy(str(tmp_path)),
                               cwd=str(tmp_path), timeout=120)
    # tiledmm.confine.sandbox has no main(): the AttributeError proves it got that far, confined
    assert b"AttributeError" in done.stderr and b"main" in done.stderr, done.stderr[-500:]


@needs_sandbox
def test_packages_on_pythonpath_reach_a_confined_child_but_not_the_checkout(tmp_path,
                                                                           monkeypatch):
    # pip install --target puts libclang on $PYTHONPATH (a GPU machine without it installed):
    # the compile child, in isolated mode, must still import it; the folder holding tiledmm
    # (a checkout, with its tests and notes) stays unreadable
    site = tmp_path / "site"
    (site / "tm_probe_pkg").mkdir(parents=True)
    (site / "tm_probe_pkg" / "__init__.py").write_text("VALUE = 17\n")
    (site / "tm_probe_pkg" / "sub.py").write_text("TWICE = 34\n")
    # issue 45: only the package's folder is granted, never the PYTHONPATH entry around it
    (site / "hidden_tests.py").write_text("ANSWER = 1\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(site), sandbox.PACKAGE_PARENT]))
    monkeypatch.setattr(sandbox, "CHILD_PACKAGES", ("tm_probe_pkg",))
    assert sandbox._import_dirs() == (str(site / "tm_probe_pkg"),)
    code = ("import tm_probe_pkg, tm_probe_pkg.sub, os\n"
            "seen = []\n"
            f"for p in ({sandbox.PACKAGE_PARENT!r}, {str(site)!r}):\n"
            "    try:\n"
            "        os.listdir(p); seen.append('listed')\n"
            "    except PermissionError:\n"
            "        seen.append('refused')\n"
            "try:\n"
            "    import hidden_tests; seen.append('imported')\n"
            "except ImportError:\n"
            "    seen.append('not-imported')\n"
            "print(tm_probe_pkg.VALUE, tm_probe_pkg.sub.TWICE, *seen)")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    argv = [sys.executable, "-I", "-c", sandbox._bootstrap(sandbox.run_policy(str(scratch)),
                                                           code, True)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120,
                          env=sandbox.minimal_env())
    assert done.returncode == 0 and done.stdout.split() == [
        "17", "34", "refused", "refused", "not-imported"], done.stderr[-800:]


def test_each_backend_has_its_own_worker_and_only_cuda_gets_the_devices():
    from tiledmm.confine import isolation
    assert isolation.worker("emu") is not isolation.worker("cuda")
    assert isolation.worker("emu").devices is False
    assert isolation.worker() is isolation.worker("emu")


def test_status_and_describe_are_consistent():
    s = sandbox.status()
    line = sandbox.describe()
    assert line.startswith("sandbox: confined" if s["confined"] else "sandbox: NOT confined")


def test_the_probe_reports_unavailable_when_switched_off():
    code = ("import json; from tiledmm.confine import sandbox; "
            "print(json.dumps(sandbox.status()))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, env=dict(os.environ, TILEDMM_SANDBOX="off",
                                               PYTHONPATH=pythonpath(sandbox.PACKAGE_PARENT)))
    s = json.loads(out.stdout)
    assert s["confined"] is False and "TILEDMM_SANDBOX=off" in s["reason"]


def test_the_worker_ends_with_its_caller_even_when_started_from_a_thread_that_ended():
    code = ("import threading, sys, time\nfrom tiledmm.confine import isolation\n"
            "w = isolation.worker()\n"
            "t = threading.Thread(target=lambda: w.call({'op': 'ping'}, timeout=60))\n"
            "t.start(); t.join(); time.sleep(1.0)\n"
            "print(w.pid, flush=True); time.sleep(600)\n")
    package_parent = sandbox.PACKAGE_PARENT
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONPATH=pythonpath(package_parent)))
    try:
        pid = int(proc.stdout.readline())
        assert os.path.exists(f"/proc/{pid}"), "the worker died with the thread that started it"
    finally:
        proc.kill()
        proc.wait()
    deadline = time.monotonic() + 5
    while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
        time.sleep(0.05)
    gone = not os.path.exists(f"/proc/{pid}") or \
        open(f"/proc/{pid}/stat").read().split(") ")[1][0] == "Z"
    assert gone, "the worker outlived its caller"
