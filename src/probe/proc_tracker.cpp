// SPDX-License-Identifier: Apache-2.0
#include "probe/proc_tracker.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <cerrno>

#include "probe/links.h"

#include "probe/elf_symbols.h"
#include "proc.skel.h"

namespace eacgm {

Result<std::unique_ptr<ProcTracker>> ProcTracker::open(bool trace_all)
{
	std::unique_ptr<ProcTracker> t(new ProcTracker());
	// The link-map probe as a uprobe_multi program first (6.6+: it needs no
	// CAP_SYS_ADMIN, which a perf-event uprobe does here); a kernel without
	// them refuses the load, and the perf-event kind serves.
	int err = 0;
	for (bool multi : {true, false}) {
		t->skel_ = open_skeleton(proc_bpf__open, proc_bpf__destroy);
		if (!t->skel_)
			return errno_error(errno, "cannot open the process-tracking BPF object");
		t->skel_->rodata->trace_all = trace_all;
		if (multi)
			bpf_program__set_expected_attach_type(t->skel_->progs.on_link_map_change, kTraceUprobeMulti);
		err = proc_bpf__load(t->skel_.get());
		t->multi_ = multi && !err;
		if (!err)
			break;
	}
	if (err)
		return errno_error(-err, "cannot load the process-tracking BPF programs",
				   " (run 'eacgm doctor' to check kernel support)");
	// The tp_btf programs attach through the skeleton; the uprobe is
	// attached per dynamic linker, later.
	for (auto *prog : {t->skel_->progs.on_fork, t->skel_->progs.on_exec, t->skel_->progs.on_exit}) {
		struct bpf_link *l = bpf_program__attach(prog);
		if (!l)
			return errno_error(
				errno, std::string("cannot attach scheduler tracepoint ") + bpf_program__name(prog));
		t->links_.add(l);
	}
	return t;
}

int ProcTracker::traced_map_fd() const { return bpf_map__fd(skel_->maps.traced_tgids); }

Result<void> ProcTracker::track(uint32_t pid)
{
	if (bpf_map__update_elem(skel_->maps.traced_tgids, &pid, sizeof(pid), &pid, sizeof(pid), BPF_ANY))
		return errno_error(errno, "cannot add process " + std::to_string(pid) + " to the traced set");
	return {};
}

Result<void> ProcTracker::watch_dynamic_linker(const std::string &path)
{
	if (!linkers_.insert(path).second)
		return {};
	auto elf = ElfFile::open(path);
	if (!elf)
		return elf.error();
	const ElfSymbol *sym = elf->find("_dl_debug_state");
	if (!sym)
		return make_error(ErrorKind::NotFound,
				  path +
					  " has no _dl_debug_state symbol: libraries loaded later with dlopen are "
					  "only found by the periodic rescan");
	auto off = elf->vaddr_to_offset(sym->addr);
	if (!off)
		return off.error();
	if (multi_) {
		auto fd = attach_uprobe_multi(bpf_program__fd(skel_->progs.on_link_map_change), path, {off.value()}, {},
					      false);
		if (!fd)
			return with_context(fd.error(), "", " (_dl_debug_state)");
		links_.add(std::move(fd.value()));
		return {};
	}
	LIBBPF_OPTS(bpf_uprobe_opts, o);
	struct bpf_link *l =
		bpf_program__attach_uprobe_opts(skel_->progs.on_link_map_change, -1, path.c_str(), off.value(), &o);
	if (!l)
		return errno_error(errno, "cannot attach to " + path + " _dl_debug_state");
	links_.add(l);
	return {};
}

struct bpf_map *ProcTracker::events_map() const { return skel_->maps.proc_events; }

} // namespace eacgm
