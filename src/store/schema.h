// SPDX-License-Identifier: Apache-2.0
// The tables every recording layout shares (schema 4's, written by
// store.cpp, and version 3's, which `export --sqlite` writes in flat.cpp):
// one text, so that the two cannot drift apart. SQL, as string literals.
#pragma once

// meta, processes, threads.
#define EACGM_SCHEMA_HEAD                                                                                              \
	"CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);\n"                                              \
	"CREATE TABLE processes(pid INTEGER PRIMARY KEY, ppid INTEGER, comm TEXT, cmdline TEXT,\n"                     \
	"                       start_ns INTEGER, end_ns INTEGER, exit_code INTEGER);\n"                               \
	"CREATE TABLE threads(pid INTEGER, tid INTEGER, name TEXT, PRIMARY KEY(pid, tid));\n"

// drops, events, anomalies (metrics differ: a table in version 3, blocks in 4).
#define EACGM_SCHEMA_TAIL                                                                                              \
	"CREATE TABLE drops(layer TEXT, reason TEXT, count INTEGER);\n"                                                \
	"CREATE TABLE events(ts_ns INTEGER, layer TEXT, name TEXT, key TEXT, pid INTEGER, tid INTEGER,\n"              \
	"                    args TEXT /* JSON object */);\n"                                                          \
	"CREATE TABLE anomalies(ts_ns INTEGER, dur_ns INTEGER, pid INTEGER, tid INTEGER, layer TEXT, name TEXT,\n"     \
	"                       score REAL, threshold REAL, features TEXT /* JSON object */,\n"                        \
	"                       causes TEXT /* JSON array, ranked */,\n"                                               \
	"                       detected_ns INTEGER /* the live detector's flag, CLOCK_MONOTONIC; 0: eacgm detect "    \
	"*/);\n"
