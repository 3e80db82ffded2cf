#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Writes eacgm's manual page, eacgm(1), from its --help texts with Debian's
help2man: the top-level help, then a COMMANDS section with every subcommand's
help (nested ones too), FILES and SEE ALSO. Made at build time, so the page
says what the binary does and cannot drift from it (docs/install.md).
Usage: man.py EACGM OUT.1"""
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli_help import help_texts  # noqa: E402

FILES = r"""[FILES]
.TP
.I /etc/eacgm/eacgm.toml
the agent's configuration (\fBeacgm serve\fR); every key is optional
.TP
.I /var/lib/eacgm/eacgm.db
the agent's store
.TP
.I /usr/share/eacgm/specs
the built-in probe specs
.TP
.I /usr/lib/eacgm/eacgm_sql.so
the \fBspans\fR table for the sqlite3 shell and Python (\fB.load\fR)
.TP
.I /usr/share/eacgm/dashboards, /usr/share/eacgm/prometheus
the Grafana dashboard and the Prometheus alert rules
"""

SEE_ALSO = r"""[SEE ALSO]
.BR systemctl (1),
.BR sqlite3 (1);
the documentation at https://github.com/eacgm/eacgm/tree/main/docs
"""


def roff_verbatim(text):
    """TEXT as a no-fill block: backslashes escaped, and a leading dot or
    quote kept from being read as a request."""
    lines = []
    for line in text.rstrip("\n").splitlines():
        line = line.replace("\\", "\\e")
        if line.startswith((".", "'")):
            line = "\\&" + line
        lines.append(line)
    return ".nf\n" + "\n".join(lines) + "\n.fi\n"


def commands_section(eacgm, texts):
    out = ["[COMMANDS]\n"]
    for sub, text in texts.items():
        # The usage line names the binary by the path it was run as.
        text = text.replace("Usage: %s " % eacgm, "Usage: eacgm ")
        out.append(".SS \"eacgm %s\"\n" % sub)
        out.append(roff_verbatim(text))
    return "".join(out)


def main(eacgm, out):
    texts = help_texts(eacgm)
    if not texts:
        sys.exit("man.py: %s --help lists no subcommands" % eacgm)
    with tempfile.NamedTemporaryFile("w", suffix=".h2m") as inc:
        inc.write(commands_section(eacgm, texts) + FILES + SEE_ALSO)
        inc.flush()
        r = subprocess.run(["help2man", "--no-info", "--no-discard-stderr", "--section", "1",
                            "--name", "trace and diagnose machine-learning jobs with eBPF",
                            "--version-string", version(eacgm), "--include", inc.name,
                            "--output", out, eacgm], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("man.py: help2man failed (%d): %s" % (r.returncode, r.stderr))
    return 0


def version(eacgm):
    return subprocess.run([eacgm, "--version"], capture_output=True, text=True, check=True).stdout.strip()


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__.split("Usage: ")[1])
    sys.exit(main(sys.argv[1], sys.argv[2]))
