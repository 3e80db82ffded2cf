// SPDX-License-Identifier: Apache-2.0
/* Measures, with offsetof on the real structs, the offsets a frame walker
 * needs (struct PyOffsets in src/layers/python_offsets.h) for the one Python
 * whose headers it is compiled against, and prints them as
 * {"3.X": {"field": offset, ...}}. The build runs it for every installed
 * interpreter (tools/CMakeLists.txt) so tests can check specs/python.json.
 *
 *   cc -DPy_BUILD_CORE -I<inc>/python3.X -I<inc>/python3.X/internal pyoffsets.c
 *
 * Fields a version does not have are left out (the loader keeps kNoOffset). */
#ifndef Py_BUILD_CORE
#define Py_BUILD_CORE 1 /* the internal headers refuse to compile without it */
#endif
#include <Python.h>
#include <frameobject.h>
#include <stddef.h>
#include <stdio.h>

#if PY_MAJOR_VERSION != 3 || PY_MINOR_VERSION < 8 || PY_MINOR_VERSION > 13
#error "tools/pyoffsets.c knows CPython 3.8 to 3.13"
#endif

#if PY_MINOR_VERSION == 8
/* 3.8 keeps the runtime and interpreter structs in one internal header. */
#include <internal/pycore_pystate.h>
#else
#if PY_MINOR_VERSION >= 11
#include <internal/pycore_frame.h> /* _PyInterpreterFrame */
#endif
#include <internal/pycore_interp.h>
#include <internal/pycore_runtime.h>
#endif

static int first = 1;
static void field(const char *name, size_t off)
{
	printf("%s\n    \"%s\": %zu", first ? "" : ",", name, off);
	first = 0;
}
#define F(name, type, member) field(#name, offsetof(type, member))

int main(void)
{
	printf("{\n  \"%d.%d\": {", PY_MAJOR_VERSION, PY_MINOR_VERSION);
	F(runtime_interpreters_head, _PyRuntimeState, interpreters.head);
#if PY_MINOR_VERSION < 11
	F(interp_threads_head, PyInterpreterState, tstate_head);
#else
	F(interp_threads_head, PyInterpreterState, threads.head);
#endif
	F(tstate_next, PyThreadState, next);
	/* pthread_self() of the thread: on glibc x86-64 the thread's fs base,
	 * which BPF can read from the task (the only key before 3.11). */
	F(tstate_thread_id, PyThreadState, thread_id);
#if PY_MINOR_VERSION >= 11
	F(tstate_native_thread_id, PyThreadState, native_thread_id);
#endif

#if PY_MINOR_VERSION <= 10
	F(tstate_frame, PyThreadState, frame);
	F(frame_previous, PyFrameObject, f_back);
	F(frame_code, PyFrameObject, f_code);
	F(frame_instr, PyFrameObject, f_lasti);
	F(frame_globals, PyFrameObject, f_globals);
#elif PY_MINOR_VERSION <= 12
	F(tstate_cframe, PyThreadState, cframe);
	F(cframe_current_frame, _PyCFrame, current_frame);
	F(frame_previous, _PyInterpreterFrame, previous);
	F(frame_code, _PyInterpreterFrame, f_code);
	F(frame_instr, _PyInterpreterFrame, prev_instr);
	F(frame_globals, _PyInterpreterFrame, f_globals);
#else
	F(tstate_frame, PyThreadState, current_frame);
	F(frame_previous, _PyInterpreterFrame, previous);
	F(frame_code, _PyInterpreterFrame, f_executable);
	F(frame_instr, _PyInterpreterFrame, instr_ptr);
	F(frame_globals, _PyInterpreterFrame, f_globals);
#endif
#if PY_MINOR_VERSION >= 12
	/* 3.11 has an owner byte too, but no C-stack shim frames to skip. */
	F(frame_owner, _PyInterpreterFrame, owner);
#endif

	F(code_filename, PyCodeObject, co_filename);
	F(code_name, PyCodeObject, co_name);
#if PY_MINOR_VERSION >= 11
	F(code_qualname, PyCodeObject, co_qualname);
#endif
	F(code_firstlineno, PyCodeObject, co_firstlineno);
#if PY_MINOR_VERSION <= 9
	F(code_linetable, PyCodeObject, co_lnotab);
#else
	F(code_linetable, PyCodeObject, co_linetable);
#endif
#if PY_MINOR_VERSION >= 11
	F(code_adaptive, PyCodeObject, co_code_adaptive);
#endif

	field("unicode_ascii_data", sizeof(PyASCIIObject));
	F(bytes_size, PyVarObject, ob_size);
	F(bytes_data, PyBytesObject, ob_sval);
	printf("\n  }\n}\n");
	return 0;
}
