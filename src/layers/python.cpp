// SPDX-License-Identifier: Apache-2.0
#include "layers/python.h"

#include "common/layers.h"
#include "layers/python_resolver.h"

#include <algorithm>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <cerrno>
#include <linux/perf_event.h>
#include <regex>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "arch/arch.h"
#include "probe/elf_symbols.h"
#include "probe/links.h"
#include "probe/proc_maps.h"
#include "python.skel.h"
#include "common/threads.h"

namespace eacgm {

// A CPython interpreter's file by its name (python3.12, libpython3.12.so.1.0,
// python3.13d): major and minor version in groups 1 and 2.
static const std::regex &interpreter_name()
{
	static const std::regex name(R"((?:^|/)(?:lib)?python(\d)\.(\d+)[^/]*$)");
	return name;
}

bool names_python_interpreter(const std::string &path) { return std::regex_search(path, interpreter_name()); }

Result<std::optional<PythonRuntime>> find_python_runtime(uint32_t pid, const std::vector<Mapping> &maps)
{
	slow_work("finding a process's Python runtime");
	for (auto &file : mapped_files(maps)) {
		char real[PATH_MAX];
		std::string path = host_path(pid, file);
		std::string resolved = realpath(path.c_str(), real) ? real : path;
		std::smatch m;
		if (!std::regex_search(resolved, m, interpreter_name()))
			continue;
		auto elf = ElfFile::open(path);
		if (!elf)
			continue;
		const ElfSymbol *rt = elf->find("_PyRuntime");
		const ElfSymbol *code_type = elf->find("PyCode_Type");
		if (!rt || !code_type)
			continue; // the launcher of a shared libpython: the library has them
		// The load bias from the file's first mapping (offset -> its address).
		for (auto &mp : maps) {
			if (mp.path != file)
				continue;
			auto vaddr = elf->offset_to_vaddr(mp.offset);
			if (!vaddr)
				continue;
			PythonRuntime r;
			r.major = std::stoi(m[1]);
			r.minor = std::stoi(m[2]);
			r.runtime_addr = mp.start - vaddr.value() + rt->addr;
			r.code_type = mp.start - vaddr.value() + code_type->addr;
			r.file = resolved;
			return std::optional<PythonRuntime>(r);
		}
	}
	return std::optional<PythonRuntime>();
}

eacgm_py_process py_process_config(const PythonRuntime &rt)
{
	const PyOffsets &o = rt.offsets;
	eacgm_py_process p{};
	p.runtime = rt.runtime_addr;
	p.code_type = rt.code_type;
	p.minor = rt.minor;
	p.runtime_interpreters_head = o.runtime_interpreters_head;
	p.interp_threads_head = o.interp_threads_head;
	p.tstate_next = o.tstate_next;
	p.thread_key_is_pthread = o.tstate_native_thread_id == kNoOffset;
	p.tstate_thread_key = p.thread_key_is_pthread ? o.tstate_thread_id : o.tstate_native_thread_id;
	p.pthread_below_tp = arch::pthread_below_thread_pointer();
	p.tstate_frame = o.tstate_frame;
	p.tstate_cframe = o.tstate_cframe;
	p.cframe_current_frame = o.cframe_current_frame;
	p.frame_previous = o.frame_previous;
	p.frame_code = o.frame_code;
	p.frame_instr = o.frame_instr;
	p.frame_owner = o.frame_owner;
	p.frame_globals = o.frame_globals;
	p.code_name = o.code_name;
	p.code_filename = o.code_filename;
	// The spans the walker reads whole (EACGM_PY_*_READ bound them: the
	// table's offsets for 3.8-3.13 need 88 and 120 bytes).
	uint16_t lo = UINT16_MAX, hi = 0;
	for (uint16_t f : {o.frame_previous, o.frame_code, o.frame_instr, o.frame_owner, o.frame_globals})
		if (f != kNoOffset) {
			lo = std::min(lo, f);
			hi = std::max<uint16_t>(hi, f + 8);
		}
	p.frame_lo = lo;
	p.frame_len = hi - lo;
	p.code_len = std::max(o.code_name, o.code_filename); // from ob_type at 8 to the later one's end
	return p;
}

SpecSet PythonTracer::eval_entry_probes(bool all_versions) const
{
	SpecSet set;
	for (auto &[version, o] : offsets_) {
		int minor = std::stoi(version.substr(version.find('.') + 1));
		if ((!all_versions && minor < 11) || o.frame_code == kNoOffset || o.code_name == kNoOffset)
			continue;
		// 3.8: (frame, throwflag); 3.9+: (tstate, frame, throwflag).
		uint8_t slot = minor == 8 ? 0 : 1;
		ProbeSpec p;
		p.layer = layer::python;
		p.function = kEvalEntryFunction;
		p.symbols = {kEvalEntryFunction};
		p.origin = "python layer";
		p.returns = "ptr";
		p.args = {
			{.name = "code",
			 .type = ArgType::Ptr,
			 .slot = slot,
			 .source = EACGM_ARG_DEREF_ENTRY,
			 .offset = o.frame_code},
			{.name = "code_name",
			 .type = ArgType::Ptr,
			 .slot = slot,
			 .source = EACGM_ARG_DEREF2_ENTRY,
			 .offset = o.frame_code,
			 .offset2 = o.code_name},
		};
		// The shared library of pyenv/venv builds, or a static executable
		// (Debian's, conda's): whichever defines the symbol gets the probe.
		for (std::string lib :
		     {"libpython" + version + ".so*", "libpython" + version + "d.so*", "python" + version}) {
			p.library = lib;
			set.probes.push_back(p);
		}
	}
	return set;
}

Result<std::unique_ptr<PythonTracer>> PythonTracer::open(int traced_map_fd, unsigned sample_hz)
{
	auto t = prepare(traced_map_fd);
	if (!t)
		return t.error();
	if (auto r = t.value()->load(sample_hz); !r)
		return r.error();
	return t;
}

Result<std::unique_ptr<PythonTracer>> PythonTracer::prepare(int traced_map_fd)
{
	std::unique_ptr<PythonTracer> t(new PythonTracer());
	auto offsets = load_python_offsets();
	if (!offsets)
		return offsets.error();
	t->offsets_ = std::move(offsets.value());
	t->skel_ = open_skeleton(python_bpf__open, python_bpf__destroy);
	if (!t->skel_)
		return errno_error(errno, "cannot open the Python BPF object");
	if (int err = bpf_map__reuse_fd(t->skel_->maps.traced_tgids, traced_map_fd))
		return errno_error(-err, "cannot share the traced-process map");
	// The maps the span engine shares, made now as the object declares
	// them (libbpf would make them at load).
	for (struct bpf_map *m : {t->skel_->maps.py_procs, t->skel_->maps.py_tstates, t->skel_->maps.py_events,
				  t->skel_->maps.py_counters}) {
		LIBBPF_OPTS(bpf_map_create_opts, o, .map_flags = bpf_map__map_flags(m));
		int fd = bpf_map_create(bpf_map__type(m), bpf_map__name(m), bpf_map__key_size(m),
					bpf_map__value_size(m), bpf_map__max_entries(m), &o);
		if (fd < 0)
			return errno_error(errno, std::string("cannot create the Python map ") + bpf_map__name(m));
		int err = bpf_map__reuse_fd(m, fd); // takes a copy of the fd
		close(fd);
		if (err)
			return errno_error(-err, std::string("cannot use the Python map ") + bpf_map__name(m));
	}
	return t;
}

Result<void> PythonTracer::load(unsigned sample_hz)
{
	if (int err = python_bpf__load(skel_.get()))
		return errno_error(-err, "cannot load the Python BPF programs");
	struct bpf_link *fork_link = bpf_program__attach(skel_->progs.py_fork);
	if (!fork_link)
		return errno_error(errno, "cannot attach the Python fork tracepoint");
	links_.add(fork_link);
	struct bpf_link *exec_link = bpf_program__attach(skel_->progs.py_exec);
	if (!exec_link)
		return errno_error(errno, "cannot attach the Python exec tracepoint");
	links_.add(exec_link);
	if (!sample_hz)
		return {};
	sample_hz_ = lowest_hz_ = sample_hz;
	// One CPU-clock sampling event per CPU, all processes: the program keeps
	// only traced ones.
	int ncpu = libbpf_num_possible_cpus();
	for (int cpu = 0; cpu < ncpu; cpu++) {
		perf_event_attr attr{};
		attr.size = sizeof(attr);
		attr.type = PERF_TYPE_SOFTWARE;
		attr.config = PERF_COUNT_SW_CPU_CLOCK;
		// A period (of CPU-clock ns), which is what the kernel makes of a
		// frequency for this event anyway: set_sample_hz() changes it.
		attr.sample_period = sample_period_ns();
		int fd = syscall(__NR_perf_event_open, &attr, -1, cpu, -1, PERF_FLAG_FD_CLOEXEC);
		if (fd < 0) {
			if (errno == ENODEV || errno == ENOENT)
				continue; // a possible CPU that is not online
			return errno_error(errno, "cannot open the sampling event on CPU " + std::to_string(cpu));
		}
		perf_fds_.emplace_back(fd);
		struct bpf_link *l = bpf_program__attach_perf_event(skel_->progs.py_sample, fd);
		if (!l)
			return errno_error(errno, "cannot attach the Python sampler");
		links_.add(l);
	}
	return {};
}

Result<void> PythonTracer::set_sample_hz(unsigned hz)
{
	if (!sample_hz_ || !hz)
		return make_error(ErrorKind::Other, "the Python sampler is off; its rate cannot change");
	uint64_t period = 1'000'000'000ull / hz;
	for (auto &fd : perf_fds_)
		if (ioctl(fd.get(), PERF_EVENT_IOC_PERIOD, &period) != 0)
			return errno_error(errno, "cannot change the Python sampler's rate");
	sample_hz_ = hz;
	lowest_hz_ = std::min(lowest_hz_, hz);
	return {};
}

const PyOffsets *PythonTracer::offsets(int minor) const
{
	auto it = offsets_.find("3." + std::to_string(minor));
	return it == offsets_.end() ? nullptr : &it->second;
}

Result<std::optional<PythonRuntime>> PythonTracer::add_process(uint32_t pid, const std::vector<Mapping> &maps)
{
	auto rt = find_python_runtime(pid, maps);
	if (!rt || !rt->has_value())
		return rt;
	PythonRuntime r = **rt;
	const PyOffsets *o = r.major == 3 ? offsets(r.minor) : nullptr;
	if (!o) {
		std::string v = std::to_string(r.major) + "." + std::to_string(r.minor);
		if (warned_.insert(v).second)
			warnings_.push_back("Python " + v + " (" + r.file +
					    ") has no known frame layout: its functions are not traced; the other "
					    "layers go on (supported: 3.8 to 3.13)");
		return std::optional<PythonRuntime>();
	}
	r.offsets = *o;
	if (r.minor >= 13) {
		// The interpreter states its own layout: trust it over the table
		// where they differ (a patched or newer build), and say so.
		std::vector<uint8_t> image(kDebugOffsetsBytes);
		auto checked = read_process_memory(pid, r.runtime_addr, image.data(), image.size())
			? check_debug_offsets(*o, image.data(), image.size())
			: Result<CheckedOffsets>(make_error(ErrorKind::Other, "cannot read _PyRuntime"));
		std::string what =
			"Python " + std::to_string(r.major) + "." + std::to_string(r.minor) + " (" + r.file + ")";
		if (!checked) {
			if (warned_.insert(what + checked.error().message).second)
				warnings_.push_back(what + ": " + checked.error().message +
						    "; using eacgm's offsets table");
		} else {
			r.offsets = checked->offsets;
			std::string list;
			for (auto &d : checked->differ)
				list += (list.empty() ? "" : "; ") + d;
			if (!list.empty() && warned_.insert(what + list).second)
				warnings_.push_back(what + ": its _Py_DebugOffsets differ from eacgm's table (" + list +
						    "); using the interpreter's");
		}
	}
	eacgm_py_process cfg = py_process_config(r);
	if (cfg.frame_len > EACGM_PY_FRAME_READ || cfg.code_len > EACGM_PY_CODE_READ)
		return make_error(ErrorKind::Other,
				  "Python " + std::to_string(r.minor) + " in process " + std::to_string(pid) +
					  ": its frame and code fields lie further apart than the walker reads (" +
					  std::to_string(cfg.frame_len) + " and " + std::to_string(cfg.code_len) +
					  " bytes); its stacks are not recorded");
	if (bpf_map__update_elem(skel_->maps.py_procs, &pid, sizeof(pid), &cfg, sizeof(cfg), BPF_ANY))
		return errno_error(errno, "cannot register Python process " + std::to_string(pid));
	if (procs_.insert_or_assign(pid, r).second)
		registrations_++;
	return std::optional<PythonRuntime>(r);
}

void PythonTracer::inherit(uint32_t child, uint32_t parent)
{
	auto it = procs_.find(parent);
	if (it != procs_.end())
		procs_[child] = it->second;
}

void PythonTracer::forget(uint32_t pid)
{
	if (procs_.erase(pid))
		bpf_map__delete_elem(skel_->maps.py_procs, &pid, sizeof(pid), 0);
}

struct bpf_map *PythonTracer::procs_map() const { return skel_->maps.py_procs; }
struct bpf_map *PythonTracer::tstates_map() const { return skel_->maps.py_tstates; }
struct bpf_map *PythonTracer::events_map() const { return skel_->maps.py_events; }
struct bpf_map *PythonTracer::counters_map() const { return skel_->maps.py_counters; }

std::vector<std::string> PythonTracer::take_warnings() { return std::exchange(warnings_, {}); }

std::array<uint64_t, EACGM_PY_CNT_COUNT> PythonTracer::counters() const
{
	auto sums = sum_percpu_counters(skel_->maps.py_counters, EACGM_PY_CNT_COUNT);
	std::array<uint64_t, EACGM_PY_CNT_COUNT> total{};
	std::copy(sums.begin(), sums.end(), total.begin());
	return total;
}

} // namespace eacgm
