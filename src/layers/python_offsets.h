// SPDX-License-Identifier: Apache-2.0
// Where CPython keeps what a frame walker needs, per minor version. The
// layouts change with every release (3.11 moved frames out of objects, 3.12
// and 3.13 moved them again), so they are data: specs/python.json holds a
// table for 3.8 to 3.13, and the build measures the installed interpreters'
// headers (tools/pyoffsets.c) to check it.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <iterator>
#include <utility>
#include <vector>

#include "common/result.h"

namespace eacgm {

// An offset that does not exist in a version.
constexpr uint16_t kNoOffset = 0xffff;

struct PyOffsets {
	int major = 3, minor = 0;
	// Finding the thread's state: _PyRuntime -> interpreters.head ->
	// threads.head (tstate_head before 3.11) -> next ..., matching native_thread_id.
	uint16_t runtime_interpreters_head = kNoOffset;
	uint16_t interp_threads_head = kNoOffset;
	uint16_t tstate_next = kNoOffset;
	uint16_t tstate_native_thread_id = kNoOffset; // 3.11+ only (the kernel tid)
	// All versions: pthread_self() of the thread, which glibc keeps at a fixed
	// distance from the thread pointer (src/arch): the match key before 3.11.
	uint16_t tstate_thread_id = kNoOffset;
	// The innermost frame: tstate->frame (3.8-3.10, a PyFrameObject*),
	// tstate->cframe->current_frame (3.11, 3.12), tstate->current_frame (3.13).
	uint16_t tstate_frame = kNoOffset;
	uint16_t tstate_cframe = kNoOffset;
	uint16_t cframe_current_frame = kNoOffset;
	// A frame (PyFrameObject before 3.11, _PyInterpreterFrame since).
	uint16_t frame_previous = kNoOffset; // f_back / previous
	uint16_t frame_code = kNoOffset;     // f_code / f_executable (3.13)
	uint16_t frame_instr = kNoOffset;    // f_lasti (int) / prev_instr / instr_ptr (3.13)
	uint16_t frame_owner = kNoOffset;    // 3.12+: char owner (3 = owned by the C stack: a shim, skip)
	uint16_t frame_globals = kNoOffset;  // f_globals: with the code object, the walker's code cache key
	// A code object.
	uint16_t code_filename = kNoOffset;
	uint16_t code_name = kNoOffset;
	uint16_t code_qualname = kNoOffset; // 3.11+; co_name before
	uint16_t code_firstlineno = kNoOffset;
	uint16_t code_linetable = kNoOffset; // co_lnotab (3.8, 3.9) / co_linetable (3.10+)
	uint16_t code_adaptive = kNoOffset;  // 3.11+: co_code_adaptive, where instructions start
	// Strings and bytes: where the characters of a compact ASCII str start,
	// and a bytes object's size and data.
	uint16_t unicode_ascii_data = kNoOffset;
	uint16_t bytes_size = kNoOffset;
	uint16_t bytes_data = kNoOffset;
};

// Every field by its name. The JSON names are the struct's field names, so
// the table, the measuring tool (tools/pyoffsets.c) and the code read the same.
inline constexpr std::pair<const char *, uint16_t PyOffsets::*> kPyOffsetFields[] = {
	{"runtime_interpreters_head", &PyOffsets::runtime_interpreters_head},
	{"interp_threads_head", &PyOffsets::interp_threads_head},
	{"tstate_next", &PyOffsets::tstate_next},
	{"tstate_native_thread_id", &PyOffsets::tstate_native_thread_id},
	{"tstate_thread_id", &PyOffsets::tstate_thread_id},
	{"tstate_frame", &PyOffsets::tstate_frame},
	{"tstate_cframe", &PyOffsets::tstate_cframe},
	{"cframe_current_frame", &PyOffsets::cframe_current_frame},
	{"frame_previous", &PyOffsets::frame_previous},
	{"frame_code", &PyOffsets::frame_code},
	{"frame_instr", &PyOffsets::frame_instr},
	{"frame_owner", &PyOffsets::frame_owner},
	{"frame_globals", &PyOffsets::frame_globals},
	{"code_filename", &PyOffsets::code_filename},
	{"code_name", &PyOffsets::code_name},
	{"code_qualname", &PyOffsets::code_qualname},
	{"code_firstlineno", &PyOffsets::code_firstlineno},
	{"code_linetable", &PyOffsets::code_linetable},
	{"code_adaptive", &PyOffsets::code_adaptive},
	{"unicode_ascii_data", &PyOffsets::unicode_ascii_data},
	{"bytes_size", &PyOffsets::bytes_size},
	{"bytes_data", &PyOffsets::bytes_data},
};
// A field added to PyOffsets needs a line above (two ints, then uint16s).
static_assert(sizeof(PyOffsets) == (2 * sizeof(int) + std::size(kPyOffsetFields) * 2 + 3) / 4 * 4);

// CPython 3.13+ starts _PyRuntime with _Py_DebugOffsets: the interpreter's
// own statement of its layout, for tools like this one. Where it keeps the
// offset of each field the walker uses (byte positions in that struct, 3.13's
// layout), kNoOffset where it has none.
PyOffsets debug_offset_positions(int minor);
// How many bytes of _Py_DebugOffsets debug_offset_positions() reaches into.
constexpr size_t kDebugOffsetsBytes = 576;

struct CheckedOffsets {
	PyOffsets offsets;               // the table's, with the interpreter's where they differ
	std::vector<std::string> differ; // "tstate_next: table 8, interpreter 16"
};
// Compares the table with an interpreter's _Py_DebugOffsets (image: its
// first bytes, read from the process). Fails when the image is not one (no
// "xdebugpy" cookie) or states another version than the table's.
Result<CheckedOffsets> check_debug_offsets(const PyOffsets &table, const uint8_t *image, size_t len);

// "3.11" -> offsets, from the JSON text of specs/python.json.
Result<std::map<std::string, PyOffsets>> parse_python_offsets(const std::string &json_text, const std::string &origin);
// The built-in table (specs/python.json).
Result<std::map<std::string, PyOffsets>> load_python_offsets();

} // namespace eacgm
