#!/usr/bin/env python3
"""Non-test code lines in crates/ at a git revision, counted as issue 42 counts them:
non-blank lines that are not comments, in crates/**.rs, leaving out test files
(tests.rs, *_tests.rs, tests/, testing.rs, test_support.rs, guard_tests.rs) and inline
#[cfg(test)] items. Usage: tools/code_lines.py [--by-crate] [REV ...] (default HEAD)."""

import re
import subprocess
import sys

TEST_FILES = {"tests.rs", "testing.rs", "test_support.rs", "guard_tests.rs"}


def is_test_file(path: str) -> bool:
    base = path.rsplit("/", 1)[-1]
    return base in TEST_FILES or base.endswith("_tests.rs") or "/tests/" in path


def without_cfg_test(lines: list[str]) -> list[str]:
    """Drops each #[cfg(test)] item: a `mod x;` line, or up to its closing brace."""
    out, i = [], 0
    while i < len(lines):
        if lines[i].strip() != "#[cfg(test)]":
            out.append(lines[i])
            i += 1
            continue
        j = i + 1
        if j < len(lines) and re.match(r"\s*(pub )?mod \w+;", lines[j]):
            i = j + 1
            continue
        depth, started = 0, False
        while j < len(lines):
            depth += lines[j].count("{") - lines[j].count("}")
            started = started or "{" in lines[j]
            j += 1
            if started and depth <= 0:
                break
        i = j
    return out


def count_by_crate(rev: str) -> dict[str, int]:
    files = subprocess.run(
        ["git", "ls-tree", "-r", "--name-only", rev, "crates/"],
        capture_output=True, text=True, check=True,
    ).stdout.split()
    by_crate: dict[str, int] = {}
    for path in files:
        if not path.endswith(".rs") or is_test_file(path):
            continue
        text = subprocess.run(
            ["git", "show", f"{rev}:{path}"], capture_output=True, text=True, check=True
        ).stdout
        crate = path.split("/")[1]
        by_crate[crate] = by_crate.get(crate, 0) + sum(
            1
            for line in without_cfg_test(text.split("\n"))
            if line.strip() and not line.strip().startswith("//")
        )
    return by_crate


def count(rev: str) -> int:
    return sum(count_by_crate(rev).values())


if __name__ == "__main__":
    args = sys.argv[1:]
    by_crate = "--by-crate" in args
    for rev in [a for a in args if a != "--by-crate"] or ["HEAD"]:
        counts = count_by_crate(rev)
        print(f"{rev} {sum(counts.values())}")
        if by_crate:
            for crate, n in sorted(counts.items()):
                print(f"  {crate} {n}")
