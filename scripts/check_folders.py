# SPDX-License-Identifier: Apache-2.0
"""Checks every #include of src/ against the folders' list the build declares
(CMakeLists.txt's eacgm_folder calls, written to the build's folders.txt as
"folder: folder it uses ..." lines): a folder includes its own headers, the
ABI headers (include/eacgm) and those of the folders it uses, directly or
through them; never "../x.h", which reaches around the include paths. The
list itself must make no cycle and name every folder of src/.

The compiler enforces most of it already (each folder sees only its own and
its uses' include directories); this finds what it cannot: a header that no
source of its own folder includes, a relative include. Run by the build
before any folder's library is compiled, and by ctest (folders.flow).

usage: check_folders.py SOURCE_TREE FOLDERS_TXT"""
import os
import re
import sys

INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]+"([^"]+)"', re.M)


def parse_folders(text):
    """{folder: [folders it uses]} from the build's list; raises ValueError on a bad line."""
    folders = {}
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        name, sep, uses = line.partition(":")
        if not sep or not name.strip():
            raise ValueError("line %d is not 'folder: uses ...': %r" % (n, line))
        folders[name.strip()] = uses.split()
    return folders


def cycle(folders):
    """A cycle of the list as [a, b, ..., a], or None."""
    state = {}

    def visit(f, path):
        state[f] = "open"
        for u in folders.get(f, []):
            if state.get(u) == "open":  # on the path being walked: the cycle closes at it
                return path[path.index(u):] + [u]
            if u not in state:
                found = visit(u, path + [u])
                if found:
                    return found
        state[f] = "done"
        return None

    for f in sorted(folders):
        if f not in state:
            found = visit(f, [f])
            if found:
                return found
    return None


def reach(folders):
    """{folder: every folder it may include, itself excluded}: its uses and theirs."""
    out = {}
    for f in folders:
        seen, todo = set(), list(folders[f])
        while todo:
            u = todo.pop()
            if u not in seen and u != f:
                seen.add(u)
                todo.extend(folders.get(u, []))
        out[f] = seen
    return out


def problems_of(root, folders):
    problems = []
    for f, uses in sorted(folders.items()):
        for u in uses:
            if u not in folders:
                problems.append("CMakeLists.txt: folder %s uses %s, which is no folder of the list" % (f, u))
    c = cycle(folders)
    if c:
        problems.append("CMakeLists.txt: the folders' uses make a cycle: " + " -> ".join(c))
    src = os.path.join(root, "src")
    on_disk = sorted(d for d in os.listdir(src) if os.path.isdir(os.path.join(src, d)))
    for d in on_disk:
        if d not in folders:
            problems.append("src/%s: a folder the build does not declare (add an eacgm_folder call to "
                            "CMakeLists.txt saying what it uses)" % d)
    may = reach(folders)
    for d in on_disk:
        if d not in folders:
            continue
        for dirpath, _, files in os.walk(os.path.join(src, d)):
            for name in sorted(files):
                if not name.endswith((".h", ".cpp")):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, root)
                with open(path, encoding="utf-8") as fh:
                    text = fh.read()
                for m in INCLUDE.finditer(text):
                    line = text.count("\n", 0, m.start()) + 1
                    why = include_problem(d, m.group(1), may[d])
                    if why:
                        problems.append("%s:%d: #include \"%s\": %s" % (rel, line, m.group(1), why))
    return problems


def include_problem(folder, inc, may):
    """Why folder may not include inc, or None."""
    if ".." in inc.split("/"):
        return "a relative include reaches around the folders' include paths; name it from src/ (\"folder/file.h\")"
    if "/" not in inc:
        return None  # its own folder's, or a generated header (a BPF skeleton)
    top = inc.split("/")[0]
    if top in (folder, "eacgm"):
        return None
    if top in may:
        return None
    allowed = ", ".join(sorted(may)) or "no other folder"
    return ("%s may use %s (CMakeLists.txt's eacgm_folder(%s ...)), not %s: an include against the data flow"
            % (folder, allowed, folder, top))


def main(argv):
    if len(argv) != 3:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    root, listing = argv[1], argv[2]
    try:
        with open(listing, encoding="utf-8") as fh:
            folders = parse_folders(fh.read())
    except (OSError, ValueError) as e:
        print("check_folders.py: cannot read the folders' list %s: %s (run cmake again)" % (listing, e),
              file=sys.stderr)
        return 2
    problems = problems_of(root, folders)
    for p in problems:
        print(p)
    if not problems:
        print("src/: %d folders, every #include along the data flow" % len(folders))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
