"""jaxfeed bench --plot: the chart of a results file, and the flag on the command."""

import json

import pytest
from PIL import Image

from jaxfeed.bench.plot import bars, plot_results
from jaxfeed.cli import build_parser


def test_bars_read_the_rows_the_benchmarks_write():
    payload = {
        "machine": "x86_64, 2 cores",
        "results": [
            {"case": "save", "name": "jaxfeed CheckpointManager", "ms": 12.5},
            {"case": "save", "name": "raw Orbax", "ms": 10.0},
            {"case": "restore", "name": "jaxfeed CheckpointManager", "ms": float("nan")},
            {"case": "x", "name": "no measure"},
        ],
    }
    assert bars(payload) == [
        ("save", "jaxfeed CheckpointManager", 12.5, "ms (lower is better)"),
        ("save", "raw Orbax", 10.0, "ms (lower is better)"),
    ]
    assert bars({"medians": {"jaxfeed": 891.0, "grain": 315.0}}) == [
        ("", "jaxfeed", 891.0, "rows/s"),
        ("", "grain", 315.0, "rows/s"),
    ]
    assert bars({"settings": {}}) == []


def test_plot_results_writes_a_png_per_results_file(tmp_path):
    results = tmp_path / "formatting.json"
    results.write_text(json.dumps({"machine": "m", "results": [
        {"case": "sequential", "name": "jaxfeed", "rows_per_s": 875003.0},
        {"case": "sequential", "name": "HF datasets 5.2.0", "rows_per_s": 147892.0},
        {"case": "random", "name": "jaxfeed", "rows_per_s": 675289.0},
    ]}))  # fmt: skip
    chart = plot_results(results, tmp_path / "charts", "jaxfeed bench formatting --plot charts")
    assert chart == tmp_path / "charts" / "formatting.png"
    with Image.open(chart) as image:
        assert image.format == "PNG" and image.width > 500
    empty = tmp_path / "sharding.json"
    empty.write_text(json.dumps({"rows": [{"mode": 1}]}))
    assert plot_results(empty, tmp_path / "charts", "c") is None


def test_bench_takes_plot_dir():
    args = build_parser().parse_args(["bench", "formatting", "--quick", "--plot", "charts"])
    assert (args.which, args.quick, args.plot) == ("formatting", True, "charts")
    with pytest.raises(SystemExit):
        build_parser().parse_args(["bench", "--plot"])
