#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Every alert rule in dist/prometheus/eacgm-alerts.yml is tested (promtool's
test file has a case where it fires and one where it must not), and every
eacgm_* series a rule reads is one the agent exports (named in src/): a rule
on a series renamed or never written would never fire, silently.
Usage: alerts_covered.py SOURCE_DIR"""
import os
import re
import sys

import yaml


def main(root):
    rules = yaml.safe_load(open(os.path.join(root, "dist/prometheus/eacgm-alerts.yml")))
    tests = yaml.safe_load(open(os.path.join(root, "dist/prometheus/eacgm-alerts.test.yml")))
    alerts = {r["alert"]: r["expr"] for g in rules["groups"] for r in g["rules"]}
    fires, quiet = set(), set()
    for t in tests["tests"]:
        for case in t.get("alert_rule_test", []):
            (fires if case.get("exp_alerts") else quiet).add(case["alertname"])
    source = ""
    for d, _, files in os.walk(os.path.join(root, "src")):
        for f in files:
            if f.endswith((".cpp", ".h")):
                source += open(os.path.join(d, f)).read()
    problems = []
    for name, expr in sorted(alerts.items()):
        if name not in fires:
            problems.append("%s: no test case where it fires" % name)
        if name not in quiet:
            problems.append("%s: no test case where it must not fire" % name)
        for series in sorted(set(re.findall(r"\beacgm_[a-z0-9_]+", expr))):
            if '"%s"' % series not in source:
                problems.append("%s reads %s, which no source file in src/ exports" % (name, series))
    for p in problems:
        print("alerts: " + p, file=sys.stderr)
    print("alerts: %d rules checked, %d problems" % (len(alerts), len(problems)))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
