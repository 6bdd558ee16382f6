#include "nanochat/cli/script_names.h"

#include <utility>

#include "nanochat/core/error.h"

namespace nanochat::cli {

namespace {

// nanochat's runnable modules (scripts/*.py at the followed commit, nanochat/dataset.py and the
// chat web server) and our subcommand for each.
const std::pair<const char*, const char*> kModules[] = {
    {"scripts.base_train", "base-train"}, {"scripts.base_eval", "base-eval"}, {"scripts.tok_train", "tok-train"},
    {"scripts.tok_eval", "tok-eval"},     {"scripts.chat_cli", "chat"},       {"scripts.chat_web", "chat-web"},
    {"scripts.chat_sft", "chat-sft"},     {"scripts.chat_eval", "chat-eval"}, {"scripts.chat_rl", "chat-rl"},
    {"nanochat.dataset", "data download"}};

std::string known_modules() {
  std::string s;
  for (const auto& [m, sub] : kModules) s += (s.empty() ? "" : ", ") + std::string(m);
  return s;
}

// Rewrites args[at] == "-m", args[at + 1] = module, in place.
std::vector<std::string> rewrite_at(const std::vector<std::string>& args, size_t at,
                                    const std::function<bool(const std::string&)>& registered) {
  if (at + 1 >= args.size() || args[at + 1].empty() || args[at + 1][0] == '-')
    fail("-m needs a module, like nanochat's `-m scripts.base_train` (known: ", known_modules(), ")");
  std::string module = args[at + 1];
  if (module.size() > 3 && module.compare(module.size() - 3, 3, ".py") == 0) module.resize(module.size() - 3);
  for (char& c : module)
    if (c == '/') c = '.';
  const std::vector<std::string> words = subcommand_of_module(module);
  if (words.empty())
    fail("-m ", args[at + 1], ": nanochat has no such module; the ones this program runs: ", known_modules());
  if (!registered(words[0]))
    fail("-m ", args[at + 1], ": nanochat's ", module, " (`nanochat ", words[0],
         "` here) is not available in nanochat.cpp yet; see README.md for the commands that are");
  std::vector<std::string> out(args.begin(), args.begin() + static_cast<std::ptrdiff_t>(at));
  out.insert(out.end(), words.begin(), words.end());
  size_t rest = at + 2;
  if (rest < args.size() && args[rest] == "--") ++rest;  // torchrun's separator before the script's flags
  out.insert(out.end(), args.begin() + static_cast<std::ptrdiff_t>(rest), args.end());
  return out;
}

}  // namespace

std::vector<std::string> subcommand_of_module(const std::string& module) {
  for (const auto& [m, sub] : kModules) {
    if (module != m) continue;
    std::vector<std::string> words;
    std::string w;
    for (const char* p = sub;; ++p) {
      if (*p == ' ' || *p == '\0') {
        words.push_back(w);
        w.clear();
        if (*p == '\0') break;
      } else {
        w += *p;
      }
    }
    return words;
  }
  return {};
}

std::vector<std::string> rewrite_module_command(const std::vector<std::string>& args,
                                                const std::function<bool(const std::string&)>& registered) {
  if (args.empty()) return args;
  if (args[0] == "-m") return rewrite_at(args, 0, registered);
  if (args[0] != "run") return args;
  // `run`'s flags come first; the ranks' command starts at the first word that is not one of them.
  // A `-m` there (torchrun's module form) is the ranks' command.
  for (size_t i = 1; i < args.size(); ++i) {
    if (args[i] == "-m") return rewrite_at(args, i, registered);
    if (args[i] == "--" || args[i].empty() || args[i][0] != '-') {
      // a flag's separate value (`--nproc_per_node 2`) is not the command: skip it
      const std::string& prev = args[i - 1];
      const bool boolean = prev == "--allow-loopback-master" || prev == "--standalone";
      if (args[i] != "--" && i > 1 && prev.rfind("--", 0) == 0 && prev.find('=') == std::string::npos && !boolean)
        continue;
      break;
    }
  }
  return args;
}

}  // namespace nanochat::cli
