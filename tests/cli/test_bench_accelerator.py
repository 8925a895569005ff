"""``jaxfeed bench accelerator``: the chip table, the MFU's FLOPs source, the flags; registered by
name and left out of ``all`` (its shapes are an accelerator's)."""

import pytest

from jaxfeed.bench import accelerator as A
from jaxfeed.bench.runner import BENCHES


@pytest.mark.parametrize(
    ("kind", "peak"),
    [("TPU v5 lite", 197), ("TPU v5p", 459), ("TPU v4", 275), ("TPU v6 lite", 918),
     ("NVIDIA H100 80GB HBM3", 989), ("NVIDIA A100-SXM4-40GB", 312), ("cpu", None)],
)  # fmt: skip
def test_chip_peaks(kind, peak):
    assert A.Chip.of_kind(kind).peak_tflops == peak


def test_mfu_uses_xla_flops_unless_missing_or_far_below_the_formula():
    chip = A.Chip.of_kind("TPU v5 lite")
    kw = {"chip": chip, "compile_s": 1.0, "step_s": 0.1, "items": 10, "unit": "tokens"}
    xla = A.row("c", "device", flops=(2e12, 1.9e12), **kw)
    assert xla["flops"] == "xla" and xla["mfu"] == pytest.approx(2e12 / 0.1 / 197e12)
    scanned = A.row("c", "device", flops=(0.2e12, 1.9e12), **kw)  # a loop body counted once
    assert scanned["flops"] == "6N" and scanned["tflops_per_step"] == pytest.approx(1.9)
    assert (
        A.row("c", "device", flops=(None, 1e12), **{**kw, "chip": A.Chip.of_kind("cpu")})["mfu"]
        is None
    )


def test_formula_counts_six_n_and_attention():
    assert A.formula_flops(10, 4, layers=2, length=3, hidden=5) == 6 * 10 * 4 + 12 * 2 * 3 * 5 * 4


def test_quick_flags_and_refusals():
    args = A.parse_args(["--quick", "--cases", "bert"])
    assert args.cases == ["bert"] and args.bert_shapes == "4x32" and "fit" not in args.modes
    assert A.parse_args(["--quick", "--steps", "7"]).steps == 7  # given flags win
    with pytest.raises(SystemExit):
        A.parse_args(["--cases", "resnet"])


def test_registered_by_name_not_in_all():
    assert BENCHES["accelerator"].module == "accelerator"
    assert not BENCHES["accelerator"].in_all
