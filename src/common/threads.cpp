// SPDX-License-Identifier: Apache-2.0
#include "common/threads.h"

#include <atomic>

namespace eacgm {

namespace {
thread_local bool t_draining = false;
std::atomic<uint64_t> g_on_drain{0};
std::atomic<const char *> g_last{nullptr};
} // namespace

void mark_draining_thread() { t_draining = true; }
bool on_draining_thread() { return t_draining; }

void slow_work(const char *what)
{
	if (!t_draining)
		return;
	g_on_drain.fetch_add(1, std::memory_order_relaxed);
	g_last.store(what, std::memory_order_relaxed);
}

uint64_t slow_work_on_drain() { return g_on_drain.load(std::memory_order_relaxed); }

const char *last_slow_work_on_drain()
{
	const char *w = g_last.load(std::memory_order_relaxed);
	return w ? w : "";
}

} // namespace eacgm
