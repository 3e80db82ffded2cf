// SPDX-License-Identifier: Apache-2.0
// The agent's HTTP endpoints: /metrics (Prometheus text format) and
// /healthz, served by GNU libmicrohttpd from one thread of its own that
// multiplexes every connection with epoll. A client that sends half a
// request, or nothing, holds only its own connection (bounded in memory
// and time), never the thread: other scrapes are answered meanwhile. The
// handlers only read what the pipeline publishes (MetricsRegistry is
// locked per call): a slow or hostile scraper cannot stall the recording.
#pragma once
#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include "common/result.h"

struct MHD_Daemon;

namespace eacgm {

// What one client may hold: connections beyond `connections` are
// refused; a connection idle (or trickling a request) for `idle_s` is
// closed; a request's headers past `request_bytes` are answered 431.
struct HttpLimits {
	unsigned connections = 512;
	unsigned idle_s = 10;
	size_t request_bytes = 16 * 1024;
};

class MetricsServer {
public:
	// What /metrics answers, rendered per scrape; what /healthz answers
	// (empty: healthy, "ok"; else the reason, with status 503).
	// token: when not empty, every request must carry `Authorization:
	// Bearer TOKEN` (else 401, and nothing of the agent's is read).
	struct Handlers {
		std::function<std::string()> metrics;
		std::function<std::string()> health;
		std::string token;
	};
	// listen: "HOST:PORT" (an IPv4 address or "localhost"; port 0 picks a
	// free one, see port()). Binds before returning: an address in use is
	// an error here, not on another thread later. Until ready() is called
	// /metrics and /healthz answer 503 "starting": a readiness check on
	// either never says yes before the probes are live.
	static Result<std::unique_ptr<MetricsServer>> start(const std::string &listen, Handlers h, HttpLimits l = {});
	~MetricsServer(); // stops serving and joins its thread
	MetricsServer(const MetricsServer &) = delete;
	MetricsServer &operator=(const MetricsServer &) = delete;
	int port() const { return port_; }
	// The probes are attached and the pipeline reads: answer from now on.
	void ready() { ready_.store(true); }

private:
	MetricsServer() = default;
	friend struct HttpGlue; // libmicrohttpd's callbacks (http.cpp)

	Handlers h_;
	MHD_Daemon *daemon_ = nullptr;
	std::atomic<bool> ready_{false};
	int port_ = 0;
};

// Whether an Authorization header value is "Bearer TOKEN" with this token,
// in time that does not depend on where a wrong one first differs.
bool bearer_matches(const std::string &header, const std::string &token);

// "HOST:PORT" split and checked; the error names the value and the form.
Result<std::pair<std::string, int>> parse_listen(const std::string &listen);

} // namespace eacgm
