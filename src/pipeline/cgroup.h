// SPDX-License-Identifier: Apache-2.0
// Where a process runs, from its cgroup v2 path: the path itself, and the
// container and Kubernetes pod it belongs to when the path says so
// (Docker, containerd and CRI-O name a container's cgroup after its 64-hex
// id; the kubelet names a pod's after its uid, with '_' for '-' under the
// systemd driver).
#pragma once
#include <cstdint>
#include <string>

namespace eacgm {

struct CgroupInfo {
	std::string path;         // "/kubepods.slice/.../cri-containerd-<id>.scope"; "" without cgroup v2
	std::string container_id; // 64 hex digits, "" when not in a container
	std::string pod_uid;      // "6f1d...-...", "" when not in a pod
};

CgroupInfo parse_cgroup_path(const std::string &path);
// From /proc/PID/cgroup (its "0::" line).
CgroupInfo cgroup_of(uint32_t pid);

} // namespace eacgm
