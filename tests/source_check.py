# SPDX-License-Identifier: Apache-2.0
"""What the source checks share (error_text_check.py, arch_names_check.py):
the command line (one argument, the source tree) and the report (a line per
problem and exit 1, or one line saying what was found clean)."""
import sys


def run(argv, doc, problems_of):
    """problems_of(root) -> (problems, clean_line); prints and returns the exit status."""
    if len(argv) != 2:
        print(doc.strip().splitlines()[-1], file=sys.stderr)
        return 2
    problems, clean = problems_of(argv[1])
    for p in problems:
        print(p)
    if not problems:
        print(clean)
    return 1 if problems else 0
