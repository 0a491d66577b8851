"""A program's working folder and nvcc's command line (issue 44): the program runs among links
to its folder's files (read-only, its data/ included, a submission's own links never
followed), tm.run returns the files it writes (ProgramResult.files) and `python -m tiledmm run`
writes them back (beside the program or in --outdir, never outside it, never over its sources);
the CLI and %%cuda -c take nvcc's common options and refuse the rest clearly.

One program (tests/programs/runpath_files/) is built once on emu (the CLI's runs find it in
the cache); the rest are unit tests.
"""
import os
import shutil
import subprocess
import sys

import pytest

import tiledmm as tm
from conftest import HAVE_GPU, pythonpath
from tiledmm.programs import nvcc_args, nvcc_cli, workdir
from tiledmm.programs import run as programs

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
FILES_PROGRAM = os.path.join(HERE, "programs", "runpath_files")
RUN_S = 120


@pytest.fixture
def program_folder(tmp_path):
    """A copy of the program's folder with a link to a file outside it (an instructor's)."""
    outside = tmp_path / "instructor"
    outside.mkdir()
    (outside / "hidden.txt").write_text("hidden\n")
    folder = tmp_path / "submission"
    shutil.copytree(FILES_PROGRAM, folder)
    os.symlink(outside / "hidden.txt", folder / "outside.txt")
    return folder


def _inputs(folder):
    with open(os.path.join(folder, "data", "in.txt")) as f:
        return [int(v) for v in f.read().split()]


def test_program_reads_its_folder_and_its_files_come_back(program_folder, tmp_path):
    r = tm.run(str(program_folder / "files.cu"), backend="emu", timeout=RUN_S)
    assert r.returncode == 0, r.stderr
    assert "link readable: 0" in r.stdout and "input writable: 0" in r.stdout
    assert "source writable: 0" in r.stdout
    assert [int(v) for v in r.files["out.txt"].split()] == [2 * v for v in
                                                           _inputs(program_folder)]
    assert r.files["sub/more.txt"] == b"more\n"
    assert set(r.files) == {"out.txt", "sub/more.txt"}   # no staged input, no link
    # the CLI (the same program: from the cache) writes them to --outdir, then beside it
    env = dict(os.environ, PYTHONPATH=pythonpath(ROOT))
    outdir = tmp_path / "out"
    outdir.mkdir()
    cli = [sys.executable, "-m", "tiledmm", "run", "-O2", "-arch=sm_90",
           str(program_folder / "files.cu"), "--backend", "emu"]
    done = subprocess.run(cli + ["--outdir", str(outdir)], capture_output=True, timeout=RUN_S * 2,
                          env=env)
    assert done.returncode == 0, done.stderr
    assert (outdir / "out.txt").read_bytes() == r.files["out.txt"]
    assert (outdir / "sub" / "more.txt").read_bytes() == b"more\n"
    done = subprocess.run(cli, capture_output=True, timeout=RUN_S * 2, env=env)
    assert done.returncode == 0, done.stderr
    assert (program_folder / "out.txt").read_bytes() == r.files["out.txt"]


def test_source_text_runs_in_no_folder_of_the_caller(tmp_path, monkeypatch):
    (tmp_path / "grader_only.txt").write_text("hidden\n")
    monkeypatch.chdir(tmp_path)
    src = ('#include <cstdio>\nint main() { printf("%d\\n", fopen("grader_only.txt", "r") '
           '!= NULL); return 0; }\n')
    r = tm.run(src, backend="emu", timeout=RUN_S)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "0\n"


def test_stage_copies_small_files_links_the_rest_never_links(tmp_path):
    folder, work = tmp_path / "p", tmp_path / "w"
    folder.mkdir()
    work.mkdir()
    (folder / "a.txt").write_text("a")
    big = os.urandom(1024) * (workdir.COPIED_FILE_MOST // 1024 + 1)
    (folder / "big.bin").write_bytes(big)
    (folder / "data").mkdir()
    os.symlink("/etc/passwd", folder / "link")
    os.mkfifo(folder / "fifo")
    linked, staged = workdir.stage(str(folder), str(work))
    assert staged == {"a.txt": b"a", "big.bin": None, "data": None}
    assert sorted(linked) == [str(folder / "big.bin"), str(folder / "data")]
    assert sorted(os.listdir(work)) == ["a.txt", "big.bin", "data"]
    assert not os.path.islink(work / "a.txt") and (work / "a.txt").read_text() == "a"
    assert os.readlink(work / "big.bin") == str(folder / "big.bin")


def test_collect_reads_regular_files_only_and_changed_copies(tmp_path):
    (tmp_path / "made.txt").write_bytes(b"x" * 10)
    os.symlink("/etc/passwd", tmp_path / "sneaky")
    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "linked").write_text("input")
    (tmp_path / "kept.txt").write_text("same")
    (tmp_path / "changed.txt").write_text("new")
    files, left_out = workdir.collect(str(tmp_path), {"linked": None, "kept.txt": b"same",
                                                      "changed.txt": b"old"})
    assert files == {"made.txt": b"x" * 10, "changed.txt": b"new"} and left_out == []


def test_a_program_overwrites_a_file_of_its_folder_in_its_own_copy(tmp_path):
    """NVIDIA's dwtHaar1D writes result.dat; run again where the last run's result.dat came
    back beside it, fopen(..., "w") must work as with nvcc (it was EACCES on a read-only link).
    The new bytes come back; the folder's file is unchanged until written back."""
    (tmp_path / "result.dat").write_text("from the last run\n")
    (tmp_path / "main.cu").write_text(r"""
#include <cstdio>
int main()
{
    char before[64] = {0};
    FILE *f = fopen("result.dat", "r");
    if (!f || !fgets(before, sizeof before, f)) return 2;
    fclose(f);
    f = fopen("result.dat", "w");
    if (!f) { perror("result.dat"); return 1; }
    fprintf(f, "run after: %s", before);
    fclose(f);
    printf("written\n");
    return 0;
}
""")
    r = tm.run(str(tmp_path / "main.cu"), backend="emu", timeout=RUN_S)
    assert r.returncode == 0, r.stderr
    assert r.files == {"result.dat": b"run after: from the last run\n"}
    assert (tmp_path / "result.dat").read_text() == "from the last run\n"


def test_write_back_refuses_what_would_leave_the_folder(tmp_path):
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "main.cu").write_text("source")
    os.symlink(tmp_path, dest / "escape")
    written, refused = workdir.write_back(
        {"../up.txt": b"1", "/abs.txt": b"2", "main.cu": b"3", "escape/x.txt": b"4",
         "ok/fine.txt": b"5"}, str(dest), protected={"main.cu"})
    assert written == [str(dest / "ok" / "fine.txt")]
    assert len(refused) == 4
    assert (dest / "main.cu").read_text() == "source"
    assert not (tmp_path / "up.txt").exists() and not (tmp_path / "x.txt").exists()


def test_nvcc_options_in_either_spelling():
    args, rest = nvcc_args.split(
        ["-I", "inc", "-Iinc2", "--include-path=inc3", "-D", "N=8", "-DM", "-U", "X", "-O3",
         "-std", "c++17", "-arch", "sm_90", "-gencode=arch=compute_90,code=sm_90",
         "-Xcompiler", "-Wall", "-lm", "-l", "pthread", "-lineinfo", "a.cu", "b.cpp",
         "--backend", "emu", "--check"], ("--backend",), ("--check",))
    assert args == ["-Iinc", "-Iinc2", "-Iinc3", "-DN=8", "-DM", "-UX", "-O3", "-std=c++17",
                    "-arch=sm_90", "-gencode=arch=compute_90,code=sm_90", "-Xcompiler", "-Wall",
                    "-lm", "-lpthread", "-lineinfo"]
    assert rest == ["a.cu", "b.cpp", "--backend", "emu", "--check"]
    with pytest.raises(nvcc_args.OptionError, match="-rdc=true is not an option"):
        nvcc_args.split(["-rdc=true", "a.cu"])


def test_emu_takes_nvccs_options_and_refuses_a_library_it_lacks():
    defines, includes, other = programs.emu_options(
        ["-DN=8", "-Iinc", "-O2", "-Xcompiler", "-Wall,-DX=1", "-lcudart", "-lm", "-lineinfo",
         "-arch=sm_90"])
    assert defines == ["-DN=8", "-DX=1"] and includes == ["-Iinc"]
    assert other == ["-O2", "-Wall", "-lm"]
    with pytest.raises(ValueError, match="-lcublas links a library the emulator does not have"):
        programs.emu_options(["-lcublas"])
    with pytest.raises(ValueError, match="-Xcompiler -shared is not taken"):
        programs.emu_options(["-Xcompiler", "-shared"])


def test_cli_refuses_an_option_it_does_not_take(tmp_path):
    env = dict(os.environ, PYTHONPATH=pythonpath(ROOT))
    done = subprocess.run([sys.executable, "-m", "tiledmm", "run", "--ptxas-options=-v",
                           "x.cu"], capture_output=True, timeout=60, env=env)
    assert done.returncode == 2
    assert b"--ptxas-options=-v is not an option tiledmm takes" in done.stderr


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_a_makefile_builds_and_runs_with_tiledmm_nvcc(tmp_path):
    project = tmp_path / "project"
    shutil.copytree(os.path.join(HERE, "programs", "makefile_project"), project)
    env = dict(os.environ, PYTHONPATH=pythonpath(ROOT),
               TILEDMM_BACKEND="emu")
    nvcc = f"{sys.executable} -m tiledmm.programs.nvcc_cli"   # the tiledmm-nvcc script's
    done = subprocess.run(["make", f"NVCC={nvcc}"], cwd=project, capture_output=True,
                          timeout=RUN_S, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (project / "main.o").read_text().startswith("tiledmm-nvcc object")
    n = 50
    done = subprocess.run([str(project / "app"), str(n)], cwd=project, capture_output=True,
                          timeout=RUN_S * 2, env=env)
    assert done.returncode == 0, done.stderr
    scale = 3   # the Makefile's -DSCALE=3
    assert done.stdout.decode() == f"sum {sum(scale * i + 1 for i in range(n)):.1f}\n"


def test_tiledmm_nvcc_refuses_a_host_compilers_object(tmp_path):
    obj = tmp_path / "host.o"
    obj.write_bytes(b"\x7fELF not ours")
    assert nvcc_cli.main([str(obj), "-o", str(tmp_path / "app")]) == 2
    assert not (tmp_path / "app").exists()


def _host_file_program(folder):
    """A program whose .cpp defines its own umin beside a .cu that uses the device's (NVIDIA's
    mergeSort_host.cpp): the files, and the stdout it must print."""
    (folder / "common.h").write_text("#pragma once\nunsigned smallest(unsigned *d, int n);\n")
    (folder / "host.cpp").write_text(
        '#include "common.h"\n'
        "static unsigned umin(unsigned a, unsigned b) { return a < b ? a : b; }\n"
        "unsigned smallest_on_host(const unsigned *h, int n)\n"
        "{ unsigned m = h[0]; for (int i = 1; i < n; ++i) m = umin(m, h[i]); return m; }\n")
    (folder / "main.cu").write_text(r"""
#include <cstdio>
unsigned smallest_on_host(const unsigned *h, int n);
__global__ void smallest_pair(unsigned *x) { x[threadIdx.x] = umin(x[2 * threadIdx.x], x[2 * threadIdx.x + 1]); }
int main()
{
    unsigned h[64], *d;
    for (int i = 0; i < 64; ++i) h[i] = (unsigned)((i * 37) % 61 + 5);
    printf("%u\n", smallest_on_host(h, 64));
    cudaMalloc(&d, sizeof h);
    cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice);
    smallest_pair<<<1, 32>>>(d);
    cudaMemcpy(h, d, 32 * sizeof(unsigned), cudaMemcpyDeviceToHost);
    printf("%u %u\n", h[0], h[31]);
    return 0;
}
""")
    values = [(i * 37) % 61 + 5 for i in range(64)]
    files = [str(folder / "main.cu"), str(folder / "host.cpp")]
    return files, f"{min(values)}\n{min(values[0], values[1])} {min(values[62], values[63])}\n"


def test_a_host_file_of_the_program_sees_no_device_functions(tmp_path):
    """A program's .cpp is host code, as nvcc hands it to the host compiler: CUDA's device
    functions (umin, umax...) are not declared there, so its own umin compiles, while the .cu
    beside it still has the device's."""
    files, expected = _host_file_program(tmp_path)
    r = tm.run(files, backend="emu", timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout == expected


@pytest.mark.skipif(programs._nvcc() is None, reason="nvcc is not installed")
def test_nvcc_builds_a_host_file_of_the_program_as_cpp(tmp_path):
    """On cuda the .cpp goes to nvcc as C++ (`-x c++`), not CUDA: its umin is its own (the H200
    built NVIDIA's mergeSort through tm.run only so); run where there is a GPU."""
    files, expected = _host_file_program(tmp_path)
    main, host = (open(f).read() for f in files)
    image, meta, _origin = programs.build(main, "main.cu", "cuda", source_dir=str(tmp_path),
                                          extra_sources=[(host, "host.cpp", str(tmp_path))])
    assert image[:4] == b"\x7fELF"
    assert [ln["kernel"] for ln in meta["launches"]] == ["smallest_pair"]
    if HAVE_GPU:
        r = tm.run(files, backend="cuda", timeout=120)
        assert r.returncode == 0, r.stderr
        assert r.stdout == expected
