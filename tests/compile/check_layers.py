#!/usr/bin/env python3
"""The layering rule of docs/architecture.md as a test: a product directory
includes only directories below it, so the tree has no include cycle; and
the replicated table's key kinds are spelled only in core/replicated_key.

    check_layers.py ROOT          exit 1 naming every upward include
    check_layers.py --self-test   shows that an upward include is caught
"""
import os
import re
import sys
import tempfile

# Lowest first: each may include only the ones before it (and itself).
LAYERS = ["core", "config", "auth", "actors", "cluster", "discovery", "net", "admin", "app"]
INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/', re.M)


def upward_includes(root):
    found = []
    for rank, layer in enumerate(LAYERS):
        top = os.path.join(root, layer)
        for dirpath, _, files in os.walk(top):
            for name in sorted(files):
                if not name.endswith((".hpp", ".cpp")):
                    continue
                path = os.path.join(dirpath, name)
                with open(path, encoding="utf-8", errors="replace") as f:
                    text = f.read()
                for target in INCLUDE.findall(text):
                    if target in LAYERS and LAYERS.index(target) > rank:
                        found.append(f"{os.path.relpath(path, root)} includes {target}/ (a layer above {layer}/)")
    return found


KEY_LITERAL = re.compile(r'"[sodhla]/"|rfind\("[sodhla]/"')
KEYS_HEADER = ("core/replicated_key.hpp", "core/replicated_key.cpp")


def key_literals(root):
    """Replicated-table key kinds written as string literals outside core/replicated_key."""
    found = []
    for layer in LAYERS:
        for dirpath, _, files in os.walk(os.path.join(root, layer)):
            for name in sorted(files):
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, root)
                if not name.endswith((".hpp", ".cpp")) or rel in KEYS_HEADER:
                    continue
                with open(path, encoding="utf-8", errors="replace") as f:
                    for n, line in enumerate(f, 1):
                        code = line.split("//")[0]
                        if KEY_LITERAL.search(code):
                            found.append(f"{rel}:{n}: a key kind as a literal (use core/replicated_key.hpp)")
    return found


TEST_NAME_SEMICOLON = re.compile(r'TEST_CASE\("[^"]*;')


def split_test_names(root):
    """Catch2 test names with ';': ctest's discovery splits them into two broken tests."""
    found = []
    for dirpath, _, files in os.walk(os.path.join(root, "tests")):
        for name in sorted(files):
            if not name.endswith(".cpp"):
                continue
            path = os.path.join(dirpath, name)
            with open(path, encoding="utf-8", errors="replace") as f:
                for n, line in enumerate(f, 1):
                    if TEST_NAME_SEMICOLON.search(line):
                        found.append(f"{os.path.relpath(path, root)}:{n}: a test name with ';' (ctest splits it)")
    return found


def self_test():
    with tempfile.TemporaryDirectory() as root:
        for layer in LAYERS:
            os.makedirs(os.path.join(root, layer))
        with open(os.path.join(root, "net", "a.cpp"), "w") as f:
            f.write('#include "core/x.hpp"\n#include "cluster/y.hpp"\n')
        if upward_includes(root):
            print("self-test: a downward include was reported")
            return 1
        with open(os.path.join(root, "cluster", "b.hpp"), "w") as f:
            f.write('#include "actors/z.hpp"\n#include "net/a.hpp"\n')
        found = upward_includes(root)
        if found != ["cluster/b.hpp includes net/ (a layer above cluster/)"]:
            print(f"self-test: expected one upward include, got {found}")
            return 1
        with open(os.path.join(root, "actors", "c.cpp"), "w") as f:
            f.write('// "s/" in a comment is fine\nauto k = "s/" + id;\n')
        if key_literals(root) != ["actors/c.cpp:2: a key kind as a literal (use core/replicated_key.hpp)"]:
            print(f"self-test: expected one key literal, got {key_literals(root)}")
            return 1
        os.makedirs(os.path.join(root, "tests"))
        with open(os.path.join(root, "tests", "t.cpp"), "w") as f:
            f.write('TEST_CASE("a, b") {}\nTEST_CASE("a; b") {}\n')
        if split_test_names(root) != ["tests/t.cpp:2: a test name with ';' (ctest splits it)"]:
            print(f"self-test: expected one split test name, got {split_test_names(root)}")
            return 1
    print("self-test: an upward include, a key literal and a split test name are caught, a downward include and a comment are not")
    return 0


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    root = sys.argv[1]
    missing = [l for l in LAYERS if not os.path.isdir(os.path.join(root, l))]
    if missing:
        print(f"layer directories missing: {missing}")
        return 1
    found = upward_includes(root) + key_literals(root) + split_test_names(root)
    for line in found:
        print(line)
    if found:
        return 1
    print(f"layers {' < '.join(LAYERS)}: no upward include; no key kind written outside core/replicated_key; no test name ctest would split")
    return 0


if __name__ == "__main__":
    sys.exit(main())
