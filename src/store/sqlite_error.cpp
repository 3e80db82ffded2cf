// SPDX-License-Identifier: Apache-2.0
#include "store/sqlite_error.h"

#include <sqlite3.h>

namespace eacgm {

ErrorKind kind_of_sqlite(int rc, int system_errno)
{
	switch (rc & 0xff) {
	case SQLITE_FULL:
	case SQLITE_NOMEM: return ErrorKind::NoSpace;
	case SQLITE_PERM:
	case SQLITE_READONLY:
	case SQLITE_AUTH: return ErrorKind::Permission;
	case SQLITE_NOTADB:
	case SQLITE_CORRUPT:
	case SQLITE_FORMAT:
	case SQLITE_MISMATCH:
	case SQLITE_TOOBIG: return ErrorKind::BadInput;
	case SQLITE_CANTOPEN: // a missing directory, a file not allowed, ...
	case SQLITE_IOERR: return kind_of_errno(system_errno);
	default: return ErrorKind::Other;
	}
}

ErrorKind kind_of_sqlite(sqlite3 *db) { return kind_of_sqlite(sqlite3_extended_errcode(db), sqlite3_system_errno(db)); }

Error sqlite_error(sqlite3 *db, int rc)
{
	if (!db)
		return make_error(kind_of_sqlite(rc), sqlite3_errstr(rc));
	return make_error(kind_of_sqlite(db), sqlite3_errmsg(db));
}

} // namespace eacgm
