// Errors as values: every fallible step returns Result<T>, and the message is
// written for the user (it names the problem and the fix).
#pragma once
#include <string>
#include <utility>
#include <variant>

namespace eacgm {

struct Error {
	std::string message;
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

inline Error make_error(std::string msg) { return Error{std::move(msg)}; }

} // namespace eacgm
