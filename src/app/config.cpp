// SPDX-License-Identifier: Apache-2.0
#include "app/config.h"

#include <algorithm>
#include <cerrno>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <regex>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <toml++/toml.h>

#include "common/fs.h"
#include "common/text.h"
#include "export/clickhouse.h"
#include "export/http.h"
#include "sinks/clickhouse.h"

namespace eacgm {

namespace {

std::string toml_number(double v)
{
	char buf[32];
	snprintf(buf, sizeof buf, "%g", v);
	return buf;
}

using Reader = std::function<Result<void>(const toml::node &, const std::string &where)>;

Reader string_of(std::string &out)
{
	return [&out](const toml::node &n, const std::string &w) -> Result<void> {
		if (!n.is_string())
			return make_error(ErrorKind::BadInput, w + " must be a string, in quotes");
		out = n.as_string()->get();
		return {};
	};
}

Reader strings_of(std::vector<std::string> &out)
{
	return [&out](const toml::node &n, const std::string &w) -> Result<void> {
		const toml::array *a = n.as_array();
		if (!a)
			return make_error(ErrorKind::BadInput, w + " must be an array of strings, e.g. [\"a\", \"b\"]");
		out.clear();
		for (const toml::node &e : *a) {
			if (!e.is_string())
				return make_error(ErrorKind::BadInput,
						  w + " must be an array of strings, e.g. [\"a\", \"b\"]");
			out.push_back(e.as_string()->get());
		}
		return {};
	};
}

// A number within [lo, hi]; integers only when T is.
template <class T>
Reader number_of(T &out, double lo, double hi)
{
	return [&out, lo, hi](const toml::node &n, const std::string &w) -> Result<void> {
		double v;
		if (n.is_integer())
			v = double(n.as_integer()->get());
		else if (n.is_floating_point() && !std::is_integral_v<T>)
			v = n.as_floating_point()->get();
		else
			return make_error(ErrorKind::BadInput,
					  w + " must be " + (std::is_integral_v<T> ? "a whole number" : "a number"));
		if (!(v >= lo && v <= hi))
			return make_error(ErrorKind::BadInput,
					  w + " must be from " + toml_number(lo) + " to " + toml_number(hi));
		out = T(v);
		return {};
	};
}

Reader bool_of(bool &out)
{
	return [&out](const toml::node &n, const std::string &w) -> Result<void> {
		if (!n.is_boolean())
			return make_error(ErrorKind::BadInput, w + " must be true or false");
		out = n.as_boolean()->get();
		return {};
	};
}

Result<void> read_table(const toml::table &t, const std::string &prefix, const std::string &path,
			const std::map<std::string, Reader> &keys)
{
	for (auto &[k, node] : t) {
		std::string key = prefix + std::string(k.str());
		auto r = keys.find(std::string(k.str()));
		std::string w = path + ":" + std::to_string(k.source().begin.line) + ": " + key;
		if (r == keys.end()) {
			std::string known;
			for (auto &[name, reader] : keys)
				known += (known.empty() ? "" : ", ") + prefix + name;
			return make_error(ErrorKind::BadInput, w + ": unknown key; the keys here are " + known);
		}
		if (auto ok = r->second(node, w); !ok)
			return ok;
	}
	return {};
}

Result<void> check_values(const ServeConfig &c, const std::string &path)
{
	if (auto r = check_layers(c.layers); !r)
		return with_context(r.error(), path + ": layers: ");
	if (auto r = parse_listen(c.listen); !r)
		return with_context(r.error(), path + ": listen: ");
	if (!c.clickhouse.url.empty())
		if (auto r = parse_clickhouse_url(c.clickhouse.url); !r)
			return with_context(r.error(), path + ": clickhouse.url: ");
	if (auto r = parse_clickhouse_url("http://h", c.clickhouse.cluster); !r)
		return with_context(r.error(), path + ": clickhouse.cluster: ");
	if (!ClickHouseSink::spans_of(c.clickhouse.spans))
		return make_error(
			ErrorKind::BadInput,
			path + ": clickhouse.spans: '" + c.clickhouse.spans +
				"' is not one of \"all\", \"around\" (the seconds around an anomaly or a hang) or "
				"\"none\"");
	for (auto &re : c.filter.comm) {
		try {
			std::regex test(re);
		} catch (const std::regex_error &e) {
			return make_error(ErrorKind::BadInput,
					  path + ": filter.comm: '" + re +
						  "' is not a regular expression: " + e.what());
		}
	}
	return {};
}

} // namespace

Result<ServeConfig> parse_serve_config(const std::string &text, const std::string &path)
{
	toml::table doc;
	try {
		doc = toml::parse(text, path);
	} catch (const toml::parse_error &e) {
		return make_error(ErrorKind::BadInput,
				  path + ":" + std::to_string(e.source().begin.line) +
					  ": not valid TOML: " + std::string(e.description()));
	}
	ServeConfig c;
	std::map<std::string, Reader> filter = {
		{"comm", strings_of(c.filter.comm)},
		{"cgroup", strings_of(c.filter.cgroup)},
		{"pid_namespace",
		 [&c](const toml::node &n, const std::string &w) -> Result<void> {
			 const toml::array *a = n.as_array();
			 if (!a)
				 return make_error(ErrorKind::BadInput,
						   w + " must be an array of whole numbers (pid namespace inodes)");
			 for (const toml::node &e : *a) {
				 if (!e.is_integer() || e.as_integer()->get() <= 0)
					 return make_error(
						 ErrorKind::BadInput,
						 w + " must be an array of whole numbers (pid namespace inodes)");
				 c.filter.pid_namespace.push_back(uint64_t(e.as_integer()->get()));
			 }
			 return {};
		 }},
	};
	std::map<std::string, Reader> clickhouse = {
		{"url", string_of(c.clickhouse.url)},     {"host", string_of(c.clickhouse.host)},
		{"job", string_of(c.clickhouse.job)},     {"cluster", string_of(c.clickhouse.cluster)},
		{"spans", string_of(c.clickhouse.spans)}, {"keep_days", number_of(c.clickhouse.keep_days, 0, 36500)},
	};
	std::map<std::string, Reader> top = {
		{"listen", string_of(c.listen)},
		{"token_file", string_of(c.token_file)},
		{"layers", strings_of(c.layers)},
		{"specs", strings_of(c.specs)},
		{"store", string_of(c.store)},
		{"store_max_mb", number_of(c.store_max_mb, 1, 1e7)},
		{"store_max_age_hours", number_of(c.store_max_age_hours, 0.01, 1e6)},
		{"top_functions", number_of(c.top_functions, 1, 100000)},
		{"sample_hz", number_of(c.sample_hz, 0, 10000)},
		{"gpu_hz", number_of(c.gpu_hz, 0.01, 1000)},
		{"host_interval_ms", number_of(c.host_interval_ms, 10, 600000)},
		{"detect", bool_of(c.detect)},
		{"detect_fpr", number_of(c.detect_fpr, 1e-9, 0.5)},
		{"overhead_budget_pct", number_of(c.overhead_budget_pct, 0, 100)},
		{"nice", number_of(c.nice, 0, 19)},
		{"hang_after_s", number_of(c.hang_after_s, 0, 86400)},
		{"ring_buffer_kb", number_of(c.ring_buffer_kb, 64, 1048576)},
		{"bpf_stats", bool_of(c.bpf_stats)},
		{"filter",
		 [&](const toml::node &n, const std::string &w) -> Result<void> {
			 if (!n.is_table())
				 return make_error(ErrorKind::BadInput, w + " must be a table: [filter]");
			 return read_table(*n.as_table(), "filter.", path, filter);
		 }},
		{"clickhouse",
		 [&](const toml::node &n, const std::string &w) -> Result<void> {
			 if (!n.is_table())
				 return make_error(ErrorKind::BadInput, w + " must be a table: [clickhouse]");
			 return read_table(*n.as_table(), "clickhouse.", path, clickhouse);
		 }},
	};
	if (auto r = read_table(doc, "", path, top); !r)
		return r.error();
	if (auto r = check_values(c, path); !r)
		return r.error();
	return c;
}

Result<ServeConfig> load_serve_config(const std::string &path)
{
	std::string p = path.empty() ? kDefaultServeConfig : path;
	if (path.empty() && access(p.c_str(), F_OK) != 0)
		return ServeConfig{};
	auto text = read_small_file(p);
	if (!text)
		return errno_error(errno, "cannot read the configuration " + p,
				   path.empty() ? "" : " (give another with --config)");
	return parse_serve_config(*text, p);
}

Result<std::string> read_token_file(const std::string &path)
{
	std::string w = "token_file " + path;
	// One descriptor for the checks and the read: the file checked is the
	// file read, not one swapped in at its name meanwhile.
	int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return errno_error(errno, w, "; write the token into it (chmod 600)");
	struct stat sb;
	if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
		close(fd);
		return make_error(ErrorKind::BadInput, w + ": not a regular file; give the file holding the token");
	}
	// A secret others can read is no secret; one others can write is theirs.
	if (sb.st_mode & 077) {
		close(fd);
		char mode[8];
		snprintf(mode, sizeof mode, "%04o", unsigned(sb.st_mode & 07777));
		return make_error(ErrorKind::BadInput,
				  w + ": group or others may read or write it (mode " + mode + "); chmod 600 " + path);
	}
	std::string text(4098, '\0'); // room to tell a token past 4096 characters
	ssize_t n = read(fd, text.data(), text.size());
	int err = errno;
	close(fd);
	if (n < 0)
		return errno_error(err, w);
	text.resize(size_t(n));
	while (!text.empty() && (text.back() == '\n' || text.back() == '\r'))
		text.pop_back();
	if (text.empty())
		return make_error(ErrorKind::BadInput, w + ": it is empty; write the token into it");
	if (text.size() > 4096)
		return make_error(ErrorKind::BadInput, w + ": the token is longer than 4096 characters");
	for (char ch : text)
		if (!isalnum((unsigned char)ch) && !strchr("-._~+/=", ch))
			return make_error(
				ErrorKind::BadInput,
				w +
					": the token holds a character other than letters, digits and -._~+/= "
					"(one line, as an HTTP bearer token)");
	return text;
}

} // namespace eacgm
