// SPDX-License-Identifier: Apache-2.0
// Errors as values: every fallible step returns Result<T>, and the message is
// written for the user (it names the problem and the fix).
#pragma once
#include <string>
#include <utility>
#include <variant>

namespace eacgm {

// What failed, for a caller that acts on it (a recording that is not one
// is said so, a full disk is not retried): callers test the kind, never the
// message's text (tests/error_text_check.py fails on a caller that does).
enum class ErrorKind {
	Other,      // none of the below, or not known
	NotFound,   // a file, process, table or symbol that is not there
	Permission, // not allowed: privileges, capabilities, file modes
	NoSpace,    // a full disk or quota, or no memory
	BadInput,   // input that is not what it must be: a file of another kind, a bad value
};

// Made with its kind, always (make_error, errno_error, with_context): an
// error without one does not compile, rather than passing as Other.
struct Error {
	Error() = default; // Result<void>'s, unused while it holds no error
	Error(std::string message, ErrorKind kind) : message(std::move(message)), kind(kind) {}
	std::string message;
	ErrorKind kind = ErrorKind::Other;
};

template <class T>
class [[nodiscard]] Result {
public:
	Result(T value) : v_(std::move(value)) {}
	Result(Error e) : v_(std::move(e)) {}
	bool ok() const { return v_.index() == 0; }
	explicit operator bool() const { return ok(); }
	T &value() & { return std::get<0>(v_); }
	T &&value() && { return std::get<0>(std::move(v_)); }
	const T &value() const & { return std::get<0>(v_); }
	T &operator*() & { return value(); }
	T *operator->() { return &value(); }
	const T *operator->() const { return &value(); }
	const Error &error() const { return std::get<1>(v_); }

private:
	std::variant<T, Error> v_;
};

template <>
class [[nodiscard]] Result<void> {
public:
	Result() = default;
	Result(Error e) : err_(std::move(e)), ok_(false) {}
	bool ok() const { return ok_; }
	explicit operator bool() const { return ok_; }
	const Error &error() const { return err_; }

private:
	Error err_;
	bool ok_ = true;
};

inline Error make_error(ErrorKind kind, std::string msg) { return Error{std::move(msg), kind}; }
// A callee's error told with more context ("<prefix><message><after>"): its
// kind is what failed, and stays. Inline, as make_error: the eacgm_sql
// extension does not link result.cpp.
inline Error with_context(const Error &e, const std::string &prefix, const std::string &after = "")
{
	return Error{prefix + e.message + after, e.kind};
}

// The kind of an errno value (ENOENT: NotFound, EACCES: Permission, ...).
ErrorKind kind_of_errno(int err);
// An error of errno err's kind: "<what>: <strerror(err)><after>" (after: a
// hint, or what followed).
Error errno_error(int err, const std::string &what, const std::string &after = "");
// The kind's name, for messages and tests ("not found").
const char *kind_name(ErrorKind kind);

} // namespace eacgm
