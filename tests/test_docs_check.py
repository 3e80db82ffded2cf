#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""docs_check.py's parsing and its verdicts, on a made-up --help and
commands.md (no binary needed).
Usage: python3 -m unittest test_docs_check (from tests/), or run it."""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import docs_check as D  # noqa: E402

TOP_HELP = """\
tool: does things
Usage: build/eacgm [OPTIONS] SUBCOMMAND

Options:
  -h,--help                   Print this help message and exit
  --version                   Display program version information and exit

Subcommands:
  record                      Record a command (after --) or a running process (-p)
  export                      Write a recording as a trace
  probes                      Find a library's functions
"""

RECORD_HELP = """\
Record a command (after --) or a running process (-p)
Usage: build/eacgm record [OPTIONS]

Options:
  -h,--help                   Print this help message and exit
  --layers TEXT ...           Layers to trace, comma separated (not --spec's)
  -o,--output TEXT            SQLite recording to write
  --sample-hz UINT:UINT in [0 - 10000]=1000
                              Python layer: samples per second (with --layers python)
  --no-detect{false}          Do not score calls online
  --perfetto TEXT Excludes: --sqlite
                              Trace to write


Ends when every traced process has exited; see --stop-timeout.
"""

EXPORT_HELP = """\
Write a recording as a trace
Usage: build/eacgm export [OPTIONS] recording

Positionals:
  recording TEXT REQUIRED     Recording (.db) written by 'eacgm record'

Options:
  -h,--help                   Print this help message and exit
  --perfetto TEXT Excludes: --sqlite
                              Trace to write
  --sqlite TEXT Excludes: --perfetto
                              SQLite file to write
"""

PROBES_HELP = """\
Find a library's functions
Usage: build/eacgm probes [OPTIONS] SUBCOMMAND

Options:
  -h,--help                   Print this help message and exit

Subcommands:
  list                        List the functions whose name matches
"""

LIST_HELP = """\
List the functions whose name matches
Usage: build/eacgm probes list [OPTIONS]

Options:
  -h,--help                   Print this help message and exit
  --lib TEXT REQUIRED         Library or executable
"""

COMMANDS = """\
# Commands

## Using it

```sh
sudo eacgm record -o run.db --layers cuda,nccl -- python train.py --epochs 3   # trace
eacgm probes list --lib libnccl.so.2 | head
```

## eacgm record

- `--layers LAYER,...`: layers to trace.
- `-o`, `--output FILE`: the recording.
- `--sample-hz HZ`: samples per second.
- `--no-detect`: no online scoring.

Its trace: `eacgm record --perfetto t.json -- ./app`. A copy with a row per
span: `eacgm export run.db
--sqlite flat.db` (another subcommand's flag), or `export --sqlite` for
short. Not its own: `make eval SEEDS=1`, `python3 -m unittest --failfast`,
`bpftrace --unsafe -e 'uprobe:...'`. `--` ends the options, as
`record -o run.db -- ./app --fast` shows.

### When it fails

Nothing more.

## eacgm export

- `--perfetto FILE`, or `--sqlite FILE`.

## eacgm probes

Its subcommand is `list`.

## eacgm probes list

- `--lib LIB`: the library.

## Elsewhere

`--anything` here is no section's.
"""

README = """\
# eacgm

```sh
sudo eacgm record --layers python -- python app.py
```

```
eacgm: warning: hang: gloo allreduce in flight for 1.0 s --- not a command
```

Then `eacgm probes list --lib ./libx.so`.
"""


def helps():
    return {
        "record": D.parse_help(RECORD_HELP),
        "export": D.parse_help(EXPORT_HELP),
        "probes": D.parse_help(PROBES_HELP),
        "probes list": D.parse_help(LIST_HELP),
    }


def docs(commands=COMMANDS, readme=README):
    return {"docs/commands.md": commands, "README.md": readme}


class Parsing(unittest.TestCase):
    def test_help_options(self):
        self.assertEqual(D.parse_help(RECORD_HELP),
                         {"--layers", "--output", "--sample-hz", "--no-detect", "--perfetto"})
        self.assertEqual(D.parse_help(PROBES_HELP), set())
        self.assertEqual(D.parse_help(TOP_HELP), {"--version"})

    def test_subcommands(self):
        self.assertEqual(D.parse_subcommands(TOP_HELP), ["record", "export", "probes"])
        self.assertEqual(D.parse_subcommands(PROBES_HELP), ["list"])
        self.assertEqual(D.parse_subcommands(LIST_HELP), [])

    def test_sections(self):
        self.assertEqual(D.parse_sections(COMMANDS, set(helps())), {
            "record": {"--layers", "--output", "--sample-hz", "--no-detect", "--perfetto"},
            "export": {"--perfetto", "--sqlite"},
            "probes": set(),
            "probes list": {"--lib"},
        })

    def test_command_flags(self):
        self.assertEqual(D.command_flags(COMMANDS, set(helps())), {
            "record": {"--layers", "--perfetto"},
            "export": {"--sqlite"},
            "probes list": {"--lib"},
        })
        self.assertEqual(D.command_flags(README, set(helps())), {
            "record": {"--layers"},
            "probes list": {"--lib"},
        })


class Check(unittest.TestCase):
    def test_agreeing(self):
        self.assertEqual(D.check(helps(), docs()), [])

    def test_option_missing_from_its_section(self):
        h = helps()
        h["record"].add("--ring-buffer-kb")
        self.assertEqual(D.check(h, docs()), [
            "docs/commands.md: eacgm record: --ring-buffer-kb (in its --help) is not in its section",
        ])

    def test_section_shows_a_flag_help_lacks(self):
        h = helps()
        h["record"].discard("--sample-hz")
        self.assertEqual(D.check(h, docs()), [
            "docs/commands.md: eacgm record: --sample-hz is not an option of eacgm record --help",
        ])

    def test_option_left_out_of_the_docs(self):
        commands = COMMANDS.replace("- `--no-detect`: no online scoring.\n", "")
        self.assertNotEqual(commands, COMMANDS)
        self.assertEqual(D.check(helps(), docs(commands=commands)), [
            "docs/commands.md: eacgm record: --no-detect (in its --help) is not in its section",
        ])

    def test_command_line_with_a_flag_help_lacks(self):
        readme = README.replace("--layers python", "--layers python --turbo")
        self.assertEqual(D.check(helps(), docs(readme=readme)), [
            "README.md: eacgm record: --turbo (on a command line) is not an option of eacgm record --help",
        ])

    def test_command_line_of_no_subcommand(self):
        readme = README + "\nOr `sudo eacgm frobnicate --x`.\n"
        self.assertEqual(D.check(helps(), docs(readme=readme)), [
            "README.md: eacgm frobnicate: no such subcommand (on a command line)",
        ])

    def test_subcommand_without_a_section(self):
        h = helps()
        h["doctor"] = set()
        self.assertEqual(D.check(h, docs()), [
            "docs/commands.md: eacgm doctor: no section \"## eacgm doctor\"",
        ])


if __name__ == "__main__":
    unittest.main()
