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
