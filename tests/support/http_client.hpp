#pragma once
// A small blocking HTTP/1.1 client over one keep-alive connection, for tests.

#include <chrono>
#include <cstdint>
#include <map>
#include <string>

namespace slotted::test {

struct http_reply {
  unsigned status = 0;  // 0: the connection failed or closed before a reply
  std::string body;
  std::map<std::string, std::string> headers;  // lower-case names
  bool keep_alive = false;
};

class http_client {
 public:
  explicit http_client(std::uint16_t port,
                       std::chrono::milliseconds timeout = std::chrono::seconds(30));
  ~http_client();

  http_reply request(const std::string& method, const std::string& target,
                     const std::string& body = "", const std::string& content_type = "",
                     const std::map<std::string, std::string>& headers = {});
  http_reply post_json(const std::string& target, const std::string& body) {
    return request("POST", target, body, "application/json");
  }
  http_reply get(const std::string& target) { return request("GET", target); }

 private:
  struct impl;
  impl* impl_;
};

// Sends raw bytes on a fresh connection, then reads until the server closes or
// `timeout` passes. Returns everything read.
std::string raw_exchange(std::uint16_t port, const std::string& bytes,
                         std::chrono::milliseconds timeout = std::chrono::seconds(10));

// The bytes of `POST /v1/increments` with a JSON `body` and `extra_headers` (each ending
// in CRLF), for raw_exchange and pipelining tests.
std::string http_post_bytes(const std::string& body, const std::string& extra_headers = "");

// The value of one series in a /metrics text ("name" or "name{labels}"); -1 when absent.
double metric_value(const std::string& metrics_text, const std::string& series);

// POST /v1/flush until it answers 200 (the database may still be recovering); false
// when it did not within `limit`.
bool flush_until_ok(http_client& client, std::chrono::seconds limit = std::chrono::seconds(60));

// Extracts an integer field from a flat JSON object ("count": 12 or "record_id": "12").
std::int64_t json_int(const std::string& body, const std::string& field);

// POST /v1/increments with an Idempotency-Key (and any other `headers`).
inline http_reply post_keyed(http_client& c, const std::string& key, const std::string& body,
                             std::map<std::string, std::string> headers = {}) {
  headers["Idempotency-Key"] = key;
  return c.request("POST", "/v1/increments", body, "application/json", headers);
}

}  // namespace slotted::test
