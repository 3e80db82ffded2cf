#include <iostream>

#include "app/commands.h"
#include "common/fs.h"
#include "export/perfetto.h"
#include "export/summary.h"
#include "store/store.h"

namespace eacgm {

int run_export(const std::string &db, const std::string &perfetto)
{
	auto rec = load_recording(db);
	if (!rec) {
		std::cerr << "eacgm: " << rec.error().message << "\n";
		return 1;
	}
	if (auto w = check_writable(perfetto); !w) {
		std::cerr << "eacgm: " << w.error().message << "\n";
		return 1;
	}
	if (auto r = write_perfetto(rec.value(), perfetto); !r) {
		std::cerr << "eacgm: " << r.error().message << "\n";
		return 1;
	}
	std::cout << "wrote " << perfetto << " (" << rec->spans.size() << " spans); open it in ui.perfetto.dev\n";
	return 0;
}

int run_summary(const std::string &db)
{
	auto rec = load_recording(db);
	if (!rec) {
		std::cerr << "eacgm: " << rec.error().message << "\n";
		return 1;
	}
	std::cout << format_summary(rec.value());
	return 0;
}

} // namespace eacgm
