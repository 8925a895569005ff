"""Fuzz every file format jaxfeed reads: flip bytes, truncate, empty (seeded, bounded).

Each mutated copy is loaded in one child process (so a crash or a hang is caught and named, not
fatal to the suite) and fully decoded. Every case must end in one of:

* a clear exception: a ``ValueError`` or ``OSError`` whose message names the mutated file's folder
  (or, for an image stored inside a saved dataset, the column and row);
* a load equal to the original (the byte did not matter, e.g. a gzip timestamp);
* for formats that carry no checksum (CSV, JSON, plain IDX, CIFAR, JPEG, WAV, Arrow, Parquet,
  saved datasets loaded without ``verify``) a different but well-formed value, which no reader can
  tell from the real one; formats with checksums (saved datasets with ``verify=True``, gzip, PNG,
  checkpoints, exports) must never load a different value (for a checkpoint: different arrays;
  for an export: different outputs).
"""

import io
import json
import os
import random
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import PIL.Image
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import soundfile

from jaxfeed import ClassLabel, Dataset, DatasetDict, Features, Image

SEED = int(os.environ.get("JAXFEED_FUZZ_SEED", 17))
SCALE = int(os.environ.get("JAXFEED_FUZZ_SCALE", 1))  # e.g. 20 for a deeper run by hand
FLIPS, CUTS = 8 * SCALE, 3 * SCALE  # per file, plus one emptied copy
CASE_TIMEOUT_S = 20

CHILD = textwrap.dedent(
    """
    import faulthandler, hashlib, json, sys
    import numpy as np
    from jaxfeed import load_dataset, load_from_disk

    def digest(value):
        if isinstance(value, np.ndarray):
            return hashlib.sha256(value.tobytes() + str(value.dtype).encode()).hexdigest()
        if hasattr(value, "items"):
            return {k: digest(v) for k, v in sorted(value.items())}
        rows = value.with_format("numpy")[:]
        parts = []
        for name in sorted(rows):
            column = rows[name]
            items = column if isinstance(column, list) else [column]
            for item in items:
                if isinstance(item, dict):
                    item = {k: np.asarray(v).tolist() for k, v in sorted(item.items()) if k != "path"}
                parts.append(repr(np.asarray(item).tolist() if not isinstance(item, dict) else item))
        parts.append(repr(value.features))
        return hashlib.sha256("|".join(parts).encode()).hexdigest()

    def load(kind, path):
        if kind == "file":
            return load_dataset(path)
        if kind.startswith("cache:"):  # a damaged cache entry: rebuilt from its source
            import warnings

            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return load_dataset("parquet", data_files=kind[6:], split="train", cache_dir=path)
        if kind in ("mnist", "cifar10", "imagefolder", "audiofolder"):
            return load_dataset(kind, data_dir=path)
        if kind == "disk-verify":
            return load_from_disk(path, verify=True)
        if kind == "disk":
            return load_from_disk(path)
        if kind == "checkpoint":
            import jax.numpy as jnp
            from jaxfeed.train.checkpoint import CheckpointManager

            template = {"w": jnp.zeros(300, jnp.float32), "b": jnp.zeros(3, jnp.int32)}
            state = CheckpointManager(path).restore(1, state=template)["state"]
            return {k: np.asarray(v) for k, v in state.items()}
        if kind == "export":
            from jaxfeed import load_exported

            return {"out": np.asarray(load_exported(path)(np.ones((2, 4), np.float32)))}
        raise AssertionError(kind)

    for i, case in enumerate(json.load(open(sys.argv[1]))):
        print("START", i, flush=True)
        faulthandler.dump_traceback_later(CASE_TIMEOUT_S, exit=True)
        try:
            out = {"ok": digest(load(case["kind"], case["path"]))}
        except Exception as err:
            out = {"error": type(err).__name__, "message": str(err),
                   "clear": isinstance(err, (ValueError, OSError))}
        faulthandler.cancel_dump_traceback_later()
        print("RESULT", i, json.dumps(out), flush=True)
    """
).replace("CASE_TIMEOUT_S", str(CASE_TIMEOUT_S))


def png_bytes(array, fmt="PNG"):
    buffer = io.BytesIO()
    PIL.Image.fromarray(array).save(buffer, format=fmt)
    return buffer.getvalue()


def idx(array):
    dims = b"".join(int(d).to_bytes(4, "big") for d in array.shape)
    return bytes([0, 0, 0x08, array.ndim]) + dims + array.astype(np.uint8).tobytes()


def build_originals(root):
    """``[(kind, folder, file to mutate, protected)]``: small valid inputs of every format."""
    import gzip

    rng = np.random.default_rng(SEED)
    out = []

    def folder(name):
        path = root / name
        path.mkdir(parents=True)
        return path

    table = pa.table({"a": [1, 2, 3], "b": ["x", "yy", "zzz"], "c": [0.5, 1.5, -2.0]})
    table = table.append_column("label", pa.array([0, 1, 1]))
    feats = Features.from_arrow_schema(table.schema)
    feats["label"] = ClassLabel(names=["no", "yes"])
    with_meta = table.replace_schema_metadata(feats.arrow_schema.metadata)
    f = folder("parquet")
    pq.write_table(with_meta, f / "train.parquet")
    out.append(("file", f, "train.parquet", False))
    f = folder("arrow")
    with pa.OSFile(str(f / "train.arrow"), "wb") as sink, pa.ipc.new_file(sink, table.schema) as w:
        w.write_table(with_meta)
    out.append(("file", f, "train.arrow", False))
    f = folder("csv")
    (f / "train.csv").write_text("a,b,c\n1,x,0.5\n2,yy,1.5\n3,zzz,-2.0\n")
    out.append(("file", f, "train.csv", False))
    f = folder("jsonl")
    (f / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in table.to_pylist()))
    out.append(("file", f, "train.jsonl", False))
    f = folder("json")
    (f / "train.json").write_text(json.dumps(table.to_pylist()))
    out.append(("file", f, "train.json", False))

    for gz in (False, True):
        f = folder("mnist-gz" if gz else "mnist")
        for prefix, n in (("train", 3), ("t10k", 2)):
            for stem, data in (
                (f"{prefix}-images-idx3-ubyte", idx(rng.integers(0, 256, (n, 28, 28)))),
                (f"{prefix}-labels-idx1-ubyte", idx(np.arange(n) % 10)),
            ):
                name = stem + (".gz" if gz else "")
                (f / name).write_bytes(gzip.compress(data, mtime=0) if gz else data)
        out.append(("mnist", f, "train-images-idx3-ubyte" + (".gz" if gz else ""), gz))
        out.append(("mnist", f, "t10k-labels-idx1-ubyte" + (".gz" if gz else ""), gz))

    f = folder("cifar10")
    for name in [f"data_batch_{i}.bin" for i in range(1, 6)] + ["test_batch.bin"]:
        records = np.concatenate([rng.integers(0, 10, (1, 1)), rng.integers(0, 256, (1, 3072))], 1)
        records.astype(np.uint8).tofile(f / name)
    out.append(("cifar10", f, "test_batch.bin", False))

    for fmt, protected in (("PNG", True), ("JPEG", False)):
        f = folder(f"imagefolder-{fmt.lower()}")
        for label in ("cat", "dog"):
            (f / label).mkdir()
            pixels = rng.integers(0, 256, (6, 5, 3), dtype=np.uint8)
            (f / label / f"1.{fmt.lower()}").write_bytes(png_bytes(pixels, fmt))
        out.append(("imagefolder", f, f"cat/1.{fmt.lower()}", protected))
    f = folder("imagefolder-meta")
    for name in ("a.png", "b.png"):
        (f / name).write_bytes(png_bytes(rng.integers(0, 256, (3, 3), dtype=np.uint8)))
    (f / "metadata.csv").write_text("file_name,caption,score\na.png,hello,1\nb.png,world,2\n")
    out.append(("imagefolder", f, "metadata.csv", False))
    f = folder("imagefolder-jsonl")
    for name in ("a.png", "b.png"):
        (f / name).write_bytes(png_bytes(rng.integers(0, 256, (3, 3), dtype=np.uint8)))
    rows = [{"file_name": "a.png", "t": "x", "n": 1}, {"file_name": "b.png", "t": "y", "n": 2}]
    (f / "metadata.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out.append(("imagefolder", f, "metadata.jsonl", False))
    f = folder("audiofolder")
    soundfile.write(f / "a.wav", rng.standard_normal(64).astype(np.float32) / 4, 8000)
    out.append(("audiofolder", f, "a.wav", False))

    ds = Dataset.from_dict(
        {
            "x": rng.standard_normal((4, 3)).astype(np.float32),
            "t": ["a", "bb", "", "dddd"],
            "img": [rng.integers(0, 256, (2, 2, 3), dtype=np.uint8) for _ in range(4)],
            "y": [0, 1, 2, 1],
        },
        features=Features(
            {
                "x": Dataset.from_dict({"x": np.zeros((1, 3), np.float32)}).features["x"],
                "t": Dataset.from_dict({"t": ["a"]}).features["t"],
                "img": Image(),
                "y": ClassLabel(names=["a", "b", "c"]),
            }
        ),
    )
    for kind in ("disk-verify", "disk"):
        f = root / kind
        DatasetDict({"train": ds, "test": ds.select([0, 1])}).save_to_disk(f)
        for name in (
            "train/data-00000-of-00001.arrow",
            "train/state.json",
            "train/dataset_info.json",
            "dataset_dict.json",
        ):
            out.append((kind, f, name, kind == "disk-verify"))
    out += build_checkpoint(root / "checkpoint")
    out += build_export(root / "export")
    f = folder("readme")  # a dataset card whose YAML header names the data files
    (f / "data.csv").write_text("a,b\n1,x\n2,y\n")
    (f / "README.md").write_text(
        "---\nconfigs:\n- config_name: default\n  data_files:\n  - split: train\n"
        "    path: data.csv\n---\n# a card\n"
    )
    out.append(("file", f, "README.md", False))
    out += build_cache(root)
    return out


def build_cache(root):
    """A cache entry of a Parquet file (data size, CRC-32 and digest recorded): every damage is
    detected and the entry rebuilt from the source, so a load always equals the original."""
    from jaxfeed import load_dataset

    source = root / "cache-source.parquet"
    pq.write_table(pa.table({"a": [1, 2, 3], "s": ["x", "yy", "zzz"]}), source)
    cache = root / "cache"
    load_dataset("parquet", data_files=str(source), split="train", cache_dir=str(cache))
    (entry,) = (cache / "datasets").iterdir()
    kind = f"cache:{source}"
    return [
        (kind, cache, f"datasets/{entry.name}/{name}", True) for name in ("data.arrow", "info.json")
    ]


def build_export(folder):
    """A served model (jaxfeed.export records the SHA-256 of its weights and function)."""
    from flax import nnx

    from jaxfeed.models import MLP
    from jaxfeed.serve.export import export

    export(MLP(3, (4,), hidden=(8,), rngs=nnx.Rngs(SEED)), folder)
    names = ("model.safetensors", "model.stablehlo", "config.json")
    return [("export", folder, name, True) for name in names]


def build_checkpoint(folder):
    """A checkpoint of two arrays (jaxfeed records their SHA-256 and checks it on restore)."""
    import jax
    import jax.numpy as jnp

    from jaxfeed.train.checkpoint import CheckpointManager

    state = {"w": jax.random.normal(jax.random.key(SEED), (300,)), "b": jnp.arange(3)}
    with CheckpointManager(folder, async_save=False) as ckpt:
        ckpt.save(1, state)
    step = folder / "1"
    data = [p for p in (step / "state").rglob("*") if p.is_file() and p.parent.name == "d"]
    names = ["meta/metadata", "state/_METADATA", "state/manifest.ocdbt"]
    names.append(str(max(data, key=lambda p: p.stat().st_size).relative_to(folder)))
    return [
        ("checkpoint", folder, name if name.startswith("1/") else f"1/{name}", True)
        for name in names
    ]


def mutations(data: bytes, rnd: random.Random):
    """Seeded variants of ``data``: single bytes flipped, truncated, emptied."""
    for _ in range(FLIPS):
        if data:
            i = rnd.randrange(len(data))
            yield f"flip@{i}", data[:i] + bytes([data[i] ^ rnd.randrange(1, 256)]) + data[i + 1 :]
    for _ in range(CUTS):
        if len(data) > 1:
            n = rnd.randrange(1, len(data))
            yield f"cut@{n}", data[:n]
    yield "empty", b""


HOSTILE_VALUES = [
    None,
    5,
    -1,
    10**30,
    "x" * 100_000,
    [1, 2],
    {"a": 1},
    "[" * 5000,
]


def structured(name: str, data: bytes, rnd: random.Random):
    """Mutations a byte flip rarely makes: hostile values in JSON fields, deep nesting, YAML alias
    bombs, huge declared class counts."""
    deep = "[" * 10_000 + "]" * 10_000
    if name.endswith(".json") and data:
        try:
            doc = json.loads(data)
        except ValueError:
            return
        if isinstance(doc, dict):
            for key in sorted(doc)[:6]:
                value = rnd.choice(HOSTILE_VALUES)
                yield f"field:{key}={str(value)[:12]}", json.dumps({**doc, key: value}).encode()
            yield "deep", json.dumps({**doc, "deep": 0}).replace("0}", deep + "}").encode()
            if "_data_files" in doc and isinstance(doc["_data_files"], list):
                yield (
                    "listed-3x",
                    json.dumps({**doc, "_data_files": doc["_data_files"] * 3}).encode(),
                )
            features = doc.get("features")
            if isinstance(features, dict):
                for column, feature in features.items():
                    if isinstance(feature, dict) and feature.get("_type") == "ClassLabel":
                        huge = {**features, column: {"_type": "ClassLabel", "num_classes": 10**12}}
                        yield "classes:1e12", json.dumps({**doc, "features": huge}).encode()
    if name.endswith(".jsonl"):
        line = json.dumps({"file_name": "a.png", "t": "x", "n": 1})
        yield "deep-line", (line + "\n" + '{"file_name": "b.png", "n": ' + deep + "}\n").encode()
    if name == "README.md":
        bomb = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
        bomb += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 10)]
        yield "alias-bomb", ("---\n" + "\n".join(bomb) + "\nconfigs: *a9\n---\n").encode()
        yield "deep-yaml", ("---\nconfigs: " + "[" * 5000 + "]" * 5000 + "\n---\n").encode()
        yield "configs:5", b"---\nconfigs: 5\n---\n"
    if name.endswith(".parquet"):
        table = pq.read_table(io.BytesIO(data))
        meta = dict(table.schema.metadata or {})
        if b"huggingface" in meta:
            info = json.loads(meta[b"huggingface"])
            for column, feature in info.get("info", {}).get("features", {}).items():
                if isinstance(feature, dict) and feature.get("_type") == "ClassLabel":
                    info["info"]["features"][column] = {
                        "_type": "ClassLabel",
                        "num_classes": 10**12,
                    }
            meta[b"huggingface"] = json.dumps(info).encode()
            buffer = io.BytesIO()
            pq.write_table(table.replace_schema_metadata(meta), buffer)
            yield "classes:1e12", buffer.getvalue()


def test_fuzz_every_format(tmp_path):
    rnd = random.Random(SEED)
    originals = build_originals(tmp_path / "originals")
    cases, described = [], []
    for kind, folder, name, protected in originals:
        cases.append({"kind": kind, "path": str(folder)})  # the unmutated baseline
        described.append((kind, folder.name, name, "original", protected, None))
        baseline = len(cases) - 1
        data = (folder / name).read_bytes()
        variants = list(mutations(data, rnd)) + list(structured(name, data, rnd))
        for label, mutated in variants:
            copy = tmp_path / "cases" / f"case-{len(cases):04d}"
            shutil.copytree(folder, copy, symlinks=True)
            (copy / name).write_bytes(mutated)
            cases.append({"kind": kind, "path": str(copy)})
            described.append((kind, folder.name, name, label, protected, baseline))
    (tmp_path / "cases.json").write_text(json.dumps(cases))
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path / "cases.json")],
        capture_output=True,
        text=True,
        timeout=CASE_TIMEOUT_S * 3 + 240 * SCALE,
    )
    results, started = {}, None
    for line in proc.stdout.splitlines():
        if line.startswith("START "):
            started = int(line.split()[1])
        elif line.startswith("RESULT "):
            _, i, payload = line.split(" ", 2)
            results[int(i)] = json.loads(payload)
    if proc.returncode != 0 or len(results) != len(cases):
        what = described[started] if started is not None else "start-up"
        pytest.fail(
            f"the loader crashed or hung (exit {proc.returncode}) on {what}:\n{proc.stderr[-3000:]}"
        )

    problems, changed = [], 0
    for i, (kind, source, name, label, protected, baseline) in enumerate(described):
        result = results[i]
        where = f"{kind} {source}/{name} {label}"
        if baseline is None:
            assert "ok" in result, f"the original {where} does not load: {result}"
            continue
        if "error" in result:
            case = f"case-{i:04d}"
            message = result["message"]
            named = case in message or (
                result["error"] == "DecodeError" and "column" in message and "row" in message
            )  # a media value stored in a saved dataset has no file of its own
            if not result["clear"] or not named:
                problems.append(f"{where}: unclear {result['error']}: {result['message'][:300]}")
        elif result["ok"] != results[baseline]["ok"]:
            changed += 1
            if protected:
                problems.append(f"{where}: loaded a different value without an error")
    print(f"{len(cases)} cases, {changed} loaded a different value (unprotected formats)")
    assert not problems, "\n".join(problems)
    assert len(cases) > 250 and changed < len(cases) // 2
