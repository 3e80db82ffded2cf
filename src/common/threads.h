// SPDX-License-Identifier: Apache-2.0
// Which thread may do slow work. The ring-draining thread
// (pipeline/ring_reader.h) only copies records out of the BPF rings: a
// /proc read, a process's maps, an ELF file or a probe attached there could
// keep the rings unread long enough to fill them (a 256 KiB span ring holds
// about 40 ms of records at 100,000 calls a second). Every such step says so
// with slow_work(); one made on the draining thread is counted, and the
// recording's meta (slow_work_on_drain) and the tests say it must be none.
#pragma once
#include <cstdint>

namespace eacgm {

// Called once by the draining thread, at its start.
void mark_draining_thread();
bool on_draining_thread();
// Slow work about to run: counted when it runs on the draining thread.
void slow_work(const char *what);
// How often slow work ran on the draining thread, and the last such work.
uint64_t slow_work_on_drain();
const char *last_slow_work_on_drain();

} // namespace eacgm
