// SPDX-License-Identifier: Apache-2.0
#include "common/result.h"

#include <cerrno>
#include <cstring>

namespace eacgm {

ErrorKind kind_of_errno(int err)
{
	switch (err) {
	case ENOENT:
	case ESRCH:
	case ENXIO:
	case ENODEV: return ErrorKind::NotFound;
	case EACCES:
	case EPERM:
	case EROFS: return ErrorKind::Permission;
	case ENOSPC:
	case EDQUOT:
	case ENOMEM:
	case EFBIG: return ErrorKind::NoSpace;
	case EINVAL:
	case ENOEXEC:
	case ENOTDIR:
	case EISDIR:
	case E2BIG:
	case ERANGE: return ErrorKind::BadInput;
	default: return ErrorKind::Other;
	}
}

Error errno_error(int err, const std::string &what, const std::string &after)
{
	return make_error(kind_of_errno(err), what + ": " + std::strerror(err) + after);
}

const char *kind_name(ErrorKind kind)
{
	switch (kind) {
	case ErrorKind::Other: return "other";
	case ErrorKind::NotFound: return "not found";
	case ErrorKind::Permission: return "permission";
	case ErrorKind::NoSpace: return "no space";
	case ErrorKind::BadInput: return "bad input";
	}
	return "other";
}

} // namespace eacgm
