#pragma once
// The chat page's browser tests: a headless Chromium (serve/cdp.h) with a fresh profile that has
// loaded the page of an in-process server, and screenshots saved for a person to look at.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>

#include "serve/cdp.h"
#include "serve/serve_util.h"

namespace sctest {

struct Browser {
  std::filesystem::path profile;
  std::unique_ptr<Chromium> c;
  explicit Browser(int port) {
    static int count = 0;
    profile = std::filesystem::temp_directory_path() /
              ("nc_page_test_" + std::to_string(::getpid()) + "_" + std::to_string(count++));
    std::filesystem::remove_all(profile);
    const std::string bin = find_chromium();
    if (bin.empty())
      throw std::runtime_error("chromium not found: install it (scripts/deps.sh) or set NANOCHAT_CHROMIUM");
    c = std::make_unique<Chromium>(bin, profile.string());
    c->open("http://127.0.0.1:" + std::to_string(port) + "/");
    if (!c->wait_for("document.readyState === 'complete' && document.getElementById('input')"))
      throw std::runtime_error("the page did not load: " + c->log());
  }
  ~Browser() {
    c.reset();
    std::filesystem::remove_all(profile);
  }
  /// Saves a screenshot as `name` in the working directory; returns the PNG's bytes.
  std::string save_screenshot(const std::string& name) {
    const std::string png = c->screenshot();
    std::ofstream f(name, std::ios::binary);
    f.write(png.data(), static_cast<std::streamsize>(png.size()));
    return png;
  }
};

}  // namespace sctest
