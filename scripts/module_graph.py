#!/usr/bin/env python3
"""Checks that no crate of the workspace has an import cycle between modules.

Each source file is a module. Module A depends on module B when A names
an item of B by path (`use crate::b::Item`, `super::Item`, an inline
`crate::b::f()`). A module's own children do not count (a parent declares
and re-exports them; they may use it), and neither does test code
(`#[cfg(test)]` modules), doc comments or comments.

    scripts/module_graph.py            # check every crate; exit 1 on a cycle
    scripts/module_graph.py --print    # also print each crate's edges
    scripts/module_graph.py --dot tern # the `tern` crate's graph in DOT
"""

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def strip_comments(src: str) -> str:
    """Removes comments and the contents of string literals."""
    out = []
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            i = n if j < 0 else j
        elif src.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if src.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif src.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    i += 1
        elif c == "r" and re.match(r'r#*"', src[i:i + 8]) and (i == 0 or not (src[i - 1].isalnum() or src[i - 1] == "_")):
            m = re.match(r'r(#*)"', src[i:])
            end = '"' + m.group(1)
            j = src.find(end, i + m.end())
            out.append('""')
            i = n if j < 0 else j + len(end)
        elif c == '"':
            j = i + 1
            while j < n and src[j] != '"':
                j += 2 if src[j] == "\\" else 1
            out.append('""')
            i = j + 1
        elif c == "'" and re.match(r"'(\\.|[^\\'])'", src[i:i + 4]):
            m = re.match(r"'(\\.|[^\\'])'", src[i:])
            out.append("' '")
            i += m.end()
        else:
            out.append(c)
            i += 1
    return "".join(out)


def strip_test_modules(src: str):
    """Drops `#[cfg(test)] mod x { ... }` blocks; returns the rest and the
    names of `#[cfg(test)] mod x;` declarations (test-only files)."""
    attrs = r"#\[cfg\(test\)\]\s*(?:#\[[^\]]*\]\s*)*(?:pub(?:\([^)]*\))?\s+)?mod\s+"
    test_files = set(re.findall(attrs + r"(\w+)\s*;", src))
    while True:
        m = re.search(attrs + r"\w+\s*\{", src)
        if not m:
            return src, test_files
        depth, i = 1, m.end()
        while i < len(src) and depth:
            depth += {"{": 1, "}": -1}.get(src[i], 0)
            i += 1
        src = src[:m.start()] + src[i:]


def module_files(crate_src: Path):
    """Maps module paths (tuples) to files, following `mod` declarations
    from the crate roots and skipping test-only modules."""
    mods = {}
    roots = [p for p in (crate_src / "lib.rs", crate_src / "main.rs") if p.exists()]

    def walk(path: Path, modpath: tuple, dir_for_children: Path):
        src, test_files = strip_test_modules(strip_comments(path.read_text()))
        mods[modpath] = (path, src)
        for m in re.finditer(r"(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;", src):
            name = m.group(1)
            if name in test_files:
                continue
            for cand in (dir_for_children / f"{name}.rs", dir_for_children / name / "mod.rs"):
                if cand.exists():
                    child_dir = cand.parent if cand.name == "mod.rs" else cand.parent / name
                    walk(cand, modpath + (name,), child_dir)
                    break

    for r in roots:
        prefix = () if r.name == "lib.rs" else ("<bin>",)
        walk(r, prefix, crate_src)
    return mods


def expand_use_tree(tree: str):
    """`a::{b, c::{d, e}}` -> ['a::b', 'a::c::d', 'a::c::e']."""
    tree = re.sub(r"\s+", "", tree)
    depth, start, parts = 0, 0, []
    i = tree.find("{")
    if i < 0:
        return [re.sub(r"as\w+$", "", tree)]
    prefix, inner = tree[:i], tree[i + 1:tree.rfind("}")]
    for j, c in enumerate(inner):
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(inner[start:j])
            start = j + 1
    parts.append(inner[start:])
    out = []
    for p in parts:
        if p:
            out.extend(prefix + q for q in expand_use_tree(p))
    return out


def referenced_paths(src: str):
    paths = []
    for m in re.finditer(r"\buse\s+([^;]+);", src):
        paths.extend(expand_use_tree(m.group(1)))
    body = re.sub(r"\buse\s+[^;]+;", "", src)
    body = re.sub(r"pub\s*\(\s*in\s+[\w:]+\s*\)", "", body)
    body = re.sub(r"\$crate", "", body)
    paths.extend(m.group(0) for m in re.finditer(r"\b(?:crate|(?:super::)*super|self)(?:::\w+)+", body))
    return paths


def resolve(path: str, here: tuple, is_mod_rs: bool, mods: dict):
    """The module a path names (the longest module prefix), or None for an
    external crate."""
    segs = [s for s in path.split("::") if s]
    if not segs:
        return None
    if segs[0] == "crate":
        base, segs = (("<bin>",) if here[:1] == ("<bin>",) else ()), segs[1:]
    elif segs[0] in ("super", "self"):
        # A file module `a/b.rs` is `a::b`; `super` is `a`. For `mod.rs`
        # the module is the directory, same rule.
        base = here
        while segs and segs[0] in ("super", "self"):
            if segs[0] == "super":
                base = base[:-1]
            segs = segs[1:]
    else:
        return None
    best = base if base in mods else None
    cur = base
    for s in segs:
        cur = cur + (s,)
        if cur in mods:
            best = cur
        else:
            break
    return best


def graph(crate_src: Path):
    mods = module_files(crate_src)
    edges = {m: set() for m in mods}
    for m, (path, src) in mods.items():
        for p in referenced_paths(src):
            t = resolve(p, m, path.name == "mod.rs", mods)
            if t is None or t == m or t[:len(m)] == m:
                continue  # external, itself, or its own descendant
            edges[m].add(t)
    return mods, edges


def cycles(edges: dict):
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
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

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def name(m: tuple) -> str:
    return "::".join(m) or "crate"


def find_cycle_path(comp, edges):
    """One concrete cycle through the component, for the error message."""
    comp_set = set(comp)
    start = comp[0]
    prev, todo = {start: None}, [start]
    while todo:
        v = todo.pop(0)
        for w in sorted(edges[v]):
            if w == start:
                path = [v]
                while prev[path[-1]] is not None:
                    path.append(prev[path[-1]])
                return [start] + list(reversed(path[:-1])) + [start] if len(path) > 1 else [start, v, start]
            if w in comp_set and w not in prev:
                prev[w] = v
                todo.append(w)
    return comp


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--print", action="store_true", help="print every crate's edges")
    ap.add_argument("--dot", metavar="CRATE", help="print CRATE's module graph in DOT and exit")
    args = ap.parse_args()
    crates = sorted(p for p in (ROOT / "crates").iterdir() if (p / "src").is_dir())
    failed = False
    for crate in crates:
        mods, edges = graph(crate / "src")
        if args.dot:
            if crate.name != args.dot:
                continue
            print(f'digraph "{crate.name}" {{')
            for m in sorted(edges):
                for t in sorted(edges[m]):
                    print(f'  "{name(m)}" -> "{name(t)}";')
            print("}")
            return 0
        found = cycles(edges)
        n_edges = sum(len(e) for e in edges.values())
        status = "no cycles" if not found else f"{len(found)} cycle(s)"
        print(f"{crate.name}: {len(mods)} modules, {n_edges} imports, {status}")
        if args.print:
            for m in sorted(edges):
                if edges[m]:
                    print(f"  {name(m)} -> {', '.join(name(t) for t in sorted(edges[m]))}")
        for comp in found:
            failed = True
            path = find_cycle_path(comp, edges)
            print(f"  cycle: {' -> '.join(name(m) for m in path)}")
            print(f"    (modules in it: {', '.join(name(m) for m in comp)})")
    if args.dot:
        print(f"no crate named {args.dot}", file=sys.stderr)
        return 2
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
