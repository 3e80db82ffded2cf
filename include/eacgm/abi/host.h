/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/* What the host layer's BPF side (bpf/host.bpf.c) aggregates per interval
 * and the agent (src/layers/host.cpp) reads. Plain C, fixed-size fields. */
#ifndef EACGM_ABI_HOST_H
#define EACGM_ABI_HOST_H

#ifndef __bpf__
#include <linux/types.h>
#endif

#define EACGM_HOST_COMM_LEN 16
/* Tasks remembered per CPU for interferer attribution: the last switch-outs
 * on the CPU where a waiting traced thread is switched in. */
#define EACGM_HOST_RUN_HISTORY 16

/* Per traced process (tgid) and interval. Summed with atomic adds; the max
 * is updated without a lock (a lost race keeps a slightly smaller max). */
struct eacgm_host_stats {
	__u64 sched_delay_ns;     /* runnable but not running: wakeup/preemption -> switch-in */
	__u64 sched_delay_max_ns; /* the longest single wait */
	__u64 sched_waits;        /* waits that ended in the interval */
	__u64 offcpu_ns;          /* blocked (switched out not runnable) -> switched in */
	__u64 switches_voluntary;
	__u64 switches_involuntary;
	__u64 migrations;
	__u64 faults_major;
	__u64 faults_minor;
	__u64 tx_bytes; /* bytes of successful send calls on any socket */
	__u64 rx_bytes; /* bytes of successful receive calls (MSG_PEEK excluded) */
	__u64 tx_packets;
	__u64 rx_packets;
};

/* Who held the CPU while a traced process's thread waited for it. */
struct eacgm_host_interf_key {
	__u32 tgid;       /* traced process */
	__u32 interferer; /* tgid of the task that ran */
};

struct eacgm_host_interf {
	__u64 ns;
	char comm[EACGM_HOST_COMM_LEN]; /* the interferer's process name */
};

/* A TCP connection of a traced process; addresses in network byte order,
 * ports in host order. IPv4 addresses take the first 4 bytes. */
struct eacgm_host_conn_key {
	__u32 tgid;
	__u16 family; /* AF_INET or AF_INET6 */
	__u16 sport;
	__u16 dport;
	__u16 pad;
	__u8 saddr[16];
	__u8 daddr[16];
};

struct eacgm_host_conn {
	__u64 retransmits;
	__u64 srtt_us_sum; /* smoothed RTT sampled on each received segment */
	__u64 srtt_samples;
};

#endif
