// The agent's HTTP endpoints: /metrics (Prometheus text format) and
// /healthz, served by cpp-httplib on one thread of its own. The handlers
// only read what the pipeline publishes (MetricsRegistry is locked per
// call): a slow or hostile scraper cannot stall the recording.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "common/result.h"

namespace httplib {
class Server;
}

namespace eacgm {

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
	// an error here, not on another thread later.
	static Result<std::unique_ptr<MetricsServer>> start(const std::string &listen, Handlers h);
	~MetricsServer(); // stops serving and joins its thread
	MetricsServer(const MetricsServer &) = delete;
	MetricsServer &operator=(const MetricsServer &) = delete;
	int port() const { return port_; }

private:
	MetricsServer() = default;
	std::unique_ptr<httplib::Server> server_;
	std::thread thread_;
	int port_ = 0;
};

// Whether an Authorization header value is "Bearer TOKEN" with this token,
// in time that does not depend on where a wrong one first differs.
bool bearer_matches(const std::string &header, const std::string &token);

// "HOST:PORT" split and checked; the error names the value and the form.
Result<std::pair<std::string, int>> parse_listen(const std::string &listen);

} // namespace eacgm
