"""`python -m tiledmm bench` and its functions run and report consistent rows (on emu here;
speed targets are judged on a GPU from the same code, never in tests)."""
import csv
import json

import pytest

import tiledmm as tm
from tiledmm import __main__ as cli
from tiledmm import bench


def test_bench_matmul_rows(backend):
    rows = bench.bench_matmul(sizes=[(33, 17, 9)], kernels=["naive", "tiled"], backend=backend,
                              warmup=0, repeat=1)
    assert [r["kernel"] for r in rows] == ["naive"] * 3 + ["tiled"] * 3
    for r in rows:
        assert r["ms"] > 0 and r["tflops"] == pytest.approx(2 * 33 * 17 * 9 / (r["ms"] * 1e9))
        assert r["max_rel_error"] < 1e-5
        assert (r["pct_cublas"] is None) == (backend != "cuda")
    assert "TFLOP/s" in bench.format_table(rows)


def test_bench_reduce_rows(backend):
    rows = bench.bench_reduce(sizes=[1000], backend=backend, warmup=0, repeat=1)
    assert rows and {r["kernel"] for r in rows} >= {"shuffle"}
    for r in rows:
        assert r["gbps"] > 0 and r["copy_gbps"] > 0
        assert r["pct_copy"] == pytest.approx(100 * r["gbps"] / r["copy_gbps"])


def test_bench_end_to_end_rows(backend):
    rows = bench.bench_end_to_end(sizes=[64], transfer_mib=(1,), backend=backend, repeat=1)
    kinds = [r["kind"] for r in rows]
    assert kinds == ["transfer", "transfer", "transfer", "matmul"]
    assert [r["what"] for r in rows[:3]] == ["h2d numpy 1 MiB, same arrays",
                                             "h2d numpy 1 MiB, new arrays", "d2h numpy 1 MiB"]
    assert all(r.get("gbps", 1) > 0 and r.get("ref_gbps", 1) > 0 for r in rows)
    assert rows[3]["speedup"] > 0
    assert "numpy.matmul" in bench.format_end_to_end(rows)


def test_cli_bench_saves_csv_and_json(tmp_path, capsys):
    csv_path, json_path = tmp_path / "b.csv", tmp_path / "b.json"
    cli.main(["--backend", "emu", "bench", "--family", "matmul", "--sizes", "16",
              "--kernels", "tiled", "--csv", str(csv_path), "--json", str(json_path)])
    out = capsys.readouterr().out
    assert "tiled" in out and "16x16x16" in out
    rows = json.loads(json_path.read_text())
    assert len(rows) == 3 and csv_path.read_text().startswith("kernel,")
    # the device is part of the data, so tables made from the file can say where it ran
    with open(csv_path, newline="") as f:
        saved = list(csv.DictReader(f))
    assert {r["device"] for r in saved} == {tm.device_info(backend="emu")["name"]}


def test_cli_info_and_demo(capsys):
    cli.main(["--backend", "emu", "info"])
    assert "warp_size" in capsys.readouterr().out
    cli.main(["--backend", "emu", "demo", "--size", "40"])
    out = capsys.readouterr().out
    assert "tiled tile=32" in out and "ok" in out


def _cli_refusal(capsys, argv):
    """Run the CLI expecting argparse's refusal; (exit code, stderr)."""
    with pytest.raises(SystemExit) as info:
        cli.main(argv)
    return info.value.code, capsys.readouterr().err


def test_cli_bench_unknown_kernel_exits_2_naming_the_choices(capsys):
    code, err = _cli_refusal(capsys, ["--backend", "emu", "bench", "--family", "matmul",
                                      "--kernels", "tilde"])
    assert code == 2
    assert "unknown kernel 'tilde'" in err and "did you mean 'tiled'?" in err
    assert all(k.name in err for k in tm.kernels("matmul"))


def test_cli_bench_refuses_cuda_only_kernels_on_emu(capsys):
    code, err = _cli_refusal(capsys, ["--backend", "emu", "bench", "--family", "matmul",
                                      "--kernels", "cublas"])
    assert code == 2 and "cuda backend only" in err


@pytest.mark.parametrize("size", ["0", "-3"])
def test_cli_bench_refuses_sizes_below_one(capsys, size):
    code, err = _cli_refusal(capsys, ["--backend", "emu", "bench", "--family", "matmul",
                                      "--sizes", size])
    assert code == 2 and "sizes must be 1 or more" in err and "Traceback" not in err


@pytest.mark.parametrize("sizes", [[0], [(4, 0, 4)], [2.5]])
def test_bench_functions_refuse_sizes_below_one(sizes):
    with pytest.raises(ValueError, match="sizes must be integers of 1 or more"):
        bench.bench_matmul(sizes=sizes, backend="emu")
    if not isinstance(sizes[0], tuple):
        with pytest.raises(ValueError, match="sizes must be integers of 1 or more"):
            bench.bench_reduce(sizes=sizes, backend="emu")


@pytest.mark.parametrize("family", [[], ["--family", "all"], ["--family", "none"]])
def test_cli_bench_sizes_need_one_family(capsys, family):
    code, err = _cli_refusal(capsys, ["--backend", "emu", "bench", *family, "--sizes", "64"])
    assert code == 2 and "--sizes needs --family matmul" in err


def test_cli_bench_help_says_what_sizes_mean(capsys):
    with pytest.raises(SystemExit):
        cli.main(["bench", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "square sizes (with --family matmul) or lengths (with --family reduce)" in help_text


def test_reduce_table_shows_emulator_rates():
    """An emulator's GB/s and % of a copy are tiny: shown with significant digits, not as 0."""
    rows = [dict(kernel="shuffle", params="block=256", n=4096, ms=12.5, gbps=0.00131,
                 copy_gbps=40.0, pct_copy=0.00328, rel_error=1e-9),
            dict(kernel="shuffle", params="block=512", n=1 << 28, ms=0.35, gbps=3046.2,
                 copy_gbps=2990.0, pct_copy=101.9, rel_error=1e-9)]
    lines = bench.format_table(rows, "reduce").splitlines()
    assert lines[1].split()[4:6] == ["0.00131", "0.00328"]
    assert lines[2].split()[4:6] == ["3046", "102"]


def test_cli_info_columns_line_up(capsys):
    """Long kernel names (interleaved_bank_conflicts) do not push the other columns."""
    cli.main(["--backend", "emu", "info"])
    out = capsys.readouterr().out
    lines = out.split("\n\n", 1)[1].splitlines()
    header = lines[0]
    assert header.startswith("kernel")
    names = [k.name for k in tm.kernels()]
    rows = [line for line in lines if line.split() and line.split()[0] in names]
    assert len(rows) == len(names)
    for column in ("family", "dtypes", "parameters"):
        at = header.index(column)
        assert all(line[at - 1] == " " and line[at] != " " for line in rows), column


def test_cli_demo_on_emu_explains_the_timings(capsys):
    cli.main(["--backend", "emu", "demo", "--size", "40"])
    out = capsys.readouterr().out
    assert cli.EMU_DEMO_NOTE in out and "CPU time" in cli.EMU_DEMO_NOTE
    # The first screen teaches the lecture's way (issue 28): its last column, the H100 time
    # predicted from traffic counted at 1024^3, has tiling win although CPU time says otherwise.
    assert f"H100 ms predicted ({cli.DEMO_COUNT_SIZE}^3)" in out
    predicted = {}
    for line in out.splitlines():
        cells = line[20:].split()
        if line.startswith(("naive", "tiled")) and cells[-1] == "ok":
            predicted[line[:20].strip()] = float(cells[-2])
    assert set(predicted) == {"naive", "naive_uncoalesced", "tiled tile=8", "tiled tile=16",
                              "tiled tile=32"}
    assert predicted["tiled tile=32"] < predicted["tiled tile=16"] < predicted["naive"]
    assert predicted["naive"] * 5 < predicted["naive_uncoalesced"]


def test_readme_bench_command_line_is_accepted(monkeypatch):
    """README's bench line passes the CLI's checks (with --sizes it names its family)."""
    import os
    import re
    with open(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                           "README.md"), encoding="utf-8") as f:
        line = re.search(r"`python -m tiledmm bench ([^`]*)`", f.read()).group(1)
    seen = []
    monkeypatch.setattr(cli, "cmd_bench", seen.append)   # parse and check, do not run
    assert cli.main(["--backend", "emu", "bench"] + re.sub(r"[\[\]]", "", line).split()) == 0
    assert seen[0].family == "matmul" and seen[0].sizes == [1024, 4096]
