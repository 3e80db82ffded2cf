// SPDX-License-Identifier: Apache-2.0
// Errors carry their kind (common/result.h): from the errno that made them,
// and from what the reader found (test_store.cpp's Load* cases).
#include <gtest/gtest.h>

#include <cerrno>
#include <cstdio>
#include <string>
#include <type_traits>

#include "app/privileges.h"
#include "app/target.h"
#include "common/result.h"

namespace eacgm {
namespace {

TEST(ErrorKind, FromTheErrnoThatMadeIt)
{
	EXPECT_EQ(kind_of_errno(ENOENT), ErrorKind::NotFound);
	EXPECT_EQ(kind_of_errno(ESRCH), ErrorKind::NotFound); // a process that is gone
	EXPECT_EQ(kind_of_errno(EACCES), ErrorKind::Permission);
	EXPECT_EQ(kind_of_errno(EPERM), ErrorKind::Permission);
	EXPECT_EQ(kind_of_errno(ENOSPC), ErrorKind::NoSpace);
	EXPECT_EQ(kind_of_errno(EDQUOT), ErrorKind::NoSpace);
	EXPECT_EQ(kind_of_errno(EINVAL), ErrorKind::BadInput);
	EXPECT_EQ(kind_of_errno(EISDIR), ErrorKind::BadInput);
	EXPECT_EQ(kind_of_errno(EIO), ErrorKind::Other);
	EXPECT_EQ(kind_of_errno(0), ErrorKind::Other);
}

// Real causes, each failing the way a user's would: the errno they set
// gives the kind, and the message names what was done and why it failed.
TEST(ErrorKind, FromRealCauses)
{
	errno = 0;
	EXPECT_EQ(std::fopen("/nonexistent-eacgm/x", "r"), nullptr);
	const Error missing = errno_error(errno, "opening /nonexistent-eacgm/x");
	EXPECT_EQ(missing.kind, ErrorKind::NotFound);
	EXPECT_EQ(missing.message, "opening /nonexistent-eacgm/x: No such file or directory");

	// /dev/full takes every write and fails it with ENOSPC once flushed.
	FILE *full = std::fopen("/dev/full", "w");
	ASSERT_NE(full, nullptr);
	std::fputs("x", full);
	errno = 0;
	EXPECT_NE(std::fflush(full), 0);
	const Error no_space = errno_error(errno, "writing /dev/full");
	std::fclose(full);
	EXPECT_EQ(no_space.kind, ErrorKind::NoSpace);
	EXPECT_EQ(no_space.message, "writing /dev/full: No space left on device");

	errno = 0;
	EXPECT_EQ(std::fopen("/", "w"), nullptr); // a directory opened for writing
	EXPECT_EQ(errno_error(errno, "opening /").kind, ErrorKind::BadInput);
}

// An error names its kind where it is made: one without does not compile.
template <class... A>
concept MakesError = requires(A... a)
{
	make_error(a...);
};
static_assert(!MakesError<std::string>, "make_error(message) must name a kind");
static_assert(MakesError<ErrorKind, std::string>);
static_assert(!std::is_constructible_v<Error, std::string>, "Error{message} must name a kind");

TEST(ErrorKind, EveryErrorIsMadeWithItsKind)
{
	EXPECT_EQ(make_error(ErrorKind::Other, "something").kind, ErrorKind::Other);
	EXPECT_EQ(make_error(ErrorKind::Permission, "needs root").kind, ErrorKind::Permission);
	EXPECT_STREQ(kind_name(ErrorKind::NoSpace), "no space");
	EXPECT_STREQ(kind_name(ErrorKind::NotFound), "not found");
}

// Sites with no test file of their own: the command to run, the niceness.
TEST(ErrorKind, OfTheCommandLine)
{
	auto missing = resolve_command("/nonexistent-eacgm/train");
	ASSERT_FALSE(missing);
	EXPECT_EQ(missing.error().kind, ErrorKind::NotFound);
	EXPECT_EQ(missing.error().message, "cannot run /nonexistent-eacgm/train: no such file; check the path");
	auto not_run = resolve_command(SOURCE_DIR "/README.md");
	ASSERT_FALSE(not_run);
	EXPECT_EQ(not_run.error().kind, ErrorKind::BadInput);
	EXPECT_EQ(not_run.error().message,
		  "cannot run " SOURCE_DIR "/README.md: not an executable file; check the path");
	auto unknown = resolve_command("eacgm-no-such-command");
	ASSERT_FALSE(unknown);
	EXPECT_EQ(unknown.error().kind, ErrorKind::NotFound);
	EXPECT_EQ(resolve_command("").error().kind, ErrorKind::BadInput);
	auto nice = lower_priority(20);
	ASSERT_FALSE(nice);
	EXPECT_EQ(nice.error().kind, ErrorKind::BadInput);
	EXPECT_EQ(nice.error().message, "the niceness must be 0 to 19, not 20");
}

// Context added on the way up keeps what failed: the callee's kind.
TEST(ErrorKind, KeptThroughContext)
{
	errno = 0;
	EXPECT_EQ(std::fopen("/nonexistent-eacgm/x", "r"), nullptr);
	const Error cause = errno_error(errno, "opening /nonexistent-eacgm/x", "; check the path");
	EXPECT_EQ(cause.message, "opening /nonexistent-eacgm/x: No such file or directory; check the path");
	const Error told = with_context(cause, "cannot load the spec: ", " (given with --spec)");
	EXPECT_EQ(told.kind, ErrorKind::NotFound);
	EXPECT_EQ(told.message,
		  "cannot load the spec: opening /nonexistent-eacgm/x: No such file or directory; check the path "
		  "(given with --spec)");
}

} // namespace
} // namespace eacgm
