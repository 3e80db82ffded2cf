# SPDX-License-Identifier: Apache-2.0
"""eacgm's --help texts read as data: the subcommands (nested ones too) and
their options. Shared by tests/docs_check.py (the docs agree with --help) and
scripts/man.py (the manual page is made of them)."""
import re
import subprocess
import sys

# CLI11's list entries: two spaces, then the name (options: a dash).
ENTRY = re.compile(r"^  (\S+)")


def help_block(text, title):
    """The entries' first tokens under TITLE ("Options:", "Subcommands:")."""
    names, inside = [], False
    for line in text.splitlines():
        if line.strip() == title:
            inside = True
            continue
        if inside:
            if line and not line.startswith(" "):
                break
            m = ENTRY.match(line)
            if m:
                names.append(m.group(1))
    return names


def parse_help(text):
    """The long options of one --help text, --help left out:
    `-o,--output TEXT` gives --output, `--no-detect{false}` --no-detect."""
    options = set()
    for token in help_block(text, "Options:"):
        for name in token.split(","):
            name = name.split("{")[0]
            if name.startswith("--") and name != "--help":
                options.add(name)
    return options


def parse_subcommands(text):
    """The subcommands a --help lists, in its order."""
    return [t for t in help_block(text, "Subcommands:") if re.fullmatch(r"[a-z][a-z0-9-]*", t)]


def run_help(eacgm, args):
    """`EACGM ARGS --help`'s text; exits naming the command if it fails."""
    r = subprocess.run([eacgm] + args + ["--help"], capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        sys.exit("%s %s --help exited %d: %s" % (eacgm, " ".join(args), r.returncode, r.stderr))
    return r.stdout


def help_texts(eacgm):
    """SUB -> its --help text, for every subcommand and nested subcommand
    ("probes list"), in --help's order."""
    texts = {}
    for sub in parse_subcommands(run_help(eacgm, [])):
        texts[sub] = run_help(eacgm, [sub])
        for nested in parse_subcommands(texts[sub]):
            texts[sub + " " + nested] = run_help(eacgm, [sub, nested])
    return texts
