"""Run `datasets`' own test files against jaxfeed and report the pass rate on the API jaxfeed has.

    python tools/upstream/run_datasets_suite.py DATASETS_CHECKOUT [TEST_FILE ...] [--out DIR]

The chosen test files of a `datasets` source checkout (its ``tests/`` folder, with its conftest,
fixtures and data) are copied to a work folder with every ``datasets`` import rewritten to a shim
(``_dsshim``): a name jaxfeed exports is jaxfeed's; any other name (internals such as
``ExamplesIterable``, ``InMemoryTable``, ``DatasetInfo``) is a placeholder that raises
``NotInJaxfeed`` when used; ``datasets.config`` stays `datasets`' own (availability flags). pytest
then runs them (``-m "not integration"``: no Hub). A test that fails on ``NotInJaxfeed`` (or
``NotInJaxfeed`` at collection), on a missing attribute (a method or private attribute jaxfeed
does not have) or on another library's format (torch, tensorflow, polars) exercises API jaxfeed
does not claim and is left out (listed in ``DIR/left_out.txt``); the rate is
``passed / (passed + failed)`` over the rest, every failure listed in ``DIR/failures.txt``. A
test whose fixture fails to download (no network) never reaches jaxfeed: it is counted apart
(``DIR/offline.txt``), neither passed nor failed.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

DEFAULT_FILES = [
    "test_arrow_dataset.py",
    "test_iterable_dataset.py",
    "test_dataset_dict.py",
    "test_distributed.py",
    "test_splits.py",
    "features/test_features.py",
    "features/test_image.py",
    "features/test_array_xd.py",
    "io/test_csv.py",
    "io/test_json.py",
    "io/test_parquet.py",
]

SHIM = '''
"""`datasets` names as jaxfeed's; others raise NotInJaxfeed when used."""
import datasets.config as config  # noqa: F401 (availability flags and paths only)
import jaxfeed


class NotInJaxfeed(Exception):
    pass


class _Meta(type):
    def __call__(cls, *a, **k):
        raise NotInJaxfeed(cls.__name__)

    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        raise NotInJaxfeed(f"{cls.__name__}.{name}")


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    try:
        return getattr(jaxfeed, name)
    except AttributeError:
        return _Meta(name, (), {})
'''

CONFTEST_EXTRA = """

import shutil as _shutil
from pathlib import Path as _Path

import pytest as _pytest


@_pytest.fixture
def shared_datadir(request, tmp_path):
    source = _Path(request.fspath).parent / "data"
    target = tmp_path / "data"
    if source.is_dir():
        _shutil.copytree(source, target)
    else:
        target.mkdir()
    return target
"""

_FROM = re.compile(r"^(\s*)from datasets(?:\.[\w.]+)? import", re.M)
_IMPORT = re.compile(r"^(\s*)import datasets(?:\.[\w.]+)?(\s*(?:#.*)?)$", re.M)


_OPTIONAL = re.compile(r"^import (httpx|requests)$", re.M)  # test helpers' network libraries


def rewrite(text: str) -> str:
    text = _OPTIONAL.sub(r"try:\n    import \1\nexcept ImportError:\n    \1 = None", text)
    text = _FROM.sub(r"\1from _dsshim import", text)
    return _IMPORT.sub(r"\1import _dsshim as datasets\2", text)


# failures on API jaxfeed does not have: a shimmed internal, a missing attribute (public or
# private: `_indices`, `_format_columns`, ...), another library's format
_NOT_CLAIMED = re.compile(
    r"NotInJaxfeed|has no attribute|does not have the attribute|"
    r"unknown format type '(torch|tensorflow|tf|polars|jax\.numpy)'"
)


# a fixture that downloads (no network here): the test never reached jaxfeed
_OFFLINE = re.compile(r"URLError|Name or service not known|Temporary failure in name resolution")


def _offline(case: ET.Element, bad: ET.Element) -> bool:
    message = (bad.get("message") or "").splitlines()[0] if bad.get("message") else ""
    return bad.tag == "error" and "failed on setup" in message and bool(_OFFLINE.search(message))


def _not_claimed(message: str, text: str) -> bool:
    first = message.splitlines()[0] if message else ""
    return bool(_NOT_CLAIMED.search(first)) or "NotInJaxfeed" in text


def prepare(checkout: Path, files: list[str], work: Path) -> None:
    if work.exists():
        shutil.rmtree(work)
    src = checkout / "tests"
    (work / "tests").mkdir(parents=True)
    (work / "_dsshim.py").write_text(SHIM)
    keep = set(files) | {"__init__.py", "conftest.py", "utils.py"}
    for path in src.rglob("*"):
        rel = path.relative_to(src)
        target = work / "tests" / rel
        if path.is_dir():
            continue
        top = rel.parts[0]
        wanted = (
            str(rel) in keep
            or top == "fixtures"
            or rel.name in ("__init__.py", "conftest.py")
            or (len(rel.parts) > 1 and rel.parts[-2] == "data")
        )
        if not wanted:
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        if path.suffix == ".py":
            text = rewrite(path.read_text())
            if rel == Path("conftest.py"):
                text += CONFTEST_EXTRA
            target.write_text(text)
        else:
            shutil.copyfile(path, target)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("checkout", type=Path)
    parser.add_argument("files", nargs="*", default=DEFAULT_FILES)
    parser.add_argument("--out", type=Path, default=Path("upstream-run"))
    parser.add_argument("--timeout", type=int, default=120, help="seconds per test")
    args = parser.parse_args()
    work = args.out.resolve() / "work"
    prepare(args.checkout.resolve(), args.files, work)
    report = args.out.resolve() / "junit.xml"
    cmd = [
        sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider",
        "-n", "0", "-m", "not integration", "--continue-on-collection-errors", f"--timeout={args.timeout}", "--rootdir", str(work),
        f"--junitxml={report}", *[str(work / "tests" / f) for f in args.files],
    ]  # fmt: skip
    subprocess.run(cmd, cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    passed, failed, left_out, skipped, offline = [], [], [], [], []
    for case in ET.parse(report).iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        bad = case.find("failure")
        if bad is None:
            bad = case.find("error")
        if case.find("skipped") is not None:
            skipped.append(name)
        elif bad is None:
            passed.append(name)
        elif _offline(case, bad):
            offline.append(name)
        elif _not_claimed(bad.get("message") or "", bad.text or ""):
            left_out.append(name)
        else:
            failed.append(
                (
                    name,
                    (bad.get("message") or "").splitlines()[0][:200] if bad.get("message") else "",
                )
            )
    total = len(passed) + len(failed)
    rate = 100 * len(passed) / max(total, 1)
    lines = [f"{n}  {m}" for n, m in failed]
    (args.out / "failures.txt").write_text("\n".join(lines) + "\n")
    (args.out / "left_out.txt").write_text("\n".join(left_out) + "\n")
    (args.out / "offline.txt").write_text("\n".join(offline) + "\n")
    print(
        f"{len(passed)} passed, {len(failed)} failed ({rate:.1f}% of {total}); "
        f"{len(left_out)} left out (API jaxfeed does not have), {len(skipped)} skipped, "
        f"{len(offline)} not run (their fixture downloads; no network)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
