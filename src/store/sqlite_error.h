// SPDX-License-Identifier: Apache-2.0
// SQLite's failures as errors of their kind: a full disk is no space, a file
// that is not a database is bad input, an open or I/O failure has the kind
// of the system errno behind it. Not in the eacgm_sql extension (it links
// neither this nor common/result.cpp).
#pragma once
#include "common/result.h"

struct sqlite3;

namespace eacgm {

// The kind of a SQLite result code (primary or extended); system_errno
// (sqlite3_system_errno) tells open and I/O failures apart.
ErrorKind kind_of_sqlite(int rc, int system_errno = 0);
// The kind of db's last failure.
ErrorKind kind_of_sqlite(sqlite3 *db);
// db's last failure, with SQLite's message; where an open left no db
// (it could not allocate one), rc's.
Error sqlite_error(sqlite3 *db, int rc = 0);

} // namespace eacgm
