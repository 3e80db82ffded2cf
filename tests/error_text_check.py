#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""No caller matches an error's text: what failed is the error's kind
(common/result.h's ErrorKind), and the message is for the user, free to
change. Fails (exit 1, one line per place) on code under src/ that searches
or compares an Error's message: `.message.find(`, `.message ==`,
`.message.starts_with(`, a regex over it, and the like.
Usage: error_text_check.py SOURCE_DIR"""
import os
import re
import sys

import source_check  # tests/source_check.py, beside this file

# A message read for its text: searched, compared, or matched.
MATCHES = re.compile(
    r"""\bmessage\s*\.\s*(?:find|rfind|find_first_of|starts_with|ends_with|contains|compare|substr)\s*\("""
    r"""|\bmessage\s*[!=]=|[!=]=\s*[\w.()>-]*\bmessage\b(?!\s*\()"""
    r"""|regex_\w+\s*\([^;]*\bmessage\b"""
    r"""|strstr\s*\([^;]*\bmessage\b""")


def offenders(text):
    """The 1-based numbers of the lines of text that match an error's text."""
    return [i for i, line in enumerate(text.splitlines(), 1)
            if MATCHES.search(line) and not line.lstrip().startswith("//")]


def problems_of(root):
    problems = []
    for base, _dirs, files in os.walk(os.path.join(root, "src")):
        for name in sorted(files):
            if not name.endswith((".cpp", ".h")):
                continue
            path = os.path.join(base, name)
            with open(path, encoding="utf-8") as f:
                for n in offenders(f.read()):
                    problems.append("%s:%d: matches an error's text; test its kind (ErrorKind) instead"
                                    % (os.path.relpath(path, root), n))
    return problems, "error_text_check: no caller under src/ matches an error's text"


def main(argv):
    return source_check.run(argv, __doc__, problems_of)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
