// SPDX-License-Identifier: Apache-2.0
#include "pipeline/raw_dump.h"

#include <cerrno>
#include <cstring>

#include <nlohmann/json.hpp>

namespace eacgm {

namespace {

constexpr char kMagic[] = "eacgm raw dump 1\n";
constexpr char kEnd[] = "eacgm raw end\n";

// What decode_typed and render_span read of the probes. ArgType goes as its
// number: the dump's version line changes with the enum.
nlohmann::json probes_json(const SpecSet &specs)
{
	nlohmann::json probes = nlohmann::json::array();
	for (const ProbeSpec &p : specs.probes) {
		nlohmann::json args = nlohmann::json::array();
		for (const ArgSpec &a : p.args)
			args.push_back({{"name", a.name},
					{"type", int(a.type)},
					{"enum", a.enum_name},
					{"size", a.size},
					{"list", a.tensor_list}});
		nlohmann::json j = {
			{"layer", p.layer}, {"function", p.function}, {"returns", p.returns}, {"args", args}};
		if (p.bytes)
			j["bytes"] = {p.bytes->count, p.bytes->element};
		probes.push_back(std::move(j));
	}
	return {{"probes", probes}, {"enums", specs.enums}, {"sizes", specs.sizes}};
}

SpecSet probes_of(const nlohmann::json &j)
{
	SpecSet s;
	for (const auto &p : j.at("probes")) {
		ProbeSpec spec;
		spec.layer = p.at("layer").get<std::string>();
		spec.function = p.at("function").get<std::string>();
		spec.returns = p.at("returns").get<std::string>();
		for (const auto &a : p.at("args")) {
			int type = a.at("type").get<int>();
			if (type < int(ArgType::U64) || type > int(ArgType::Tensor))
				throw std::out_of_range("argument type " + std::to_string(type));
			spec.args.push_back({.name = a.at("name").get<std::string>(),
					     .type = ArgType(type),
					     .enum_name = a.at("enum").get<std::string>(),
					     .size = a.at("size").get<uint8_t>(),
					     .tensor_list = a.at("list").get<bool>()});
		}
		if (p.contains("bytes"))
			spec.bytes =
				BytesRule{p["bytes"].at(0).get<std::string>(), p["bytes"].at(1).get<std::string>()};
		s.probes.push_back(std::move(spec));
	}
	s.enums = j.at("enums").get<decltype(s.enums)>();
	s.sizes = j.at("sizes").get<decltype(s.sizes)>();
	return s;
}

} // namespace

void RawDumpWriter::Closer::operator()(FILE *f) const { fclose(f); }

Result<RawDumpWriter> RawDumpWriter::create(const std::string &path)
{
	RawDumpWriter w;
	w.path_ = path;
	w.f_.reset(fopen(path.c_str(), "wb"));
	if (!w.f_)
		return errno_error(errno, "cannot create the raw dump " + path);
	w.failed_ = fwrite(kMagic, 1, sizeof kMagic - 1, w.f_.get()) != sizeof kMagic - 1;
	return w;
}

void RawDumpWriter::span(const eacgm_span_event &e)
{
	if (f_ && !failed_ && fwrite(&e, sizeof e, 1, f_.get()) != 1)
		failed_ = true;
}

Result<void> RawDumpWriter::close(const SpecSet &specs)
{
	if (!f_)
		return {};
	const std::string text = probes_json(specs).dump();
	const uint32_t n = static_cast<uint32_t>(text.size());
	const uint8_t len[4] = {uint8_t(n), uint8_t(n >> 8), uint8_t(n >> 16), uint8_t(n >> 24)};
	failed_ = failed_ || fwrite(text.data(), 1, n, f_.get()) != n || fwrite(len, 1, 4, f_.get()) != 4 ||
		fwrite(kEnd, 1, sizeof kEnd - 1, f_.get()) != sizeof kEnd - 1;
	const bool flushed = fflush(f_.get()) == 0;
	const int err = errno;
	f_.reset();
	if (failed_ || !flushed)
		return errno_error(err, "cannot write the raw dump " + path_);
	return {};
}

Result<RawDump> read_raw_dump(const std::string &path)
{
	std::string all;
	{
		std::unique_ptr<FILE, decltype(&fclose)> f(fopen(path.c_str(), "rb"), &fclose);
		if (!f)
			return errno_error(errno, "cannot open the raw dump " + path);
		char buf[1 << 16];
		size_t got;
		while ((got = fread(buf, 1, sizeof buf, f.get())) > 0)
			all.append(buf, got);
		if (ferror(f.get()))
			return errno_error(errno, "cannot read the raw dump " + path);
	}
	const size_t head = sizeof kMagic - 1, tail = 4 + sizeof kEnd - 1;
	if (all.size() < head || all.compare(0, head, kMagic) != 0)
		return make_error(ErrorKind::BadInput,
				  path + " is no raw dump of this version (it begins \"" +
					  std::string(kMagic, head - 1) +
					  "\"); record it again with record --raw-dump");
	if (all.size() < head + tail || all.compare(all.size() - (sizeof kEnd - 1), sizeof kEnd - 1, kEnd) != 0)
		return make_error(ErrorKind::BadInput,
				  path + ": no end (eacgm was killed while writing it); record it again");
	const auto *len = reinterpret_cast<const uint8_t *>(all.data() + all.size() - tail);
	const size_t n = len[0] | len[1] << 8 | len[2] << 16 | size_t(len[3]) << 24;
	if (n > all.size() - head - tail || (all.size() - head - tail - n) % sizeof(eacgm_span_event))
		return make_error(ErrorKind::BadInput,
				  path + ": its probes' length (" + std::to_string(n) +
					  " bytes) does not fit the file");
	const size_t records = (all.size() - head - tail - n) / sizeof(eacgm_span_event);
	RawDump d;
	try {
		d.specs = probes_of(nlohmann::json::parse(all.substr(head + records * sizeof(eacgm_span_event), n)));
	} catch (const std::exception &e) {
		return make_error(ErrorKind::BadInput, path + ": its probes are damaged: " + e.what());
	}
	d.spans.resize(records);
	memcpy(d.spans.data(), all.data() + head, records * sizeof(eacgm_span_event));
	for (size_t i = 0; i < records; i++)
		if (d.spans[i].spec_id >= d.specs.probes.size())
			return make_error(ErrorKind::BadInput,
					  path + ": record " + std::to_string(i + 1) + " names probe " +
						  std::to_string(d.spans[i].spec_id) + " of " +
						  std::to_string(d.specs.probes.size()));
	return d;
}

} // namespace eacgm
