// SPDX-License-Identifier: Apache-2.0
// One owner per BPF skeleton: the generated X__destroy runs when the owner
// goes or opens another in its place, never by hand. Declared with the
// skeleton's type only (its generated header is the .cpp's business), so the
// destroy function comes with the pointer.
#pragma once
#include <memory>

namespace eacgm {

template <class Skel>
using Skeleton = std::unique_ptr<Skel, void (*)(Skel *)>;

// Opens a skeleton with its generated open and destroy functions; empty
// (and errno set by libbpf) when the object cannot be opened.
template <class Skel>
Skeleton<Skel> open_skeleton(Skel *(*open)(), void (*destroy)(Skel *))
{
	return Skeleton<Skel>(open(), destroy);
}

template <class Skel>
Skeleton<Skel> no_skeleton()
{
	return Skeleton<Skel>(nullptr, nullptr);
}

} // namespace eacgm
