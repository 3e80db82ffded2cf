// SPDX-License-Identifier: Apache-2.0
#include "probe/first_insn.h"

#include <capstone/capstone.h>
#include <cerrno>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>

namespace eacgm {

InsnDecoder::InsnDecoder(arch::Isa isa) : rules_(arch::rules(isa))
{
	csh h = 0;
	ok_ = cs_open(rules_.disasm_arch, rules_.disasm_mode, &h) == CS_ERR_OK;
	handle_ = h;
	if (ok_ && cs_option(h, CS_OPT_DETAIL, CS_OPT_ON) != CS_ERR_OK) {
		cs_close(&h);
		ok_ = false;
	}
}

InsnDecoder::~InsnDecoder()
{
	csh h = handle_;
	if (ok_)
		cs_close(&h);
}

Result<FirstInsn> InsnDecoder::decode(const uint8_t *code, size_t n) const
{
	if (!ok_)
		return make_error(ErrorKind::Other,
				  std::string("cannot open the ") + rules_.name + " disassembler (capstone)");
	cs_insn *insn = nullptr;
	if (cs_disasm(handle_, code, n, 0, 1, &insn) != 1)
		return make_error(ErrorKind::BadInput, std::string("not a valid ") + rules_.name + " instruction");
	arch::Trap trap = rules_.trap(handle_, *insn);
	FirstInsn out{trap == arch::Trap::Emulated, trap == arch::Trap::Rejected, std::string(insn->mnemonic)};
	if (insn->op_str[0])
		out.text += std::string(" ") + insn->op_str;
	cs_free(insn, 1);
	return out;
}

Result<FirstInsn> InsnDecoder::at(const std::string &path, uint64_t offset)
{
	if (!fd_ || path != path_) {
		fd_ = UniqueFd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
		path_ = path;
	}
	if (!fd_)
		return make_error(kind_of_errno(errno), "cannot open " + path);
	uint8_t code[16];
	ssize_t n = pread(fd_.get(), code, std::min(sizeof code, rules_.max_insn), static_cast<off_t>(offset));
	if (n <= 0) // none read: the offset is past the file's end (bad input) or errno says
		return make_error(n < 0 ? kind_of_errno(errno) : ErrorKind::BadInput,
				  "cannot read " + path + " at its offset " + std::to_string(offset));
	return decode(code, static_cast<size_t>(n));
}

uint64_t InsnDecoder::probe_offset(const uint8_t *code, size_t size, uint64_t offset) const
{
	const std::span<const uint8_t> pad = rules_.landing_pad;
	const size_t kLen = pad.size();
	if (!ok_ || size <= kLen || !std::equal(pad.begin(), pad.end(), code))
		return offset;
	auto next = decode(code + kLen, size - kLen);
	if (!next || !next->emulated)
		return offset;
	// Every instruction of the function, none a branch to the one after the
	// pad; bytes that do not decode (data in the code) leave it unproven.
	cs_insn *insn = cs_malloc(handle_);
	const uint8_t *at = code;
	size_t left = size;
	uint64_t addr = offset;
	bool safe = true;
	while (safe && left > 0) {
		if (!cs_disasm_iter(handle_, &at, &left, &addr, insn)) {
			safe = false;
			break;
		}
		if (rules_.direct_target(handle_, *insn) == offset + kLen)
			safe = false;
	}
	cs_free(insn, 1);
	return safe ? offset + kLen : offset;
}

uint64_t InsnDecoder::probe_offset(const std::string &path, uint64_t offset, uint64_t size)
{
	// A function's size comes from its symbol; none, or a huge one, is not
	// worth reading whole.
	constexpr uint64_t kMaxBytes = 1 << 16;
	if (size == 0 || size > kMaxBytes)
		return offset;
	if (!fd_ || path != path_) {
		fd_ = UniqueFd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
		path_ = path;
	}
	// Most functions do not start with a landing pad: read the rest only for those that do.
	const std::span<const uint8_t> pad = rules_.landing_pad;
	uint8_t head[16];
	if (!fd_ || pad.size() > sizeof head ||
	    pread(fd_.get(), head, pad.size(), static_cast<off_t>(offset)) != static_cast<ssize_t>(pad.size()) ||
	    !std::equal(pad.begin(), pad.end(), head))
		return offset;
	std::vector<uint8_t> code(size);
	if (pread(fd_.get(), code.data(), size, static_cast<off_t>(offset)) != static_cast<ssize_t>(size))
		return offset;
	return probe_offset(code.data(), size, offset);
}

std::string single_step_note(const std::vector<ProbeSite> &sites)
{
	InsnDecoder dec;
	std::vector<std::string> stepped;
	for (const ProbeSite &s : sites)
		if (auto i = dec.at(s.path, s.offset); i && !i->emulated && !i->rejected) // rejected: attaching says so
			stepped.push_back(s.name + " (`" + i->text + "`)");
	if (stepped.empty())
		return "";
	std::string names;
	for (size_t k = 0; k < stepped.size() && k < 5; k++)
		names += (k ? ", " : "") + stepped[k];
	if (stepped.size() > 5)
		names += " and " + std::to_string(stepped.size() - 5) + " more";
	return std::to_string(stepped.size()) +
		(stepped.size() == 1 ? " probed function starts" : " probed functions start") +
		" with an instruction the kernel single-steps rather than emulates, so each of its calls costs " +
		arch::native_rules().stepped_cost + ": " + names;
}

} // namespace eacgm
