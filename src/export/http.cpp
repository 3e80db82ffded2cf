#include "export/http.h"

#include <cerrno>
#include <cstring>
#include <strings.h>
#include <httplib.h>

namespace eacgm {

Result<std::pair<std::string, int>> parse_listen(const std::string &listen)
{
	auto colon = listen.rfind(':');
	std::string bad = "listen address '" + listen + "' is not HOST:PORT (e.g. 127.0.0.1:9464)";
	if (colon == std::string::npos || colon == 0 || colon + 1 == listen.size())
		return make_error(bad);
	std::string host = listen.substr(0, colon), port = listen.substr(colon + 1);
	if (port.find_first_not_of("0123456789") != std::string::npos || port.size() > 5 || std::stoi(port) > 65535)
		return make_error(bad + ": the port must be a number from 0 to 65535");
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

Result<std::unique_ptr<MetricsServer>> MetricsServer::start(const std::string &listen, Handlers h)
{
	auto where = parse_listen(listen);
	if (!where)
		return where.error();
	std::unique_ptr<MetricsServer> s(new MetricsServer);
	s->server_ = std::make_unique<httplib::Server>();
	// One worker: a scrape is a few milliseconds, and every thread of the
	// agent is memory and CPU taken from the node.
	s->server_->new_task_queue = [] { return new httplib::ThreadPool(1); };
	if (!h.token.empty())
		s->server_->set_pre_routing_handler([token = h.token](const httplib::Request &req,
								      httplib::Response &res) {
			if (bearer_matches(req.get_header_value("Authorization"), token))
				return httplib::Server::HandlerResponse::Unhandled;
			res.status = 401;
			res.set_header("WWW-Authenticate", "Bearer realm=\"eacgm\"");
			res.set_content("this agent needs the header Authorization: Bearer TOKEN (its token_file)\n",
					"text/plain; charset=utf-8");
			return httplib::Server::HandlerResponse::Handled;
		});
	s->server_->Get("/metrics", [m = h.metrics](const httplib::Request &, httplib::Response &res) {
		res.set_content(m(), "text/plain; version=0.0.4; charset=utf-8");
	});
	s->server_->Get("/healthz", [health = h.health](const httplib::Request &, httplib::Response &res) {
		std::string why = health ? health() : "";
		res.status = why.empty() ? 200 : 503;
		res.set_content(why.empty() ? "ok\n" : why + "\n", "text/plain; charset=utf-8");
	});
	auto [host, port] = where.value();
	if (port == 0) {
		s->port_ = s->server_->bind_to_any_port(host);
		if (s->port_ < 0)
			return make_error("cannot listen on " + listen + ": " + std::strerror(errno));
	} else {
		if (!s->server_->bind_to_port(host, port))
			return make_error("cannot listen on " + listen + " (" + std::strerror(errno) +
					  "): is another agent or exporter using the port? Choose another with "
					  "listen in the config");
		s->port_ = port;
	}
	s->thread_ = std::thread([srv = s->server_.get()] { srv->listen_after_bind(); });
	return s;
}

MetricsServer::~MetricsServer()
{
	if (server_)
		server_->stop();
	if (thread_.joinable())
		thread_.join();
}

} // namespace eacgm
