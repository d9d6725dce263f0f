// The secrets a config names: the password (mysql.password_file or password_env) and
// the auth token (http.auth_token_file), read after the walk. Neither ever reaches a
// message: a problem names the file or the variable.

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "config/checker.hpp"

namespace slotted::config::detail {
namespace {

std::string trim(std::string s) {
  const auto not_space = [](unsigned char c) { return !std::isspace(c); };
  s.erase(s.begin(), std::find_if(s.begin(), s.end(), not_space));
  s.erase(std::find_if(s.rbegin(), s.rend(), not_space).base(), s.end());
  return s;
}

}  // namespace

result<std::string> read_whole_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::exists(path, ec) && !std::filesystem::is_regular_file(path, ec))
    return failure(std::make_error_code(std::errc::invalid_argument), "not a regular file");
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int err = errno != 0 ? errno : EIO;
    return failure(std::error_code(err, std::generic_category()), std::strerror(err));
  }
  std::ostringstream buf;
  buf << in.rdbuf();
  if (in.bad()) return failure(std::make_error_code(std::errc::io_error), "read error");
  return buf.str();
}

void resolve_secrets(daemon_config& cfg, checker& c, bool password_file_from_flag) {
  auto& m = cfg.mysql;
  if (!m.password_file.empty() && !m.password_env.empty()) {
    c.fail_plain(m.key("password_file"), "set password_file or password_env, not both");
  } else if (!m.password_file.empty()) {
    auto read = read_whole_file(m.password_file);
    if (!read) {
      const std::string msg = "cannot read '" + m.password_file + "': " + read.failed().text();
      if (password_file_from_flag) {
        c.fail_flag("--mysql-password-file: " + msg);
      } else {
        c.fail_plain(m.key("password_file"), msg);
      }
    } else {
      // One trailing newline is an artefact of editors, not part of the password.
      std::string content = std::move(read).value();
      if (!content.empty() && content.back() == '\n') content.pop_back();
      if (!content.empty() && content.back() == '\r') content.pop_back();
      m.password = std::move(content);
    }
  } else if (!m.password_env.empty()) {
    const char* value = std::getenv(m.password_env.c_str());
    if (value == nullptr) {
      c.fail_plain(m.key("password_env"),
                   "environment variable '" + m.password_env + "' is not set");
    } else {
      m.password = value;
    }
  }

  auto& h = cfg.http;
  if (!h.auth_token_file.empty()) {
    auto read = read_whole_file(h.auth_token_file);
    if (!read) {
      c.fail_plain("http.auth_token_file",
                   "cannot read '" + h.auth_token_file + "': " + read.failed().text());
    } else {
      h.auth_token = trim(std::move(read).value());
      if (h.auth_token.empty()) c.fail_plain("http.auth_token_file", "the token file is empty");
    }
  }
}

}  // namespace slotted::config::detail
