"""Mutation testing for the core promises: does the default test suite catch each listed bug?

Each mutation in ``mutations.py`` is one plausible bug, written as a code snippet to find (it must
occur exactly once in its file) and the text that replaces it. For each, this script copies the
sources and tests to a temporary folder, applies the mutation there (the working tree is never
touched), runs the mutation's targeted tests with the copy first on ``PYTHONPATH``, and counts the
bug as caught when they fail. Before anything runs, every snippet is looked up. A *stale* one,
whose snippet (or file) no longer exists because the code changed, is reported (``stale: snippet
not found in FILE``) and skipped; the others run, and the stale ones are listed again at the end
and make the exit status 2, so a stale list is noticed instead of silently scoring. A list that
cannot run as written (a snippet found several times, a duplicate id, a mutant that does not
compile, no tests) stops the run with exit status 2. The unmutated copy must pass every targeted
test first (a baseline), otherwise a failure would prove nothing.

    python tools/mutation/run.py               # all mutations (make mutation)
    python tools/mutation/run.py --list        # the list, without running
    python tools/mutation/run.py -k loader     # mutations whose id contains "loader"
    python tools/mutation/run.py -k cli,disk   # ... "cli" or "disk"
    python tools/mutation/run.py --jobs 2      # two mutations at a time

Exit status: 0 when every mutation is caught, 1 when one survives, 2 on a stale mutation, a broken
list, a failing baseline or a mutant whose tests cannot run.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from mutations import MUTATIONS, Mutation  # noqa: E402

COPIED = ("src", "tests", "conftest.py", "pyproject.toml")
IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache", "*.egg-info")


def stale(mutation: Mutation, root: Path = ROOT) -> str | None:
    """Why ``mutation`` no longer applies (its file or its snippet is gone), or None."""
    path = root / mutation.file
    if not path.is_file():
        return f"stale: file {mutation.file} does not exist"
    if mutation.find not in path.read_text():
        return f"stale: snippet not found in {mutation.file}"
    return None


def check_snippets(mutations: list[Mutation], root: Path = ROOT) -> list[str]:
    """Problems that stop the run: duplicate ids, snippets found several times, a replacement
    equal to its snippet, mutants that do not compile, no tests. Stale mutations (:func:`stale`)
    are not problems here: they are skipped and reported."""
    problems = []
    ids = [m.id for m in mutations]
    problems += [f"duplicate id {i!r}" for i in sorted({i for i in ids if ids.count(i) > 1})]
    for m in mutations:
        if not m.tests:
            problems.append(f"{m.id}: no tests to run")
        if m.find == m.replace:
            problems.append(f"{m.id}: the replacement equals the snippet")
        if stale(m, root):
            continue
        path = root / m.file
        count = path.read_text().count(m.find)
        if count != 1:
            problems.append(f"{m.id}: snippet found {count} times in {m.file}:\n    {m.find!r}")
        elif m.find != m.replace:
            try:  # a mutant that does not compile would be "caught" by any test: refuse it
                compile(path.read_text().replace(m.find, m.replace), str(path), "exec")
            except SyntaxError as err:
                problems.append(f"{m.id}: the mutated {m.file} does not compile: {err}")
    return problems


def make_copy(into: Path) -> Path:
    for name in COPIED:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, into / name, ignore=IGNORED)
        elif source.is_file():
            shutil.copy2(source, into / name)
    return into


def apply(mutation: Mutation, tree: Path) -> None:
    path = tree / mutation.file
    text = path.read_text()
    assert text.count(mutation.find) == 1, mutation.id
    path.write_text(text.replace(mutation.find, mutation.replace))


def run_tests(tree: Path, tests: list[str], timeout: float) -> tuple[str, float, str]:
    """Run ``tests`` in ``tree``: ("pass" | "fail" | "timeout" | "error", seconds, output tail)."""
    env = {**os.environ, "PYTHONPATH": str(tree / "src"), "PYTHONDONTWRITEBYTECODE": "1"}
    cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-m", "not slow",
           "--no-header", *tests]  # fmt: skip
    start = time.perf_counter()
    try:
        proc = subprocess.run(
            cmd, cwd=tree, env=env, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return "timeout", time.perf_counter() - start, ""
    seconds = time.perf_counter() - start
    tail = (proc.stdout + proc.stderr)[-3000:]
    # pytest: 0 passed, 1 tests failed, 2 interrupted (e.g. import errors), 4 usage, 5 none collected
    status = {0: "pass", 1: "fail", 2: "fail"}.get(proc.returncode, "error")
    return status, seconds, tail


def check_imports_copy(tree: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(tree / "src")}
    where = subprocess.run(
        [sys.executable, "-c", "import jaxfeed; print(jaxfeed.__file__)"],
        env=env, capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    if not where.startswith(str(tree)):
        raise SystemExit(
            f"the copy's jaxfeed is not the one imported (got {where}); check PYTHONPATH"
        )


def run_one(mutation: Mutation, timeout: float) -> tuple[Mutation, str, float, str]:
    with tempfile.TemporaryDirectory(prefix=f"jaxfeed-mutant-{mutation.id}-") as tmp:
        tree = make_copy(Path(tmp))
        apply(mutation, tree)
        status, seconds, tail = run_tests(tree, mutation.tests, timeout)
    return mutation, status, seconds, tail


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "-k", "--keyword", default="", help="only mutations whose id contains this (a,b: either)"
    )
    parser.add_argument("--list", action="store_true", help="print the mutations and exit")
    parser.add_argument("--jobs", type=int, default=1, help="mutations run at a time (default 1)")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per test run")
    parser.add_argument("--no-baseline", action="store_true", help="skip the unmutated run")
    parser.add_argument("-v", "--verbose", action="store_true", help="show the tests' output")
    args = parser.parse_args(argv)

    problems = check_snippets(MUTATIONS)
    if problems:
        print("the mutation list cannot run as written; fix tools/mutation/mutations.py:")
        print("\n".join(f"  {p}" for p in problems))
        return 2
    keywords = args.keyword.split(",")
    chosen = [m for m in MUTATIONS if any(k in m.id for k in keywords)]
    if not chosen:
        print(f"no mutation id contains {args.keyword!r}")
        return 2
    stale_ones = {m.id: why for m in chosen if (why := stale(m))}
    if args.list:
        for m in chosen:
            mark = "  (stale)" if m.id in stale_ones else ""
            print(f"{m.id:<34} {m.file:<32} {m.bug}{mark}")
        return 0
    for mutation_id, why in stale_ones.items():
        print(f"{mutation_id}: {why} (not run)", flush=True)
    chosen = [m for m in chosen if m.id not in stale_ones]
    if not chosen:
        summarize_stale(stale_ones)
        return 2

    if not args.no_baseline:
        tests = sorted({t for m in chosen for t in m.tests})
        with tempfile.TemporaryDirectory(prefix="jaxfeed-mutant-baseline-") as tmp:
            tree = make_copy(Path(tmp))
            check_imports_copy(tree)
            status, seconds, tail = run_tests(tree, tests, args.timeout * 2)
        print(
            f"baseline (no mutation): {len(tests)} targeted test files/ids {status} in {seconds:.0f} s"
        )
        if status != "pass":
            print(tail)
            print("the targeted tests fail without any mutation: fix them first")
            return 2

    results = []
    with cf.ThreadPoolExecutor(max(1, args.jobs)) as pool:
        futures = [pool.submit(run_one, m, args.timeout) for m in chosen]
        for future in cf.as_completed(futures):
            mutation, status, seconds, tail = future.result()
            verdict = {"fail": "caught", "timeout": "caught (timeout)", "pass": "SURVIVED"}.get(
                status, "ERROR"
            )
            print(f"{verdict:<17} {mutation.id:<34} {seconds:6.1f} s  {mutation.bug}", flush=True)
            if args.verbose or status in ("pass", "error"):
                print("    " + tail.replace("\n", "\n    ")[-1500:])
            results.append((mutation, verdict))
    caught = sum(v.startswith("caught") for _, v in results)
    errors = [m.id for m, v in results if v == "ERROR"]
    print(f"\nmutation score: {caught}/{len(results)} caught")
    survived = [m.id for m, v in results if v == "SURVIVED"]
    if survived:
        print("survived: " + ", ".join(survived))
    if errors:
        print("errors (tests not found or not runnable): " + ", ".join(errors))
    summarize_stale(stale_ones)
    if errors or stale_ones:
        return 2
    return 1 if survived else 0


def summarize_stale(stale_ones: dict[str, str]) -> None:
    """The stale mutations, at the end of the run: they were not run, and the list needs them
    updated (or removed) in tools/mutation/mutations.py."""
    if stale_ones:
        print(f"\n{len(stale_ones)} stale (not run; update them in tools/mutation/mutations.py):")
        for mutation_id, why in stale_ones.items():
            print(f"  {mutation_id}: {why}")


if __name__ == "__main__":
    sys.exit(main())
