// Errors carry their kind (common/result.h): from the errno that made them,
// and from what the reader found (test_store.cpp's Load* cases).
#include <gtest/gtest.h>

#include <cerrno>
#include <cstdio>
#include <string>
#include <type_traits>

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

} // namespace
} // namespace eacgm
