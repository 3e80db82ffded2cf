// SPDX-License-Identifier: Apache-2.0
// The configuration the package ships (dist/eacgm.toml, installed as
// /etc/eacgm/eacgm.toml): every key commented out at its default. Read as
// shipped, and with every key's line uncommented, it must give exactly the
// defaults, and it must show each key docs/agent.md's table documents: the
// file is the operator's reference on the node, so a default changed in the
// code and not there, or a key missing, fails here.
#include <fstream>
#include <gtest/gtest.h>
#include <regex>
#include <set>
#include <sstream>

#include "app/config.h"

using namespace eacgm;

namespace {

std::string read_file(const std::string &path)
{
	std::ifstream in(path);
	std::stringstream ss;
	ss << in.rdbuf();
	return ss.str();
}

// The file with each commented key or table line ("# key = value",
// "# [table]") uncommented; `keys` gets "key" or "table.key" for each.
std::string uncommented(const std::string &text, std::set<std::string> &keys)
{
	static const std::regex key(R"(^# ([a-z_]+) = .*)"), table(R"(^# \[([a-z_]+)\]\s*$)");
	std::istringstream in(text);
	std::string line, out, prefix;
	std::smatch m;
	while (std::getline(in, line)) {
		if (std::regex_match(line, m, table)) {
			prefix = m[1].str() + ".";
			line = line.substr(2);
		} else if (std::regex_match(line, m, key)) {
			keys.insert(prefix + m[1].str());
			line = line.substr(2);
		}
		out += line + "\n";
	}
	return out;
}

// The keys of the table in docs/agent.md's "## Configuration": "| `listen` |"
// gives listen, "| `[filter] comm` |" filter.comm.
std::set<std::string> documented_keys()
{
	static const std::regex row(R"(^\| `(?:\[([a-z_]+)\] )?([a-z_]+)` \|)");
	std::istringstream in(read_file(SOURCE_DIR "/docs/agent.md"));
	std::set<std::string> keys;
	std::string line;
	std::smatch m;
	bool inside = false;
	while (std::getline(in, line)) {
		if (line.starts_with("## "))
			inside = line == "## Configuration";
		else if (inside && std::regex_search(line, m, row))
			keys.insert(m[1].matched ? m[1].str() + "." + m[2].str() : m[2].str());
	}
	return keys;
}

} // namespace

TEST(ShippedConfig, AsShippedAndUncommentedItSaysTheDefaults)
{
	const std::string path = SOURCE_DIR "/dist/eacgm.toml";
	std::string text = read_file(path);
	ASSERT_FALSE(text.empty()) << path;
	auto shipped = parse_serve_config(text, path);
	ASSERT_TRUE(shipped) << shipped.error().message;
	EXPECT_TRUE(*shipped == ServeConfig{});

	std::set<std::string> keys;
	auto every = parse_serve_config(uncommented(text, keys), path);
	ASSERT_TRUE(every) << every.error().message;
	EXPECT_TRUE(*every == ServeConfig{}) << "a value in " << path << " is not the default";
	EXPECT_EQ(keys.size(), 27u); // 18 keys, 3 of [filter], 6 of [clickhouse]
	EXPECT_EQ(keys, documented_keys());
}
