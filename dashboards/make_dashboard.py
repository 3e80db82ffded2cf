#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Writes dashboards/eacgm.json, the Grafana dashboard of eacgm serve's
metrics, from the panel list below (one place for every PromQL expression:
tests/e2e/test_serve.py runs each against a real Prometheus).
Usage: dashboards/make_dashboard.py  (rewrites eacgm.json beside it)"""
import json
import os

DS = {"type": "prometheus", "uid": "${datasource}"}

# (row, [(title, kind, unit, [(expr, legend), ...]), ...])
ROWS = [
    ("Calls", [
        ("Calls per second by layer", "timeseries", "ops",
         [('sum by (layer) (rate(eacgm_calls_total[1m]))', "{{layer}}")]),
        ("Latency p50 / p99 by layer", "timeseries", "s",
         [('histogram_quantile(0.5, sum by (layer, le) (rate(eacgm_call_duration_seconds_bucket[5m])))',
           "p50 {{layer}}"),
          ('histogram_quantile(0.99, sum by (layer, le) (rate(eacgm_call_duration_seconds_bucket[5m])))',
           "p99 {{layer}}")]),
        ("Slowest functions (mean, 5 min)", "table", "s",
         [('topk(15, sum by (layer, function) (rate(eacgm_call_duration_seconds_sum[5m])) / '
           'sum by (layer, function) (rate(eacgm_call_duration_seconds_count[5m])))', "")]),
        ("Time spent per function (share of a core)", "timeseries", "percentunit",
         [('topk(10, sum by (layer, function) (rate(eacgm_call_duration_seconds_sum[1m])))',
           "{{layer}} {{function}}")]),
        ("Errors per second", "timeseries", "ops",
         [('topk(10, sum by (layer, function) (rate(eacgm_call_errors_total[1m])))', "{{layer}} {{function}}")]),
    ]),
    ("Communication", [
        ("Collective and copy bandwidth", "timeseries", "Bps",
         [('sum by (layer, function) (rate(eacgm_bytes_total{layer=~"nccl|cuda"}[1m]))',
           "{{layer}} {{function}}")]),
        ("Collectives per second", "timeseries", "ops",
         [('sum by (function) (rate(eacgm_calls_total{layer="nccl"}[1m]))', "{{function}}")]),
    ]),
    ("GPU", [
        ("GPU utilisation", "timeseries", "percent", [('eacgm_gpu_util_gpu_pct', "{{key}}")]),
        ("GPU memory used", "timeseries", "bytes", [('eacgm_gpu_mem_used_bytes', "{{key}}")]),
        ("GPU power", "timeseries", "watt", [('eacgm_gpu_power_w', "{{key}}")]),
        ("GPU memory per process", "timeseries", "bytes",
         [('eacgm_gpu_proc_mem_used_bytes * on (pid) group_left (comm) eacgm_process_info',
           "{{comm}} ({{pid}}) {{key}}")]),
    ]),
    ("Host interference", [
        ("Scheduling delay per process (per interval)", "timeseries", "s",
         [('eacgm_host_sched_delay_seconds * on (pid) group_left (comm) eacgm_process_info', "{{comm}} ({{pid}})")]),
        ("Off-CPU time per process (per interval)", "timeseries", "s",
         [('eacgm_host_offcpu_seconds * on (pid) group_left (comm) eacgm_process_info', "{{comm}} ({{pid}})")]),
    ]),
    ("Anomalies", [
        ("Anomalies by layer and cause (5 min)", "timeseries", "short",
         [('sum by (layer, cause) (increase(eacgm_anomalies_total[5m])) or on () vector(0)', "{{layer}} {{cause}}")]),
    ]),
    ("Agent", [
        ("Agent CPU (share of a core)", "timeseries", "percentunit",
         [('rate(eacgm_agent_cpu_seconds_total[1m])', "cpu")]),
        ("Agent memory", "timeseries", "bytes", [('eacgm_agent_rss_bytes', "rss")]),
        ("Records read and lost per second", "timeseries", "ops",
         [('rate(eacgm_agent_records_read_total[1m])', "read"),
          ('sum by (layer, reason) (rate(eacgm_records_lost_total[1m]))', "lost {{layer}} {{reason}}")]),
        ("Probes attached and processes traced", "timeseries", "short",
         [('sum by (layer) (eacgm_agent_probes_attached)', "probes {{layer}}"),
          ('eacgm_agent_processes_traced', "processes")]),
        ("Store on disk", "timeseries", "bytes", [('eacgm_agent_store_bytes', "store")]),
    ]),
]


def dashboard():
    panels, y, pid = [], 0, 1
    for row, row_panels in ROWS:
        panels.append({"type": "row", "title": row, "id": pid, "collapsed": False,
                       "gridPos": {"h": 1, "w": 24, "x": 0, "y": y}})
        pid, y = pid + 1, y + 1
        for i, (title, kind, unit, targets) in enumerate(row_panels):
            x = (i % 2) * 12
            if i and i % 2 == 0:
                y += 8
            panel = {"type": kind, "title": title, "id": pid, "datasource": DS,
                     "gridPos": {"h": 8, "w": 12, "x": x, "y": y},
                     "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
                     "targets": [{"refId": chr(ord("A") + k), "datasource": DS, "expr": e, "legendFormat": l,
                                  **({"format": "table", "instant": True} if kind == "table" else {})}
                                 for k, (e, l) in enumerate(targets)]}
            panels.append(panel)
            pid += 1
        y += 8
    return {
        "title": "eacgm node agent", "uid": "eacgm-node", "schemaVersion": 38, "version": 1,
        "tags": ["eacgm", "ebpf", "ml"], "time": {"from": "now-1h", "to": "now"}, "refresh": "30s",
        "templating": {"list": [{"name": "datasource", "type": "datasource", "query": "prometheus",
                                 "label": "Prometheus", "current": {}}]},
        "panels": panels,
    }


if __name__ == "__main__":
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "eacgm.json")
    with open(out, "w") as f:
        json.dump(dashboard(), f, indent=2)
        f.write("\n")
    print("wrote", out)
