// SPDX-License-Identifier: Apache-2.0
// The `spans` virtual table (module eacgm_spans): spans kept in blocks
// (store/span_layout.h) read as rows with version 3's columns, so any SQL
// users wrote against `spans` keeps working. eacgm registers it on every
// connection it opens to a recording; built alone as eacgm_sql.so it loads
// into the sqlite3 shell (`.load eacgm_sql`) and Python's sqlite3
// (`load_extension`). docs/store.md says how.
#pragma once
#include "common/result.h"

struct sqlite3;

namespace eacgm {

Result<void> register_span_module(sqlite3 *db);

} // namespace eacgm
