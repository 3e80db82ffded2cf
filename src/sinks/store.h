// SPDX-License-Identifier: Apache-2.0
// The store (store/store.h) as one of the pipeline's sinks.
#pragma once
#include <cstdint>

#include "pipeline/sink.h"
#include "store/store.h"

namespace eacgm {

// The store as the pipeline's last sink: each batch of spans with its
// anomalies, and each batch of measures, in the writer's transactions.
class StoreSink : public Sink {
public:
	// retention: applied when the file has passed 70% of its bound (looked
	// at once per second of data: two stat calls), and once per minute of
	// data for the age bound.
	explicit StoreSink(StoreWriter &w, StoreWriter::Retention retention = {}) : w_(w), retention_(retention) {}
	Result<void> write(SpanBatch &b) override;
	Result<void> measures(const std::vector<Metric> &m, const std::vector<Event> &e) override;
	Result<void> process(const Process &p) override { return w_.upsert_process(p); }
	Result<void> thread(const Thread &t) override { return w_.upsert_thread(t); }
	Result<void> drops(const std::vector<Drop> &d) override { return w_.set_drops(d); }
	// The bounds are kept by the data's own time (write), and the file is
	// finished by its owner, after the meta (StoreWriter::finish).
	Result<void> tick(uint64_t) override { return {}; }
	Result<void> finish() override { return {}; }

	uint64_t rows_expired() const { return expired_; }

private:
	Result<void> keep_bounds(uint64_t now_ns);
	StoreWriter &w_;
	StoreWriter::Retention retention_;
	uint64_t expired_ = 0, last_age_check_ns_ = 0, last_size_check_ns_ = 0;
};

} // namespace eacgm
