// Unknown command/flag names with a "did you mean" suggestion (see suggest.h).
#include "nanochat/cli/suggest.h"

#include <algorithm>
#include <cstdlib>

namespace nanochat::cli {

size_t edit_distance(std::string_view a, std::string_view b) {
  // d[i][j] = distance between a[0..i) and b[0..j); three rows suffice for transpositions.
  std::vector<size_t> prev2(b.size() + 1), prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) cur[j] = std::min(cur[j], prev2[j - 2] + 1);
    }
    prev2.swap(prev);
    prev.swap(cur);
  }
  return prev[b.size()];
}

std::string closest_name(const std::string& typed, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_d = std::string::npos;
  for (const auto& c : candidates) {
    size_t d = edit_distance(typed, c);
    if (d < best_d) best_d = d, best = c;
  }
  const size_t stem = typed.size() - std::min(typed.find_first_not_of('-'), typed.size());  // without dashes
  if (!best.empty() && best_d < stem && best_d <= std::max<size_t>(2, typed.size() / 3)) return best;
  // An unambiguous abbreviation of 3+ characters ("--nproc" for "--nproc-per-node"; '_' and '-'
  // spellings of one name count once).
  auto norm = [](std::string s) {
    std::replace(s.begin(), s.end(), '_', '-');
    return s;
  };
  std::vector<std::string> prefixed;
  for (const auto& c : candidates)
    if (stem >= 3 && c.size() > typed.size() && c.compare(0, typed.size(), typed) == 0 &&
        std::none_of(prefixed.begin(), prefixed.end(), [&](const std::string& p) { return norm(p) == norm(c); }))
      prefixed.push_back(c);
  return prefixed.size() == 1 ? prefixed[0] : "";
}

namespace {

bool named(const CLI::App* a) { return !a->get_name().empty(); }  // not an option group
bool visible(const CLI::App* a) { return !a->get_name().empty() && !a->get_group().empty(); }

std::string command_path(const CLI::App* a) {
  std::string path;
  for (; a != nullptr; a = a->get_parent()) {
    std::string name = a->get_parent() == nullptr ? std::string("nanochat") : a->get_name();
    path = path.empty() ? name : name + " " + path;
  }
  return path;
}

const CLI::App* find_subcommand(const CLI::App* a, const std::string& name) {
  auto subs = a->get_subcommands([&](const CLI::App* s) { return named(s) && s->check_name(name); });
  return subs.empty() ? nullptr : subs.front();
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

std::string unknown_command(const CLI::App* a, const std::string& typed) {
  std::vector<std::string> names;
  for (const CLI::App* s : a->get_subcommands([](const CLI::App* s) { return visible(s); }))
    names.push_back(s->get_name());
  std::string path = command_path(a), best = closest_name(typed, names);
  std::string msg = "unknown command '" + typed + "' for '" + path + "'";
  if (!best.empty()) return msg + "; did you mean '" + best + "'? (see " + path + " --help)";
  return msg + " (commands: " + join(names) + ")";
}

std::string unknown_flag(const CLI::App* a, const std::string& typed) {
  std::vector<std::string> names;
  for (const CLI::Option* o :
       a->get_options([](const CLI::Option* o) { return o->nonpositional() && !o->get_group().empty(); })) {
    for (const auto& l : o->get_lnames()) names.push_back("--" + l);
    for (const auto& s : o->get_snames()) names.push_back("-" + s);
  }
  std::string path = command_path(a), best = closest_name(typed, names);
  std::string msg = "unknown flag '" + typed + "' for '" + path + "'";
  if (!best.empty()) msg += "; did you mean '" + best + "'?";
  return msg + " (see " + path + " --help)";
}

bool is_number(const std::string& s) {
  char* end = nullptr;
  std::strtod(s.c_str(), &end);
  return !s.empty() && end == s.c_str() + s.size();
}

}  // namespace

std::string check_stage_flag(const CLI::App& top, const std::string& token, bool& takes_value) {
  const std::string name = token.substr(0, token.find('='));
  const size_t dot = name.find('.');
  if (name.compare(0, 2, "--") != 0 || dot == std::string::npos || dot == 2 || dot + 1 == name.size())
    return "unexpected argument '" + token +
           "'; a stage's flag is written --<command>.<flag> VALUE (e.g. --base-train.depth 8)";
  const std::string command = name.substr(2, dot - 2);
  const CLI::App* sub = find_subcommand(&top, command);
  if (sub == nullptr || !visible(sub)) {
    std::vector<std::string> names;
    for (const CLI::App* s : top.get_subcommands([](const CLI::App* s) { return visible(s); }))
      names.push_back(s->get_name());
    const std::string best = closest_name(command, names);
    return "unknown command '" + command + "' in '" + name + "'" +
           (best.empty() ? "" : "; did you mean '--" + best + name.substr(dot) + "'?");
  }
  const std::string flag = "--" + name.substr(dot + 1);
  const CLI::Option* opt = sub->get_option_no_throw(flag);
  if (opt == nullptr || !opt->nonpositional()) {
    const std::string inner = unknown_flag(sub, flag);
    return "in '" + name + "': " + inner;
  }
  takes_value = opt->get_expected_min() > 0;
  return "";
}

std::string check_names(const CLI::App& app, int argc, const char* const* argv) {
  const CLI::App* cur = &app;
  bool has_subcommands = !cur->get_subcommands(named).empty();
  for (int i = 1; i < argc; ++i) {
    const std::string tok = argv[i];
    if (tok == "--" || (cur->get_prefix_command() && tok[0] != '-')) {
      if (!cur->get_prefix_command()) return "";  // the rest is positional by definition
      // `run`: the ranks' command line is a nanochat command line.
      cur = &app;
      has_subcommands = true;
      if (tok == "--") continue;
    }
    if (tok.size() > 1 && tok[0] == '-' && !is_number(tok)) {
      const bool is_long = tok.compare(0, 2, "--") == 0;
      if (is_long && cur->get_allow_extras() && tok.substr(0, tok.find('=')).find('.') != std::string::npos) {
        bool takes_value = false;  // a stage's flag (`speedrun --base-train.depth 8`)
        if (std::string bad = check_stage_flag(app, tok, takes_value); !bad.empty()) return bad;
        if (takes_value && tok.find('=') == std::string::npos) ++i;
        continue;
      }
      const size_t eq = tok.find('=');
      const std::string name = is_long ? tok.substr(0, eq) : tok.substr(0, 2);
      const CLI::Option* opt = cur->get_option_no_throw(name);
      if (opt == nullptr) return unknown_flag(cur, name);
      const bool inline_value = is_long ? eq != std::string::npos : tok.size() > 2;
      if (opt->get_expected_min() > 0 && !inline_value) ++i;  // it takes a value, which may start with '-'
      continue;
    }
    if (!has_subcommands) continue;  // a leaf command's positional argument
    const CLI::App* sub = find_subcommand(cur, tok);
    if (sub == nullptr) return unknown_command(cur, tok);
    cur = sub;
    has_subcommands = !cur->get_subcommands(named).empty();
  }
  return "";
}

}  // namespace nanochat::cli
