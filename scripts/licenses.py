#!/usr/bin/env python3
"""Checks deny.toml's licence and ban rules over the dependency graph, without cargo-deny.

`cargo deny check licenses bans` is the reference (scripts/checks.sh runs it when it is
installed). Building cargo-deny from source took longer than any other CI step on a 2-core
machine, so CI runs this instead: the same rules from the same deny.toml, read from
`cargo metadata --all-features` (every target, dev-dependencies included, as deny.toml's
`[graph]` asks):
- every package's SPDX `license` expression (AND, OR, WITH, parentheses; the old `/` means
  OR) is satisfied by `[licenses] allow`; a package without an expression fails, unless it is
  a workspace crate and `[licenses.private] ignore` is set;
- no package named in `[bans] deny`;
- no workspace crate asks for a `*` version (a path dependency without a version is allowed
  when `allow-wildcard-paths` is set);
- several versions of one crate are listed, not refused (`multiple-versions = "warn"`).
Exits 1 and names each offender; prints one summary line when all is well.
"""

import collections
import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def tokens(expression):
    return re.findall(r"\(|\)|[^\s()]+", expression.replace("/", " OR "))


def satisfied(expression, allowed):
    """Whether an SPDX expression holds with the allowed licences (AND binds tighter)."""
    words = tokens(expression)
    position = 0

    def leaf():
        nonlocal position
        word = words[position]
        position += 1
        if word == "(":
            value = either()
            position += 1  # ")"
            return value
        if position < len(words) and words[position] == "WITH":
            word = f"{word} WITH {words[position + 1]}"
            position += 2
        return word.rstrip("+") in allowed

    def chain(joiner, operand, combine):
        """`operand (joiner operand)*`, each operand read (and so consumed) before combining."""
        nonlocal position
        value = operand()
        while position < len(words) and words[position] == joiner:
            position += 1
            value = combine(operand(), value)
        return value

    def both():
        return chain("AND", leaf, lambda a, b: a and b)

    def either():
        return chain("OR", both, lambda a, b: a or b)

    try:
        return either() and position == len(words)
    except IndexError:
        return False


def main():
    rules = tomllib.loads((ROOT / "deny.toml").read_text())
    allowed = set(rules["licenses"]["allow"])
    ignore_private = rules["licenses"].get("private", {}).get("ignore", False)
    bans = rules.get("bans", {})
    banned = {entry["name"] for entry in bans.get("deny", [])}
    metadata = json.loads(
        subprocess.run(
            ["cargo", "metadata", "--locked", "--all-features", "--format-version", "1"],
            cwd=ROOT,
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    )
    in_graph = {node["id"] for node in metadata["resolve"]["nodes"]}
    members = set(metadata["workspace_members"])
    packages = [p for p in metadata["packages"] if p["id"] in in_graph]
    problems = []
    for package in packages:
        name = f'{package["name"]} {package["version"]}'
        licence = package.get("license")
        if package["id"] in members and ignore_private and package.get("publish") == []:
            pass
        elif not licence:
            problems.append(f"{name}: no SPDX licence expression")
        elif not satisfied(licence, allowed):
            problems.append(f"{name}: licence {licence!r} is not allowed by deny.toml")
        if package["name"] in banned:
            problems.append(f"{name}: banned by deny.toml")
        if package["id"] in members and bans.get("wildcards") == "deny":
            for dep in package["dependencies"]:
                by_path = dep.get("path") and bans.get("allow-wildcard-paths", False)
                if dep["req"] == "*" and not by_path:
                    problems.append(f'{name}: wildcard version of {dep["name"]}')
    versions = collections.Counter(p["name"] for p in packages)
    doubles = sorted(n for n, count in versions.items() if count > 1)
    for problem in problems:
        print(f"licences/bans: {problem}", file=sys.stderr)
    if problems:
        return 1
    print(
        f"licences/bans: {len(packages)} packages checked against deny.toml; "
        f"several versions (not refused): {', '.join(doubles) or 'none'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
