"""Text: tokenization rows/s, and real tokens/s delivered as ``jax.Array`` batches (padding,
bucketing, packing), against Hugging Face and Grain.

The corpus is generated: ``--rows`` texts (100,000 by default) of Zipf-distributed pseudo-words,
their lengths log-normal (median about 150 tokens) clipped to 8..2,048; a byte-level BPE of 8,000
tokens is trained on 2,000 of them (not timed). Everyone uses that one ``tokenizers`` tokenizer.

(a) Tokenization, rows/s: ``jaxfeed.data.text.tokenize`` against ``datasets.Dataset.map(batched=True)``
calling the same tokenizer's ``encode_batch``, and through ``transformers``'
``PreTrainedTokenizerFast`` (the usual way), all truncating at 2,048.

(b) Batches of 64 rows, shuffled, each made a ``jax.Array`` and waited for: real (non-pad)
tokens/s, the pad fraction and the number of distinct batch shapes over one epoch, for jaxfeed
padding to the longest row, to 4 lengths (chosen for the corpus by
``jaxfeed.loading.padding.choose_lengths``), bucketing with the 4 lengths, to the longest row and to
multiples of 128, and packing at 512 (long rows split); against ``transformers``' ``DataCollatorWithPadding`` through a PyTorch
``DataLoader`` (0 workers, numpy tensors, then ``jax.device_put``) and Grain's
``FirstFitPackIterDataset`` at 512 (rows pre-split to 512, not timed, as Grain requires).

Run: ``python benchmarks/text.py [--rows N] [--repeats R]`` (peers: ``pip install -e '.[bench]'``).
Writes ``benchmarks/results/text.json``.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Iterable

import jax
import numpy as np

from jaxfeed import DataLoader, Dataset, Packing, Padding
from jaxfeed.bench._common import machine, median_seconds, save_json
from jaxfeed.loading.padding import choose_lengths
from jaxfeed.text import tokenize, train_tokenizer

BATCH = 64
MAX_TOKENS = 2048
PACK = 512


def corpus(rows: int, seed: int = 0) -> list[str]:
    """``rows`` texts of pseudo-words; word counts log-normal, clipped to 8..2,048."""
    rng = np.random.default_rng(seed)
    letters = np.array(list("etaoinshrdlucmfwypvbgkjqxz"))
    vocab = [
        "".join(rng.choice(letters, size=int(k), p=None)) for k in rng.integers(2, 9, size=6000)
    ]
    weights = 1.0 / np.arange(1, len(vocab) + 1)
    weights /= weights.sum()
    lengths = np.clip(rng.lognormal(mean=5.0, sigma=1.0, size=rows), 8, MAX_TOKENS).astype(int)
    words = rng.choice(len(vocab), size=int(lengths.sum()), p=weights)
    ends = np.cumsum(lengths)
    starts = ends - lengths
    return [
        " ".join(map(vocab.__getitem__, words[a:b].tolist()))
        for a, b in zip(starts.tolist(), ends.tolist(), strict=True)
    ]


def epoch_stats(batches: Iterable, ids_key: str, real: Callable[[dict], int]) -> dict:
    """One pass: seconds, real tokens, elements of the id arrays, distinct shapes."""
    start = time.perf_counter()
    tokens = elements = 0
    shapes = set()
    for batch in batches:
        jax.block_until_ready(batch[ids_key])
        tokens += real(batch)
        elements += int(np.prod(batch[ids_key].shape))
        shapes.add(tuple(batch[ids_key].shape))
    seconds = time.perf_counter() - start
    return {
        "seconds": seconds,
        "tokens": tokens,
        "tokens_per_s": tokens / seconds,
        "pad_fraction": 1 - tokens / max(elements, 1),
        "shapes": len(shapes),
    }


def median_stats(make: Callable[[], Iterable], ids_key: str, real: Callable, repeats: int) -> dict:
    runs = [epoch_stats(make(), ids_key, real) for _ in range(repeats)]
    best = sorted(runs, key=lambda r: r["tokens_per_s"])[len(runs) // 2]
    return best


def mask_tokens(batch: dict) -> int:
    return int(np.asarray(batch["attention_mask"]).sum())


def segment_tokens(key: str) -> Callable[[dict], int]:
    return lambda batch: int((np.asarray(batch[key]) > 0).sum())


def _add_tok(results: dict, rows: int, name: str, seconds: float) -> None:
    """Record and print one tokenization row."""
    results["tokenize"].append({"name": name, "rows_per_s": rows / seconds})
    print(f"  tokenize  {name:<52}{rows / seconds:>12,.0f} rows/s", flush=True)


def _add_load(results: dict, name: str, stats: dict) -> None:
    """Record and print one loading row."""
    results["load"].append({"name": name, **stats})
    print(
        f"  load      {name:<52}{stats['tokens_per_s']:>12,.0f} tokens/s  pad "
        f"{stats['pad_fraction']:6.1%}  shapes {stats['shapes']:>4}",
        flush=True,
    )


def _tokenize_ours(ds: Dataset, tok, rows: int, repeats: int, results: dict) -> Dataset:
    """(a) jaxfeed's tokenization, timed; prints the token lengths; returns the tokenized rows."""
    tokenized = None

    def ours() -> None:
        nonlocal tokenized
        tokenized = tokenize(ds, tok, "text", max_length=MAX_TOKENS, remove_columns=True)

    _add_tok(results, rows, "jaxfeed.data.text.tokenize", median_seconds(ours, repeats))
    return tokenized


def _tokenize_peers(texts: list[str], tok, rows: int, repeats: int, results: dict):
    """(a) Hugging Face's tokenization, timed; returns its tokenized rows (None if skipped)."""
    hf_tokenized = None
    try:
        import datasets

        hf = datasets.Dataset.from_dict({"text": texts})
        truncating = type(tok).from_str(tok.to_str())
        truncating.enable_truncation(MAX_TOKENS)

        def encode(batch: dict) -> dict:
            out = truncating.encode_batch_fast(batch["text"])
            return {
                "input_ids": [e.ids for e in out],
                "attention_mask": [e.attention_mask for e in out],
            }

        def hf_map() -> None:
            nonlocal hf_tokenized
            hf_tokenized = hf.map(
                encode, batched=True, remove_columns=["text"], keep_in_memory=True
            )

        _add_tok(
            results,
            rows,
            f"HF datasets {datasets.__version__} map + encode_batch",
            median_seconds(hf_map, repeats),
        )
        try:
            import transformers

            fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>")

            def hf_fast() -> None:
                hf.map(
                    lambda b: fast(b["text"], truncation=True, max_length=MAX_TOKENS),
                    batched=True,
                    remove_columns=["text"],
                    keep_in_memory=True,
                )

            _add_tok(
                results,
                rows,
                f"HF datasets map + transformers {transformers.__version__} fast tokenizer",
                median_seconds(hf_fast, repeats),
            )
        except ImportError:
            print("  transformers not installed: skipped")
    except ImportError:
        print("  HF datasets not installed: skipped")
    return hf_tokenized


def _load_ours(tokenized: Dataset, four: list[int], repeats: int, results: dict) -> None:
    """(b) jaxfeed's loaders: padding, bucketing and packing."""
    cases = {
        "jaxfeed padding to longest": dict(padding=Padding()),
        f"jaxfeed 4 lengths {four}": dict(padding=Padding(lengths=four)),
        "jaxfeed bucketing + 4 lengths": dict(bucket_by_length=True, padding=Padding(lengths=four)),
        "jaxfeed bucketing, to longest": dict(bucket_by_length=True),
        "jaxfeed bucketing + multiple_of=128": dict(
            bucket_by_length=True, padding=Padding(multiple_of=128)
        ),
    }
    for name, options in cases.items():
        loader = DataLoader(tokenized, BATCH, shuffle=True, seed=0, **options)
        _add_load(
            results, name, median_stats(lambda lo=loader: lo, "input_ids", mask_tokens, repeats)
        )
        loader.close()
    packed = DataLoader(
        tokenized.remove_columns(["attention_mask"]),
        BATCH,
        shuffle=True,
        seed=0,
        packing=Packing(length=PACK, long_rows="split"),
    )
    _add_load(
        results,
        f"jaxfeed packing {PACK}",
        median_stats(lambda: packed, "input_ids", segment_tokens("segment_ids"), repeats),
    )
    packed.close()


def _load_hf(hf_tokenized, tok, repeats: int, results: dict) -> None:
    """(b) ``transformers``' collator through a PyTorch ``DataLoader``."""
    try:
        import torch.utils.data
        import transformers

        fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>")
        collator = transformers.DataCollatorWithPadding(fast, return_tensors="np")
        torch_loader = torch.utils.data.DataLoader(
            hf_tokenized, batch_size=BATCH, shuffle=True, collate_fn=collator
        )

        def hf_batches() -> Iterable[dict]:
            for batch in torch_loader:
                yield {k: jax.device_put(v) for k, v in batch.items()}

        _add_load(
            results,
            "HF DataCollatorWithPadding + torch DataLoader",
            median_stats(hf_batches, "input_ids", mask_tokens, repeats),
        )
    except ImportError:
        print("  torch or transformers not installed: skipped")


def _load_grain(tokenized: Dataset, repeats: int, results: dict) -> None:
    """(b) Grain's ``FirstFitPackIterDataset`` over rows pre-split to ``PACK``."""
    try:
        import grain

        ids = tokenized.with_format("arrow")["input_ids"].to_pylist()
        pieces = [
            {"input_ids": np.asarray(row[i : i + PACK], dtype=np.int32)}
            for row in ids
            for i in range(0, len(row), PACK)
        ]

        def grain_batches() -> Iterable[dict]:
            source = grain.MapDataset.source(pieces).shuffle(seed=0).to_iter_dataset()
            packed_ds = grain.experimental.FirstFitPackIterDataset(
                source, length_struct={"input_ids": PACK}, num_packing_bins=2 * BATCH
            ).batch(BATCH)
            for batch in packed_ds:
                yield {k: jax.device_put(v) for k, v in batch.items()}

        _add_load(
            results,
            f"Grain {grain.__version__ if hasattr(grain, '__version__') else ''} FirstFitPack {PACK}",
            median_stats(
                grain_batches, "input_ids", segment_tokens("input_ids_segment_ids"), repeats
            ),
        )
    except ImportError:
        print("  grain not installed: skipped")


def _print_tables(results: dict) -> None:
    """The closing tables: ratios to the best peer."""
    peers = [r for r in results["load"] if not r["name"].startswith("jaxfeed")]
    best = max((r["tokens_per_s"] for r in peers), default=float("nan"))
    print(f"\nReal tokens/s, ratio to the best peer ({best:,.0f} tokens/s):")
    print(f"{'implementation':<56}{'tokens/s':>14}{'x best peer':>13}{'pad':>8}{'shapes':>8}")
    for r in results["load"]:
        print(
            f"{r['name']:<56}{r['tokens_per_s']:>14,.0f}{r['tokens_per_s'] / best:>12.2f}x"
            f"{r['pad_fraction']:>8.1%}{r['shapes']:>8}"
        )
    tok_best = max((r["rows_per_s"] for r in results["tokenize"][1:]), default=float("nan"))
    print(f"\nTokenization rows/s, ratio to the best peer ({tok_best:,.0f} rows/s):")
    for r in results["tokenize"]:
        print(f"{r['name']:<70}{r['rows_per_s']:>12,.0f}{r['rows_per_s'] / tok_best:>8.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    rows, repeats = args.rows, args.repeats

    texts = corpus(rows)
    ds = Dataset.from_dict({"text": texts})
    tok = train_tokenizer(ds.select(range(min(rows, 2000))), "text", vocab_size=8000, kind="bpe")
    print(f"Text, {rows:,} generated rows, batch {BATCH} ({machine()}, jax {jax.__version__})")
    results: dict = {"rows": rows, "tokenize": [], "load": []}

    # ------------------------------------------------------------------ (a) tokenization
    tokenized = _tokenize_ours(ds, tok, rows, repeats, results)
    lengths = np.array([len(r) for r in tokenized.with_format("arrow")["input_ids"].to_pylist()])
    print(
        f"  token lengths: median {int(np.median(lengths))}, mean {lengths.mean():.0f}, "
        f"max {lengths.max()}, total {lengths.sum():,}"
    )
    hf_tokenized = _tokenize_peers(texts, tok, rows, repeats, results)

    # ------------------------------------------------------------------ (b) batches
    four = choose_lengths(lengths, count=4, multiple_of=64)
    a = np.array(four)
    floor = 1 - lengths.sum() / a[np.searchsorted(a, lengths)].sum()
    print(
        f"  4 lengths {four} (jaxfeed.loading.padding.choose_lengths): padding each row alone to them "
        f"already wastes {floor:.1%}"
    )
    _load_ours(tokenized, four, repeats, results)
    if hf_tokenized is not None:
        _load_hf(hf_tokenized, tok, repeats, results)
    _load_grain(tokenized, repeats, results)

    _print_tables(results)
    path = save_json("text", results)
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
