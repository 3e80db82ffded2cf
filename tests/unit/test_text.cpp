// SPDX-License-Identifier: Apache-2.0
// UTF-8 at the store's boundary: what a traced process names may be any bytes.
#include <gtest/gtest.h>

#include "common/text.h"

namespace eacgm {
namespace {

TEST(Utf8, WellFormedTextIsKeptAsIs)
{
	for (std::string s : {"", "plain", "caf\xC3\xA9", "\xE2\x82\xAC", "\xF0\x9F\x98\x80", "\xEF\xBF\xBD"}) {
		EXPECT_TRUE(is_utf8(s)) << s;
		EXPECT_EQ(to_utf8(s), s);
	}
}

// Each byte that starts no well-formed sequence becomes one U+FFFD; what
// follows it is read afresh.
TEST(Utf8, EachBadByteBecomesOneReplacement)
{
	const std::string r = "\xEF\xBF\xBD";
	struct Case {
		std::string in, out;
	} cases[] = {
		{"tl\xFF", "tl" + r}, // not a lead byte
		{"\xFE\xFD"
		 "arg",
		 r + r + "arg"},                     // two of them
		{"\x80x", r + "x"},                  // a stray continuation byte
		{"\xC0\xAF", r + r},                 // an overlong '/'
		{"\xE0\x80\xAF", r + r + r},         // an overlong three-byte form
		{"\xED\xA0\x80", r + r + r},         // a UTF-16 surrogate
		{"\xF4\x90\x80\x80", r + r + r + r}, // past U+10FFFF
		{"\xE2\x82", r + r},                 // cut short at the end
		{"a\xC3", "a" + r},                  // cut short
		{"\xC3\xA9\xFF\xC3\xA9", "\xC3\xA9" + r + "\xC3\xA9"},
	};
	for (auto &c : cases) {
		EXPECT_FALSE(is_utf8(c.in)) << c.in;
		EXPECT_EQ(to_utf8(c.in), c.out) << c.in;
		EXPECT_TRUE(is_utf8(to_utf8(c.in)));
	}
}

} // namespace
} // namespace eacgm
