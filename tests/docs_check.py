#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The docs and the command line agree: every option a subcommand's --help
lists is in that subcommand's section of docs/commands.md ("## eacgm SUB"),
every --flag that section shows is one of them, and every command line of the
docs (README.md, docs/*.md) that starts with `eacgm SUB` gives only flags that
SUB's --help lists, and names a subcommand that exists. Every subcommand
(nested ones too: `eacgm probes list`) has a section.
Usage: docs_check.py EACGM SOURCE_DIR
Prints one line per problem, naming the file, the subcommand and the flag, and
exits 1 if there is any."""
import glob
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
# scripts/cli_help.py; parse_subcommands is read by test_docs_check through this module.
from cli_help import help_texts, parse_help, parse_subcommands  # noqa: E402,F401

COMMANDS_MD = "docs/commands.md"

# A long option as a word: --fpr, --no-detect; not `--` alone.
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9]*(?:-[a-z0-9]+)*")
SECTION = re.compile(r"^##\s+`?eacgm\s+([a-z][a-z0-9 -]*?)`?\s*$")
FENCE = re.compile(r"^\s*(```|~~~)")
# What may come before `eacgm` on a command line: a prompt, variables, sudo.
PREFIX = re.compile(r"^(?:\$\s+)?(?:[A-Z_][A-Z0-9_]*=\S*\s+)*(?:sudo\s+(?:-\S+\s+)*)?")


def pieces(md_text):
    """The text as ("code", line) for each line of a fenced code block (a line
    ending in a backslash joined to the next) and ("prose", paragraph) for
    the rest, a paragraph's lines joined, so an inline code span may break
    across lines."""
    out, para, inside = [], [], False

    def flush():
        if para:
            out.append(("prose", " ".join(para)))
            para.clear()

    for line in md_text.splitlines():
        if FENCE.match(line):
            flush()
            inside = not inside
            continue
        if inside:
            if out and out[-1][0] == "code" and out[-1][1].endswith("\\"):
                out[-1] = ("code", out[-1][1][:-1] + " " + line.strip())
            else:
                out.append(("code", line.strip()))
        elif line.strip():
            para.append(line.strip())
        else:
            flush()
    flush()
    return out


INLINE = re.compile(r"`([^`]+)`")


def split_command(span, known=None):
    """(SUB, the rest) for a span that starts with `eacgm SUB` (after a
    prompt, variables or sudo), SUB one of KNOWN, a nested one as
    "probes list"; else None. Without KNOWN, SUB is the word after eacgm."""
    rest = PREFIX.sub("", span.strip(), count=1)
    m = re.match(r"(?:\S*/)?eacgm\s+(\S+)(.*)$", rest)
    if not m:
        return None
    sub, rest = m.group(1), m.group(2)
    if known is None:
        return (sub, rest) if re.fullmatch(r"[a-z][a-z0-9-]*", sub) else None
    if sub not in known:
        return None
    n = re.match(r"\s+(\S+)(.*)$", rest)
    if n and sub + " " + n.group(1) in known:
        sub, rest = sub + " " + n.group(1), n.group(2)
    return sub, rest


def flags_of(rest):
    """The flags given on a command line after its subcommand: up to a
    comment, `--` (what follows is the traced command's) or a pipe; a flag in
    brackets (optional) counts, a flag's value does not."""
    flags = set()
    for word in rest.split():
        if word.startswith("#") or word in ("--", "|", "&&", ";", ">"):
            break
        m = re.match(r"^\[?(--[a-z][a-z0-9-]*)(?:[=\]]|$)", word)
        if m:
            flags.add(m.group(1))
    return flags


def scan(md_text, known=None, own=None):
    """(SUB -> flags on its command lines, the flags shown elsewhere). With
    OWN (a section's subcommand), a code span or line that starts with a word
    is a command line: its flags are shown when it is OWN's (`record -o F`),
    and left out when it is another program's (`python3 -m unittest`,
    `bpftrace -e`) or another subcommand's."""
    commands, loose = {}, set()

    def command(span):
        found = split_command(span, known)
        if found:
            commands.setdefault(found[0], set()).update(flags_of(found[1]))
            return True
        words = span.split()
        if own is None or not words or words[0].startswith("-"):
            return False
        if " ".join(words[:len(own.split())]) == own:
            loose.update(flags_of(" ".join(words[len(own.split()):])))
        return True

    for kind, text in pieces(md_text):
        if kind == "code":
            if not command(text):
                loose.update(FLAG.findall(text))
        else:
            rest = INLINE.sub(lambda m: " " if command(m.group(1)) else m.group(0), text)
            loose.update(FLAG.findall(rest))
    return commands, loose


def command_flags(md_text, known=None):
    """SUB -> the flags given on the `eacgm SUB ...` command lines of a
    markdown text: its code blocks' lines and its inline code spans. KNOWN:
    the subcommands, nested ones as "probes list"; without it SUB is the
    word after eacgm."""
    return scan(md_text, known)[0]


def parse_sections(md_text, known=None):
    """SUB -> the flags its "## eacgm SUB" section shows: those in its text
    and those on its own command lines (a command line of another subcommand
    counts for that one). A section ends at the next heading of level 1 or
    2."""
    sections, current, lines, inside = {}, None, [], False

    def close():
        if current is not None:
            commands, loose = scan("\n".join(lines), (known or set()) | {current}, current)
            sections[current] = loose | commands.get(current, set())

    for line in md_text.splitlines():
        if FENCE.match(line):
            inside = not inside
        heading = None if inside else re.match(r"^#{1,2}\s", line)
        if heading:
            close()
            m = SECTION.match(line)
            current, lines = (" ".join(m.group(1).split()) if m else None), []
            continue
        if current is not None:
            lines.append(line)
    close()
    return sections


def check(helps, docs):
    """HELPS: SUB -> its --help's long options. DOCS: file name (relative to
    the source tree) -> markdown text; docs/commands.md among them. The
    problems, one line each."""
    problems = []
    known = set(helps)
    sections = parse_sections(docs.get(COMMANDS_MD, ""), known)
    for sub in sorted(helps):
        if sub not in sections:
            problems.append("%s: eacgm %s: no section \"## eacgm %s\"" % (COMMANDS_MD, sub, sub))
            continue
        for flag in sorted(helps[sub] - sections[sub]):
            problems.append("%s: eacgm %s: %s (in its --help) is not in its section" % (COMMANDS_MD, sub, flag))
        for flag in sorted(sections[sub] - helps[sub]):
            problems.append("%s: eacgm %s: %s is not an option of eacgm %s --help" % (COMMANDS_MD, sub, flag, sub))
    for sub in sorted(set(sections) - known):
        problems.append("%s: eacgm %s: a section for no such subcommand" % (COMMANDS_MD, sub))
    top = {sub.split()[0] for sub in helps}
    for name in sorted(docs):
        for sub in sorted(set(command_flags(docs[name])) - top):
            problems.append("%s: eacgm %s: no such subcommand (on a command line)" % (name, sub))
        for sub, flags in sorted(command_flags(docs[name], known).items()):
            for flag in sorted(flags - helps[sub]):
                problems.append("%s: eacgm %s: %s (on a command line) is not an option of eacgm %s --help" %
                                (name, sub, flag, sub))
    return problems


def helps_of(eacgm):
    """SUB -> options, for every subcommand and nested subcommand."""
    return {sub: parse_help(text) for sub, text in help_texts(eacgm).items()}


def main(eacgm, root):
    helps = helps_of(eacgm)
    if not helps:
        sys.exit("docs_check: %s --help lists no subcommands" % eacgm)
    docs = {}
    for path in [os.path.join(root, "README.md")] + sorted(glob.glob(os.path.join(root, "docs", "*.md"))):
        with open(path, encoding="utf-8") as f:
            docs[os.path.relpath(path, root)] = f.read()
    if COMMANDS_MD not in docs:
        sys.exit("docs_check: no %s" % COMMANDS_MD)
    problems = check(helps, docs)
    for p in problems:
        print(p)
    if problems:
        return 1
    print("docs_check: %d subcommands, %d options, each in %s; %d files' command lines agree with --help" %
          (len(helps), sum(len(o) for o in helps.values()), COMMANDS_MD, len(docs)))
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1], sys.argv[2]))
