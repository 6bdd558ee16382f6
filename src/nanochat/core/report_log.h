#pragma once
// The report card's sections (the shape of nanochat's former report.py, Report.log): a stage of
// the road writes what it measured, when it ends, to $NANOCHAT_BASE_DIR/report/<slug>.json, and
// `nanochat report` and `nanochat speedrun` assemble report.md from them (road/card.h).
//   {"slug", "title", "timestamp" ("YYYY-MM-DD HH:MM:SS", local time), "build" (core/version.h),
//    "data": {...}}
// `data` keeps its keys in the order they were written (ordered_json). Only one process of a job
// writes (its rank 0). A later run of the same stage replaces the section.
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace nanochat {

/// base_dir()/report (created). Throws nanochat::Error naming it when it cannot be created.
std::string report_dir();

/// Writes report_dir()/<slug>.json atomically. A failure is printed to stderr ("warning: ...")
/// and not thrown: the stage's own work (weights, results already printed) stands without it.
void log_report_section(const std::string& slug, const std::string& title, const nlohmann::ordered_json& data);

/// The section `slug` of `dir` (default report_dir()); nullopt when missing or not a section.
std::optional<nlohmann::ordered_json> read_report_section(const std::string& slug, const std::string& dir = "");

/// Local time as "YYYY-MM-DD HH:MM:SS".
std::string local_timestamp();

}  // namespace nanochat
