#!/usr/bin/env python3
"""Checks the shape of the code a person reads (issue 42): no `.rs` file over 1,000 lines
(tests included), no function over 80 lines in the three controllers' non-test code, and,
inside every crate (`e2e/src` too), no import circle between module files and no module
importing from one of its ancestors (everything points down).

Imports are read from the source: `use crate::…`, `use super::…`, `use self::…` and inline
`crate::a::b` paths, in non-test code only (`#[cfg(test)]` items and `tests.rs`/`tests/`
files are left out: a test module reads its parent by design). A path is resolved to the
longest module file it names. `python3 tools/structure.py` prints what breaks a rule and
exits 1 if anything does; `--report` prints the counts and always exits 0.
"""

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAX_FILE_LINES = 1000
MAX_FN_LINES = 80
CONTROLLERS = ["hearth-discovery", "hearth-kueue-sync", "hearth-lock-manager"]


def strip(src: str) -> str:
    """`src` with comments, strings and char literals blanked (newlines kept), so braces
    and paths are only those of the code."""
    out, i, n = [], 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif src.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if src.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif src.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(re.sub(r"[^\n]", " ", src[i:j]))
            i = j
        elif c == "r" and re.match(r'r#*"', src[i:]) and (i == 0 or not (src[i - 1].isalnum() or src[i - 1] == "_")):
            hashes = re.match(r"r(#*)\"", src[i:]).group(1)
            end = src.find('"' + hashes, i + 2 + len(hashes))
            j = n if end < 0 else end + 1 + len(hashes)
            out.append(re.sub(r"[^\n]", " ", src[i:j]))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and src[j] != '"':
                j += 2 if src[j] == "\\" else 1
            j += 1
            out.append(re.sub(r"[^\n]", " ", src[i:j]))
            i = j
        elif c == "'":
            m = re.match(r"'(\\.[^']*|[^\\'])'", src[i:])
            if m:
                out.append(" " * len(m.group(0)))
                i += len(m.group(0))
            else:
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def close_of(code: str, open_at: int) -> int:
    """Index of the brace closing the one at `open_at`."""
    depth = 0
    for j in range(open_at, len(code)):
        if code[j] == "{":
            depth += 1
        elif code[j] == "}":
            depth -= 1
            if depth == 0:
                return j
    return len(code) - 1


def without_tests(code: str) -> str:
    """`code` with every `#[cfg(test)]` item blanked."""
    for m in reversed(list(re.finditer(r"#\[cfg\(test\)\]", code))):
        brace = code.find("{", m.end())
        semi = code.find(";", m.end())
        if semi >= 0 and (brace < 0 or semi < brace):
            end = semi
        else:
            end = close_of(code, brace)
        code = code[: m.start()] + re.sub(r"[^\n]", " ", code[m.start() : end + 1]) + code[end + 1 :]
    return code


def is_test_file(path: Path) -> bool:
    return path.stem == "tests" or path.stem.endswith("_tests") or "tests" in path.parts[:-1]


def test_children(code: str) -> set:
    """Modules `code` declares only for tests (`#[cfg(test)] mod x;`)."""
    return set(re.findall(r"#\[cfg\(test\)\]\s*(?:pub(?:\([^)]*\))? )?mod (\w+)\s*;", code))


def reexports(code: str) -> dict:
    """Names a module re-exports from its own children: `pub use child::…::Name`."""
    found = {}
    for m in re.finditer(r"pub(?:\([^)]*\))? use (?:self::)?(\w+)((?:::\w+)*)::(?:\{([^}]*)\}|(\w+))\s*;", code):
        names = m.group(3).split(",") if m.group(3) else [m.group(4)]
        for n in names:
            n = n.strip().split(" as ")[-1].strip()
            if n:
                found[n] = m.group(1)
    return found


def long_functions(path: Path, code: str):
    for m in re.finditer(r"(?m)^[ \t]*(?:pub(?:\([^)]*\))? )?(?:const )?(?:async )?(?:unsafe )?fn (\w+)", code):
        brace = code.find("{", m.end())
        semi = code.find(";", m.end())
        if brace < 0 or (0 <= semi < brace and "where" not in code[m.end() : semi]):
            continue
        end = close_of(code, brace)
        lines = code.count("\n", m.start(), end) + 1
        if lines > MAX_FN_LINES:
            yield m.group(1), code.count("\n", 0, m.start()) + 1, lines


def crates():
    """(name, source dir) of every crate with Rust sources."""
    for manifest in sorted(ROOT.glob("crates/*/Cargo.toml")) + [ROOT / "e2e/Cargo.toml"]:
        src = manifest.parent / "src"
        if src.is_dir():
            yield manifest.parent.name, src


def module_of(src: Path, path: Path) -> tuple:
    rel = path.relative_to(src).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "mod":
        parts.pop()
    if parts and parts[0] == "bin":
        return ("bin",) + tuple(parts[1:])
    if parts in (["lib"], ["main"]):
        return ()
    return tuple(parts)


def use_paths(code: str):
    """Every `crate::`, `super::` or `self::` path in `code` (groups expanded one level)."""
    for m in re.finditer(r"\b(crate|super|self)((?:::\w+)*)::\{", code):
        inner = code[m.end() : close_of(code, m.end() - 1)]
        depth, item = 0, ""
        for ch in inner + ",":
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            if ch == "," and depth == 0:
                first = re.match(r"\s*(\w+)", item)
                if first and first.group(1) != "self":
                    yield m.group(1), m.group(2).split("::")[1:] + [first.group(1)]
                elif first:
                    yield m.group(1), m.group(2).split("::")[1:]
                item = ""
            else:
                item += ch
    for m in re.finditer(r"\b(crate|super|self)((?:::\w+)+)\b(?!::\{)", code):
        yield m.group(1), m.group(2).split("::")[1:]


def resolve(kind, rest, here: tuple, modules, reexported) -> tuple:
    if kind == "crate":
        base = ()
    elif kind == "super":
        base = here[:-1]
        while rest and rest[0] == "super":
            base, rest = base[:-1], rest[1:]
    else:
        base = here
    path = base + tuple(rest)
    while path and path not in modules:
        path = path[:-1]
    # An item the module re-exports from one of its children is that child's.
    rest = (base + tuple(rest))[len(path):]
    child = reexported.get(path, {}).get(rest[0]) if rest else None
    if child is not None and path + (child,) in modules:
        return path + (child,)
    return path


def cycles(graph):
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in list(graph):
        if v not in index:
            visit(v)
    return out


def name(module: tuple) -> str:
    return "::".join(module) or "crate"


def main() -> int:
    report = "--report" in sys.argv
    problems = []
    counts = {"files": 0, "functions": 0, "circles": 0, "upward": 0}
    for path in sorted(ROOT.glob("**/*.rs")):
        if any(p in ("target", ".git", "node_modules") for p in path.relative_to(ROOT).parts):
            continue
        lines = path.read_text(errors="replace").count("\n")
        if lines > MAX_FILE_LINES:
            counts["files"] += 1
            problems.append(f"{path.relative_to(ROOT)}: {lines} lines (at most {MAX_FILE_LINES})")
    for crate, src in crates():
        files = [p for p in sorted(src.rglob("*.rs")) if not is_test_file(p.relative_to(src))]
        modules = {module_of(src, p): p for p in files}
        stripped = {m: strip(p.read_text(errors="replace")) for m, p in modules.items()}
        for m, code in stripped.items():
            for child in test_children(code):
                modules.pop(m + (child,), None)
        reexported = {m: reexports(without_tests(c)) for m, c in stripped.items() if m in modules}
        graph, upward = {}, {}
        for module, path in modules.items():
            if module[:1] == ("bin",):
                continue
            code = without_tests(stripped[module])
            if crate in CONTROLLERS:
                for fn, line, n in long_functions(path, code):
                    counts["functions"] += 1
                    problems.append(f"{path.relative_to(ROOT)}:{line}: fn {fn} has {n} lines (at most {MAX_FN_LINES})")
            for kind, rest in use_paths(code):
                target = resolve(kind, rest, module, modules, reexported)
                if target == module or target[:1] == ("bin",):
                    continue
                graph.setdefault(module, set()).add(target)
                if target and module[: len(target)] == target and target not in upward.get(module, ()):
                    upward.setdefault(module, set()).add(target)
                    counts["upward"] += 1
                    problems.append(f"{crate}: {name(module)} imports from its ancestor {name(target)}")
        for comp in cycles(graph):
            counts["circles"] += 1
            problems.append(f"{crate}: import circle " + " ⇄ ".join(name(m) for m in comp))
    for p in problems:
        print(p)
    print(
        f"structure: {counts['files']} files over {MAX_FILE_LINES} lines, {counts['functions']} controller "
        f"functions over {MAX_FN_LINES} lines, {counts['circles']} import circles, {counts['upward']} upward imports"
    )
    return 0 if report or not problems else 1


if __name__ == "__main__":
    sys.exit(main())
