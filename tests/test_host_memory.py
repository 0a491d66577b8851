"""The host memory guard uses what the process can really get (issue 18): a request above the
limit (physical memory, a container's cgroup limit, TILEDMM_HOST_MEMORY_LIMIT) is a MemoryError
that names the limit, not an OOM kill, and the next call works.

The limit readers (emu/host_memory.h) are checked against fake /proc and /sys/fs/cgroup
trees, cgroup v1 and v2, through a small C and C++ driver; the Python-level tests run in a
subprocess with TILEDMM_HOST_MEMORY_LIMIT, since the limit is read once per process."""
import json
import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tiledmm as tm

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HEADER = os.path.join(ROOT, "tiledmm", "native", "emu", "host_memory.h")
GiB, MiB = 1 << 30, 1 << 20
V1_UNLIMITED = "9223372036854771712"


def run_python(code, **env):
    full_env = dict(os.environ, TILEDMM_BACKEND="emu", **env)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=300, env=full_env)


# ---- through tiledmm, in a subprocess with a lowered limit ---------------------------------

def test_request_above_the_limit_is_a_memory_error_and_the_next_call_works():
    proc = run_python("""
        import numpy as np, tiledmm as tm
        x = np.broadcast_to(np.float32(1), (6000, 6000))   # zero-stride: 144 MB once copied
        for attempt in range(2):
            try:
                tm.matmul(x, x, backend="emu")
            except MemoryError as e:
                print("MemoryError:", e)
            else:
                print("no error")
        try:
            tm.reduce(np.broadcast_to(np.float64(1), (10**8,)), backend="emu")
        except MemoryError as e:
            print("MemoryError:", e)
        A = np.arange(12, dtype=np.float32).reshape(3, 4)
        print("ok", tm.matmul(A, A.T.copy(), backend="emu").out.tolist() == (A @ A.T).tolist())
        print("mem_info", *tm.mem_info(backend="emu"))
    """, TILEDMM_HOST_MEMORY_LIMIT="256M")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    errors = [line for line in lines if line.startswith("MemoryError:")]
    assert len(errors) == 3, proc.stdout
    for line in errors:
        assert "TILEDMM_HOST_MEMORY_LIMIT" in line and "0.268 GB" in line, line
    assert "matmul:" in errors[0] and "0.864 GB" in errors[0]  # 2 copies + 2 emu buffers + out
    assert "ok True" in lines
    # The emulated device gets half of what the process can have.
    free, total = map(int, lines[-1].split()[1:])
    assert total == 128 * MiB and free == total


def test_limit_only_lowers():
    """A TILEDMM_HOST_MEMORY_LIMIT above physical memory does not raise the limit; an
    unparsable one is ignored (the physical or cgroup limit stays)."""
    code = """
        import numpy as np, tiledmm as tm
        try:
            tm.matmul(np.broadcast_to(np.float32(1), (1 << 20, 1 << 19)),
                      np.broadcast_to(np.float32(1), (1 << 19, 1 << 20)), backend="emu")
        except MemoryError as e:
            print(e)
    """
    for value in ("1024T", "lots", "0", ""):
        proc = run_python(code, TILEDMM_HOST_MEMORY_LIMIT=value)
        assert proc.returncode == 0, proc.stderr
        assert "TILEDMM_HOST_MEMORY_LIMIT" not in proc.stdout
        assert "physical memory" in proc.stdout or "cgroup" in proc.stdout, proc.stdout


def test_request_above_the_machine_is_refused_in_process():
    x = np.broadcast_to(np.float32(1), (1 << 20, 1 << 19))  # 2 TB once copied
    with pytest.raises(MemoryError, match=r"can have at most .* GB \((physical memory|the cgroup)"):
        tm.matmul(x, x.T, backend="emu")
    A = np.ones((5, 3), np.float32)
    np.testing.assert_array_equal(tm.matmul(A, A.T, backend="emu").out, np.full((5, 5), 3))


def test_device_inputs_need_no_host_memory():
    """Device inputs are not host copies: with a limit below what a host copy of them would
    take, a call on them still runs."""
    proc = run_python("""
        import numpy as np, tiledmm as tm
        d = tm.to_device(np.ones(12_000_000, np.float32), backend="emu")  # 48 MB
        # Host copies of both inputs plus their emulated buffers would be 192 MB.
        r = tm.matmul(d.reshape(1, -1), d.reshape(-1, 1), kernel="naive", backend="emu",
                      output="numpy", warmup=0, repeat=1)
        print("dot", float(r.out[0, 0]))
    """, TILEDMM_HOST_MEMORY_LIMIT="100M")
    assert proc.returncode == 0, proc.stderr
    assert "dot 12000000.0" in proc.stdout, proc.stdout + proc.stderr


# ---- the readers, on fake trees ------------------------------------------------------------

DRIVER = r"""
#include "host_memory.h"
int main(int argc, char **argv)
{
    tm_host_memory_limits l;
    char why[4096];
    tm_host_memory_read_limits(argv[1], argc > 2 ? argv[2] : NULL, &l);
    unsigned long long a = tm_host_memory_available_at(argv[1], &l, why, sizeof why);
    printf("{\"limit\": %llu, \"physical\": %llu, \"cgroup\": %llu, \"override\": %llu, "
           "\"source\": \"%s\", \"available\": %llu, \"why\": \"%s\"}\n",
           l.limit, l.physical, l.cgroup, l.override_bytes, l.source, a, why);
    return 0;
}
"""


@pytest.fixture(scope="module")
def drivers(tmp_path_factory):
    """The driver built as C11 (as the glue includes the header) and as C++17 (as the
    emulator's runtime does)."""
    if not os.path.exists(HEADER):
        pytest.skip("needs tiledmm/native/emu/host_memory.h")
    d = tmp_path_factory.mktemp("hm_driver")
    src = d / "driver.c"
    src.write_text(DRIVER)
    built = []
    for compiler, flags in (("cc", ["-x", "c", "-std=c11"]), ("c++", ["-x", "c++", "-std=c++17"])):
        exe = shutil.which(os.environ.get("CXX" if compiler == "c++" else "CC", compiler))
        if exe is None:
            continue
        out = d / f"driver_{compiler.replace('+', 'x')}"
        proc = subprocess.run([exe, *flags, "-Wall", "-Wextra", "-Werror", "-O1",
                               f"-I{os.path.dirname(HEADER)}", str(src), "-o", str(out),
                               "-lpthread"], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        built.append(str(out))
    if not built:
        pytest.skip("needs a C or C++ compiler")
    return built


def read(drivers, root, override=None):
    results = []
    for exe in drivers:
        args = [exe, str(root)] + ([override] if override is not None else [])
        results.append(json.loads(subprocess.run(args, capture_output=True, text=True,
                                                 check=True).stdout))
    assert all(r == results[0] for r in results), results  # C and C++ agree
    return results[0]


def fake_tree(root, files):
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def meminfo(total, available):
    return (f"MemTotal:       {total // 1024} kB\nMemFree:        1000 kB\n"
            f"MemAvailable:   {available // 1024} kB\nBuffers:          10 kB\n")


def test_no_cgroup_physical_memory_and_memavailable(drivers, tmp_path):
    root = fake_tree(tmp_path, {"proc/meminfo": meminfo(16 * GiB, 10 * GiB)})
    r = read(drivers, root)
    assert r["limit"] == r["physical"] == 16 * GiB and r["cgroup"] == 0
    assert r["source"] == "physical memory"
    assert r["available"] == 10 * GiB and "MemAvailable" in r["why"]


def test_cgroup_v1_lowest_limit_on_the_path(drivers, tmp_path):
    """A pod's limit one level up from the container's unlimited cgroup; usage counts without
    the inactive file cache the kernel can reclaim."""
    mem = "sys/fs/cgroup/memory"
    root = fake_tree(tmp_path, {
        "proc/meminfo": meminfo(64 * GiB, 60 * GiB),
        "proc/self/cgroup": "9:cpu,cpuacct:/kubepods/pod1/c1\n4:memory:/kubepods/pod1/c1\n"
                            "0::/\n",
        f"{mem}/memory.limit_in_bytes": V1_UNLIMITED,
        f"{mem}/kubepods/memory.limit_in_bytes": V1_UNLIMITED + "\n",
        f"{mem}/kubepods/pod1/memory.limit_in_bytes": f"{2 * GiB}\n",
        f"{mem}/kubepods/pod1/memory.usage_in_bytes": f"{1536 * MiB}\n",
        f"{mem}/kubepods/pod1/memory.stat": f"cache 5\ninactive_file 1\n"
                                            f"total_inactive_file {1024 * MiB}\n",
        f"{mem}/kubepods/pod1/c1/memory.limit_in_bytes": V1_UNLIMITED,
        f"{mem}/kubepods/pod1/c1/memory.usage_in_bytes": f"{1500 * MiB}\n",
    })
    r = read(drivers, root)
    assert r["limit"] == r["cgroup"] == 2 * GiB and r["physical"] == 64 * GiB
    assert r["source"].startswith("the cgroup memory limit in ")
    assert r["source"].endswith("kubepods/pod1/memory.limit_in_bytes")
    assert r["available"] == 2 * GiB - 512 * MiB and "cgroup" in r["why"]


def test_cgroup_v1_path_not_visible_uses_the_mount_root(drivers, tmp_path):
    """A container without a cgroup namespace sees the host's path in /proc/self/cgroup but
    its own cgroup at the mount's root."""
    root = fake_tree(tmp_path, {
        "proc/meminfo": meminfo(64 * GiB, 60 * GiB),
        "proc/self/cgroup": "4:memory:/docker/0123abcd\n",
        "sys/fs/cgroup/memory/memory.limit_in_bytes": f"{3 * GiB}\n",
        "sys/fs/cgroup/memory/memory.usage_in_bytes": f"{1 * GiB}\n",
        "sys/fs/cgroup/memory/memory.stat": "total_inactive_file 0\n",
    })
    r = read(drivers, root)
    assert r["limit"] == 3 * GiB and r["available"] == 2 * GiB


def test_cgroup_v2_nested_and_max(drivers, tmp_path):
    cg = "sys/fs/cgroup"
    root = fake_tree(tmp_path, {
        "proc/meminfo": meminfo(32 * GiB, 20 * GiB),
        "proc/self/cgroup": "0::/user.slice/jupyter-ada.scope\n",
        f"{cg}/cgroup.controllers": "cpu memory pids\n",
        f"{cg}/user.slice/memory.max": f"{GiB}\n",
        f"{cg}/user.slice/memory.current": f"{900 * MiB}\n",
        f"{cg}/user.slice/memory.stat": f"anon 1\nfile 2\ninactive_file {100 * MiB}\n",
        f"{cg}/user.slice/jupyter-ada.scope/memory.max": "max\n",
        f"{cg}/user.slice/jupyter-ada.scope/memory.current": f"{800 * MiB}\n",
    })
    r = read(drivers, root)
    assert r["limit"] == r["cgroup"] == GiB
    assert r["source"].endswith("user.slice/memory.max")
    assert r["available"] == GiB - 800 * MiB


def test_cgroup_v2_container_root_and_memavailable_smaller(drivers, tmp_path):
    cg = "sys/fs/cgroup"
    root = fake_tree(tmp_path, {
        "proc/meminfo": meminfo(32 * GiB, 300 * MiB),
        "proc/self/cgroup": "0::/\n",
        f"{cg}/cgroup.controllers": "memory\n",
        f"{cg}/memory.max": f"{4 * GiB}\n",
        f"{cg}/memory.current": f"{GiB}\n",
        f"{cg}/memory.stat": "inactive_file 0\n",
    })
    r = read(drivers, root)
    assert r["limit"] == 4 * GiB and r["available"] == 300 * MiB
    assert "MemAvailable" in r["why"]


def test_usage_above_the_limit_leaves_nothing_available(drivers, tmp_path):
    cg = "sys/fs/cgroup"
    root = fake_tree(tmp_path, {
        "proc/meminfo": meminfo(32 * GiB, 20 * GiB),
        "proc/self/cgroup": "0::/a\n",
        f"{cg}/cgroup.controllers": "memory\n",
        f"{cg}/a/memory.max": f"{GiB}\n",
        f"{cg}/a/memory.current": f"{GiB + 4096}\n",
    })
    r = read(drivers, root)
    assert r["limit"] == GiB and r["available"] == 0


def test_hybrid_v1_memory_and_v2_unified_without_memory(drivers, tmp_path):
    """This machine's layout: the memory controller on v1, a unified v2 tree without it."""
    root = fake_tree(tmp_path, {
        "proc/meminfo": meminfo(24 * GiB, 23 * GiB),
        "proc/self/cgroup": "4:memory:/process_api/e469\n0::/\n",
        "sys/fs/cgroup/unified/cgroup.controllers": "\n",
        "sys/fs/cgroup/memory/memory.limit_in_bytes": V1_UNLIMITED,
        "sys/fs/cgroup/memory/process_api/e469/memory.limit_in_bytes": f"{8 * GiB}\n",
        "sys/fs/cgroup/memory/process_api/e469/memory.usage_in_bytes": f"{GiB}\n",
        "sys/fs/cgroup/memory/process_api/e469/memory.stat": "total_inactive_file 0\n",
    })
    r = read(drivers, root)
    assert r["limit"] == 8 * GiB and r["available"] == 7 * GiB
    assert r["source"].endswith("process_api/e469/memory.limit_in_bytes")


def test_v1_files_under_a_v2_mount_are_not_read(drivers, tmp_path):
    """/sys/fs/cgroup is a v2 tree only where it has cgroup.controllers (on v1 it is a tmpfs of
    controller folders)."""
    root = fake_tree(tmp_path, {
        "proc/meminfo": meminfo(24 * GiB, 23 * GiB),
        "proc/self/cgroup": "0::/\n",
        "sys/fs/cgroup/memory.max": f"{GiB}\n",  # no cgroup.controllers: not a v2 root
    })
    assert read(drivers, root)["limit"] == 24 * GiB


@pytest.mark.parametrize("value, expected", [
    ("512M", 512 * MiB), ("2G", 2 * GiB), ("2GiB", 2 * GiB), ("1073741824", GiB),
    ("64k", 64 * 1024), ("3gb", 3 * GiB), ("abc", 0), ("0", 0), ("", 0), ("-1G", 0),
    ("1.5G", 0), ("12 G", 0),
])
def test_override_parsing(drivers, tmp_path, value, expected):
    root = fake_tree(tmp_path, {"proc/meminfo": meminfo(16 * GiB, 10 * GiB)})
    r = read(drivers, root, value)
    assert r["override"] == expected
    if expected:
        assert r["limit"] == expected and r["source"] == "TILEDMM_HOST_MEMORY_LIMIT"
        assert r["available"] == min(expected, 10 * GiB)
    else:
        assert r["limit"] == 16 * GiB


def test_override_never_raises_a_cgroup_limit(drivers, tmp_path):
    root = fake_tree(tmp_path, {
        "proc/meminfo": meminfo(16 * GiB, 10 * GiB),
        "proc/self/cgroup": "0::/\n",
        "sys/fs/cgroup/cgroup.controllers": "memory\n",
        "sys/fs/cgroup/memory.max": f"{GiB}\n",
    })
    r = read(drivers, root, "8G")
    assert r["limit"] == GiB and "cgroup" in r["source"]


def test_nothing_readable(drivers, tmp_path):
    r = read(drivers, tmp_path)
    assert r["limit"] == 0 and r["available"] == 2**64 - 1
