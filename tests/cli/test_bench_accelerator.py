"""``jaxfeed bench accelerator``: the chip table, the MFU's FLOPs source, the flags; registered by
name and left out of ``all`` (its shapes are an accelerator's)."""

import importlib.util
import re
from pathlib import Path

import pytest

from jaxfeed.bench import accelerator as A
from jaxfeed.bench.runner import BENCHES
from jaxfeed.models import attention


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
    assert args.attention_dropout == "fused" and args.dropout_bits is None  # the fused dropout
    old = A.parse_args(["--attention-dropout", "xla", "--dropout-bits", "hash"])  # for comparison
    assert (old.attention_dropout, old.dropout_bits) == ("xla", "hash")
    with pytest.raises(SystemExit):
        A.parse_args(["--cases", "resnet"])


def test_registered_by_name_not_in_all():
    assert BENCHES["accelerator"].module == "accelerator"
    assert not BENCHES["accelerator"].in_all


def _count(tree):
    import jax
    import numpy as np

    return sum(int(np.prod(x.shape)) for x in jax.tree.leaves(tree))


@pytest.mark.parametrize("case", ["bert", "vit", "llama"])
@pytest.mark.parametrize("scan", [True, False])
def test_reference_has_the_models_shapes(case, scan):
    """The plain JAX step's parameters are as many as jaxfeed's model of the case (quick sizes),
    stacked [layers, ...] when scanned, a list of layers when not."""
    import jax
    import jax.numpy as jnp
    from flax import nnx

    from jaxfeed.bench import accelerator_reference as plain

    config = dict(A.QUICK[case])
    if case == "vit":
        from jaxfeed.models.hub import vit

        model = nnx.eval_shape(lambda: vit.FAMILY.build({"model_type": "vit", **config},
                               task="image-classification", num_labels=1000, dtype=None,
                               param_dtype=jnp.float32, rngs=nnx.Rngs(0)))  # fmt: skip
    elif case == "bert":
        from jaxfeed.models.hub import bert

        model = nnx.eval_shape(lambda: bert.build(config, task="sequence-classification",
                               num_labels=2, dtype=None, param_dtype=jnp.float32,
                               rngs=nnx.Rngs(0)))  # fmt: skip
    else:
        config["num_hidden_layers"] = 2
        args = A.parse_args(["--quick"])
        model = nnx.eval_shape(lambda: A.llama_model(args, 2))
    init, _ = getattr(plain, case)(config, scan=scan, remat=False)
    params = jax.eval_shape(init, jax.random.key(0))
    assert _count(params) == A.param_count(model)
    assert isinstance(params["layers"], dict if scan else list)


def test_reference_mode_gives_each_row_its_ratio_and_profile_writes_the_step(monkeypatch, tmp_path):
    monkeypatch.setattr(A, "save_json", lambda name, payload: None)
    rows = A.main(["--quick", "--cases", "bert", "--modes", "reference,device", "--steps", "1",
                   "--repeats", "1", "--profile", str(tmp_path)])  # fmt: skip
    modes = {r["mode"]: r for r in rows}
    assert set(modes) == {"reference", "device"}
    ratio = modes["reference"]["step_ms"] / modes["device"]["step_ms"]
    assert modes["device"]["vs_reference"] == pytest.approx(ratio)
    folder = tmp_path / "bert-4x32"  # the device step's HLO and its trace, beside each other
    assert "HloModule" in (folder / "step.hlo.txt").read_text()
    assert (folder / "perfetto_trace.json.gz").stat().st_size > 0
    # tools/tpu/trace_summary.py reads it (on a CPU the thunks that name their HLO op)
    tool = Path(__file__).parents[2] / "tools" / "tpu" / "trace_summary.py"
    spec = importlib.util.spec_from_file_location("trace_summary", tool)
    summary = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(summary)
    report = summary.summarize(folder, steps=3, top=5)
    total = float(re.search(r"device op time per step: ([\d.]+) ms", report).group(1))
    assert total > 0 and "  matmul " in report and "slowest ops:" in report


def test_profile_writes_the_decode_program_and_its_trace(monkeypatch, tmp_path):
    """``--cases generate --profile DIR``: the decode program's HLO and a trace of one decode
    call (its tokens' steps) per batch size, beside each other. The attention settings the
    flags set hold for the run only: the caller's process keeps its own."""
    names = ("LOGITS_IN_FLOAT32", "FLASH_BLOCK", "FUSED_KERNEL", "FUSED_DROPOUT", "DROPOUT_BITS",
             "SHORT_KERNEL")  # fmt: skip
    before = {name: getattr(attention, name) for name in names}
    monkeypatch.setattr(A, "save_json", lambda name, payload: None)
    rows = A.main(["--quick", "--cases", "generate", "--modes", "device", "--gen-batches", "1",
                   "--repeats", "1", "--profile", str(tmp_path), "--flash-block", "256",
                   "--fused-kernel", "flash", "--attention-dropout", "xla",
                   "--dropout-bits", "hash", "--no-short-kernel"])  # fmt: skip
    assert {name: getattr(attention, name) for name in names} == before
    assert [r["mode"] for r in rows] == ["greedy b=1"]
    folder = tmp_path / "generate-b1"
    assert "while" in (folder / "step.hlo.txt").read_text()  # the decode loop
    assert (folder / "perfetto_trace.json.gz").stat().st_size > 0
