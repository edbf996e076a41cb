#!/usr/bin/env python3
"""Import circles among the library's source files.

Usage: import_cycles.py SRC_DIR MAX

A file depends on another when it names it through `crate::`, `super::` or `self::`
paths (re-exports followed to the file that defines the item; comments and
`#[cfg(test)]` modules ignored; test files skipped). Prints every strongly connected
group of files larger than MAX with the edges inside it, and exits 1 if there is
one: modules that import each other in a large circle cannot be read, tested or
changed one at a time.
"""
import os
import re
import sys


def files_under(root):
    files = {}
    for d, _, names in os.walk(root):
        for f in names:
            if not f.endswith('.rs'):
                continue
            path = os.path.join(d, f)
            parts = os.path.relpath(path, root)[:-3].split('/')
            if parts[-1] == 'mod':
                parts = parts[:-1]
            if parts in (['lib'], ['main']):
                continue
            files[tuple(parts)] = path
    return files


def is_test(key):
    last = key[-1]
    return last.endswith('tests') or last.startswith('test') or 'tests' in key


def strip(src):
    """Source without `#[cfg(test)] mod x { ... }` blocks and comments."""
    out, lines, i = [], src.split('\n'), 0
    while i < len(lines):
        if (lines[i].strip().startswith('#[cfg(test)]') and i + 1 < len(lines)
                and re.match(r'\s*(pub )?mod \w+\s*\{', lines[i + 1])):
            depth, i = 0, i + 1
            while i < len(lines):
                depth += lines[i].count('{') - lines[i].count('}')
                i += 1
                if depth <= 0:
                    break
            continue
        out.append(lines[i])
        i += 1
    return re.sub(r'//[^\n]*', '', '\n'.join(out))


def reexports(files):
    found = {}
    pattern = re.compile(
        r'pub(?:\([\w:]+\))? use ((?:self::|super::|crate::)?[\w:]*?)(?:::)?(\{[^;]*\}|\w+)\s*;')
    for key, path in files.items():
        for m in pattern.finditer(open(path).read()):
            prefix = [x for x in m.group(1).split('::') if x]
            for name in m.group(2).strip('{}').split(','):
                name = name.strip()
                if not name:
                    continue
                sub = [x for x in name.split(' as ')[0].split('::') if x]
                alias = name.split(' as ')[-1].split('::')[-1].strip()
                full = prefix + sub
                if full and full[0] == 'crate':
                    target = full[1:]
                elif full and full[0] == 'self':
                    target = list(key) + full[1:]
                elif full and full[0] == 'super':
                    target = list(key[:-1]) + full[1:]
                else:
                    target = list(key) + full
                found[key + (alias,)] = target
    return found


def main():
    root, limit = sys.argv[1], int(sys.argv[2])
    files = files_under(root)
    again = reexports(files)

    def resolve(path, depth=0):
        for n in range(len(path), 0, -1):
            head = tuple(path[:n])
            if head in again and depth < 10:
                return resolve(again[head] + list(path[n:]), depth + 1)
            if head in files:
                return head
        return None

    edges = {k: set() for k in files}
    for key, path in files.items():
        if is_test(key):
            continue
        src = strip(open(path).read())
        is_mod = path.endswith('mod.rs')
        targets = []
        for m in re.finditer(r'crate((?:::\w+)+)(::\{([^;]*?)\})?', src):
            base = [x for x in m.group(1).split('::') if x]
            targets.append(base)
            for item in (m.group(3) or '').split(','):
                item = item.strip().split(' as ')[0].replace('{', '').replace('}', '')
                if item and item != 'self':
                    targets.append(base + [x for x in item.split('::') if x])
        for m in re.finditer(r'\bsuper((?:::\w+)+)', src):
            segs = [x for x in m.group(1).split('::') if x]
            base = list(key[:-1]) if not is_mod else list(key[:-1])
            while segs and segs[0] == 'super':
                base, segs = base[:-1], segs[1:]
            targets.append(base + segs)
        for m in re.finditer(r'(?<![\w:])self((?:::\w+)+)', src):
            targets.append(list(key) + [x for x in m.group(1).split('::') if x])
        for target in targets:
            hit = resolve(target)
            if hit and hit != key and not is_test(hit):
                edges[key].add(hit)

    # Tarjan's strongly connected components, iteratively.
    index, low, stack, on, groups, counter = {}, {}, [], set(), [], [0]
    for start in edges:
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on.add(start)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter[0]
                    counter[0] += 1
                    stack.append(child)
                    on.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                    advanced = True
                    break
                if child in on:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on.discard(member)
                    group.append(member)
                    if member == node:
                        break
                groups.append(group)

    name = '/'.join
    largest = max((len(g) for g in groups), default=0)
    print(f'{len(files)} files; largest import circle: {largest} file(s)')
    bad = [g for g in groups if len(g) > limit]
    for group in bad:
        members = set(group)
        print(f'circle of {len(group)} files (more than {limit}):')
        for member in sorted(group):
            inside = sorted(name(t) for t in edges[member] if t in members)
            print(f'  {name(member)} -> {", ".join(inside)}')
    sys.exit(1 if bad else 0)


main()
