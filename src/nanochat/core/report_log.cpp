#include "nanochat/core/report_log.h"

#include <cstdio>
#include <ctime>
#include <filesystem>

#include "nanochat/core/error.h"
#include "nanochat/core/file_io.h"
#include "nanochat/core/paths.h"
#include "nanochat/core/version.h"

namespace nanochat {

std::string report_dir() {
  const std::string dir = base_dir() + "/report";
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) fail("cannot create the report folder ", dir, ": ", ec.message());
  return dir;
}

std::string local_timestamp() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

void log_report_section(const std::string& slug, const std::string& title, const nlohmann::ordered_json& data) {
  try {
    nlohmann::ordered_json j;
    j["slug"] = slug;
    j["title"] = title;
    j["timestamp"] = local_timestamp();
    j["build"] = build_id();
    j["data"] = data;
    // samples of a small model may cut a character in two: such bytes become U+FFFD
    write_file_atomic(report_dir() + "/" + slug + ".json",
                      j.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "warning: the report section '%s' was not written: %s\n", slug.c_str(), e.what());
  }
}

std::optional<nlohmann::ordered_json> read_report_section(const std::string& slug, const std::string& dir) {
  const std::string path = (dir.empty() ? base_dir() + "/report" : dir) + "/" + slug + ".json";
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return std::nullopt;
  try {
    nlohmann::ordered_json j = nlohmann::ordered_json::parse(read_file(path));
    if (!j.is_object() || !j.contains("data") || !j["data"].is_object()) return std::nullopt;
    return j;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

}  // namespace nanochat
