// SPDX-License-Identifier: Apache-2.0
#include "export/http.h"

#include <arpa/inet.h>
#include <cerrno>
#include <cstring>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <strings.h>
#include <sys/socket.h>

#include "common/fd.h"

namespace eacgm {

Result<std::pair<std::string, int>> parse_listen(const std::string &listen)
{
	auto colon = listen.rfind(':');
	std::string bad = "listen address '" + listen + "' is not HOST:PORT (e.g. 127.0.0.1:9464)";
	if (colon == std::string::npos || colon == 0 || colon + 1 == listen.size())
		return make_error(ErrorKind::BadInput, bad);
	std::string host = listen.substr(0, colon), port = listen.substr(colon + 1);
	if (port.find_first_not_of("0123456789") != std::string::npos || port.size() > 5 || std::stoi(port) > 65535)
		return make_error(ErrorKind::BadInput, bad + ": the port must be a number from 0 to 65535");
	return std::make_pair(host, std::stoi(port));
}

bool bearer_matches(const std::string &header, const std::string &token)
{
	const std::string scheme = "Bearer ";
	if (token.empty() || header.size() != scheme.size() + token.size() ||
	    strncasecmp(header.c_str(), scheme.c_str(), scheme.size()) != 0)
		return false;
	unsigned char diff = 0;
	for (size_t i = 0; i < token.size(); i++)
		diff |= (unsigned char)(header[scheme.size() + i] ^ token[i]);
	return diff == 0;
}

namespace {

// The listening socket, bound here (not by libmicrohttpd) so that an
// address in use or a host that does not resolve is reported with its
// cause before the agent goes on.
Result<UniqueFd> bind_listener(const std::string &listen, const std::string &host, int port)
{
	addrinfo hints = {}, *found = nullptr;
	hints.ai_family = AF_INET;
	hints.ai_socktype = SOCK_STREAM;
	if (int rc = getaddrinfo(host.c_str(), nullptr, &hints, &found); rc != 0)
		return make_error(ErrorKind::NotFound,
				  "cannot listen on " + listen + ": the host '" + host +
					  "' does not resolve to an IPv4 address (" + gai_strerror(rc) +
					  "); give an address such as 127.0.0.1 or 0.0.0.0");
	sockaddr_in addr = *reinterpret_cast<sockaddr_in *>(found->ai_addr);
	freeaddrinfo(found);
	addr.sin_port = htons(uint16_t(port));
	UniqueFd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
	if (!fd)
		return errno_error(errno, "cannot listen on " + listen + ": socket");
	int one = 1;
	setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if (bind(fd.get(), reinterpret_cast<sockaddr *>(&addr), sizeof addr) != 0) {
		int e = errno;
		std::string why = "cannot listen on " + listen + " (" + std::strerror(e) + ")";
		if (e == EADDRINUSE)
			why += ": is another agent or exporter using the port? Choose another with listen in the "
			       "config";
		return make_error(kind_of_errno(e), why);
	}
	if (::listen(fd.get(), 128) != 0)
		return errno_error(errno, "cannot listen on " + listen);
	return fd;
}

MHD_Result reply(MHD_Connection *c, unsigned status, const std::string &body, const char *type,
		 const char *auth_challenge = nullptr)
{
	MHD_Response *r =
		MHD_create_response_from_buffer(body.size(), const_cast<char *>(body.data()), MHD_RESPMEM_MUST_COPY);
	if (!r)
		return MHD_NO;
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
	if (auth_challenge)
		MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, auth_challenge);
	MHD_Result ok = MHD_queue_response(c, status, r);
	MHD_destroy_response(r);
	return ok;
}

constexpr const char *kText = "text/plain; charset=utf-8";

} // namespace

struct HttpGlue {
	// libmicrohttpd calls this once the request's headers are in, then
	// once per piece of a body: a GET has none, so the first call answers.
	static MHD_Result on_request(void *self, MHD_Connection *c, const char *url, const char *method, const char *,
				     const char *, size_t *body_size, void **)
	{
		auto &s = *static_cast<MetricsServer *>(self);
		if (*body_size != 0) // a body nobody asked for: dropped, the answer below already queued
		{
			*body_size = 0;
			return MHD_YES;
		}
		if (!s.h_.token.empty()) {
			const char *auth =
				MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
			if (!bearer_matches(auth ? auth : "", s.h_.token))
				return reply(
					c, MHD_HTTP_UNAUTHORIZED,
					"this agent needs the header Authorization: Bearer TOKEN (its token_file)\n",
					kText, "Bearer realm=\"eacgm\"");
		}
		std::string path = url;
		if (path != "/metrics" && path != "/healthz")
			return reply(c, MHD_HTTP_NOT_FOUND, "not found: this agent serves /metrics and /healthz\n",
				     kText);
		if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
			return reply(c, MHD_HTTP_METHOD_NOT_ALLOWED,
				     std::string(method) + " is not served here: use GET\n", kText);
		if (!s.ready_.load())
			return reply(c, MHD_HTTP_SERVICE_UNAVAILABLE, "starting: the probes are not attached yet\n",
				     kText);
		if (path == "/metrics")
			return reply(c, MHD_HTTP_OK, s.h_.metrics(), "text/plain; version=0.0.4; charset=utf-8");
		std::string why = s.h_.health ? s.h_.health() : "";
		return reply(c, why.empty() ? MHD_HTTP_OK : MHD_HTTP_SERVICE_UNAVAILABLE,
			     why.empty() ? "ok\n" : why + "\n", kText);
	}
	// libmicrohttpd's own complaints (a malformed request, a connection
	// refused at the limit) are the clients' business, not the operator's.
	static void quiet(void *, const char *, va_list) {}
};

Result<std::unique_ptr<MetricsServer>> MetricsServer::start(const std::string &listen, Handlers h, HttpLimits l)
{
	auto where = parse_listen(listen);
	if (!where)
		return where.error();
	auto [host, port] = where.value();
	auto fd = bind_listener(listen, host, port);
	if (!fd)
		return fd.error();
	sockaddr_in bound = {};
	socklen_t len = sizeof bound;
	getsockname(fd->get(), reinterpret_cast<sockaddr *>(&bound), &len);
	std::unique_ptr<MetricsServer> s(new MetricsServer);
	s->h_ = std::move(h);
	s->port_ = ntohs(bound.sin_port);
	// One thread, epoll: every connection multiplexed, none can hold it.
	s->daemon_ = MHD_start_daemon(MHD_USE_EPOLL_INTERNAL_THREAD | MHD_USE_ERROR_LOG, 0, nullptr, nullptr,
				      &HttpGlue::on_request, s.get(), MHD_OPTION_LISTEN_SOCKET, fd->get(),
				      MHD_OPTION_CONNECTION_LIMIT, l.connections, MHD_OPTION_CONNECTION_TIMEOUT,
				      l.idle_s, MHD_OPTION_CONNECTION_MEMORY_LIMIT, l.request_bytes,
				      MHD_OPTION_EXTERNAL_LOGGER, &HttpGlue::quiet, nullptr, MHD_OPTION_END);
	if (!s->daemon_)
		return make_error(kind_of_errno(errno),
				  "cannot serve on " + listen + ": libmicrohttpd did not start (" +
					  std::strerror(errno) + ")");
	fd->release(); // the daemon's now: closed by MHD_stop_daemon
	return s;
}

MetricsServer::~MetricsServer()
{
	if (daemon_)
		MHD_stop_daemon(daemon_);
}

} // namespace eacgm
