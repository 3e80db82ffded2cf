# SPDX-License-Identifier: Apache-2.0
"""error_text_check.py finds a caller that matches an error's text, and
leaves alone code that only passes the message on."""
import unittest

import error_text_check as check


class Offenders(unittest.TestCase):
    def test_matching_the_text_is_found(self):
        text = "\n".join([
            "auto r = open();",
            'if (r.error().message.find("no such table") != std::string::npos)',
            "\treturn make_error(r.error().message);",
            'if (e.message == "gone")',
            'if (err.message.starts_with("cannot"))',
            'if (std::regex_search(r.error().message, re))',
        ])
        self.assertEqual(check.offenders(text), [2, 4, 5, 6])

    def test_passing_it_on_is_not(self):
        text = "\n".join([
            'return make_error("cannot read " + path + ": " + ver.error().message);',
            "std::cerr << r.error().message << '\\n';",
            "if (r.error().kind == ErrorKind::NotFound)",
            '// a comment about message.find("x") is no caller',
        ])
        self.assertEqual(check.offenders(text), [])


if __name__ == "__main__":
    unittest.main()
