// What web servers in front of the daemon rely on: `Prefer: return=minimal` answers
// (nginx mirror subrequests keep their upstream connection only for bodiless answers).

#include <gtest/gtest.h>

#include "support/daemon_process.hpp"
#include "support/http_client.hpp"

namespace slotted::test {
namespace {

class Edge : public ::testing::Test {
 protected:
  void SetUp() override {
    auto& server = shared_mariadb();
    database_ = migrated_database(server);
    auto cfg = test_config(server, database_);
    cfg.flush.interval = std::chrono::hours(1);
    daemon_ = std::make_unique<in_process_daemon>(cfg);
  }

  std::int64_t total(std::uint64_t id) {
    http_client c(daemon_->port());
    EXPECT_EQ(c.request("POST", "/v1/flush").status, 200u);
    return shared_mariadb().query_int(
        database_,
        "SELECT CAST(COALESCE(SUM(count), 0) AS SIGNED) FROM slotted_counters WHERE record_id = " +
            std::to_string(id));
  }

  std::string database_;
  std::unique_ptr<in_process_daemon> daemon_;
};

std::string post(const std::string& body, const std::string& extra_headers) {
  return "POST /v1/increments HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" +
         extra_headers + "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

TEST_F(Edge, PreferReturnMinimalIsAnswered204WithoutABodyOnTheSameConnection) {
  // Two minimal POSTs, then a health check, pipelined on one connection: the 204s must
  // carry no body (a stray one would be read as the start of the next answer).
  const std::string body = R"({"record_type": 1, "record_id": 61, "delta": 3})";
  const auto reply = raw_exchange(
      daemon_->port(), post(body, "Prefer: return=minimal\r\n") +
                           post(body, "Prefer: respond-async, RETURN=\"minimal\"; x=y\r\n") +
                           "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  const std::string no_content =
      "HTTP/1.1 204 No Content\r\nPreference-Applied: return=minimal\r\n\r\n";
  ASSERT_TRUE(reply.starts_with(no_content + no_content + "HTTP/1.1 200 OK\r\n")) << reply;
  EXPECT_EQ(total(61), 6);
}

TEST_F(Edge, OtherPreferencesAndRefusalsKeepTheirBodies) {
  http_client c(daemon_->port());
  const std::string body = R"({"record_type": 1, "record_id": 62})";
  const auto full = c.request("POST", "/v1/increments", body, "application/json",
                              {{"Prefer", "return=representation"}});
  EXPECT_EQ(full.status, 202u);
  EXPECT_EQ(full.body, R"({"accepted": 1})");
  // An error is never hidden by the preference: the client needs to know why.
  const auto bad = c.request("POST", "/v1/increments", R"({"record_type": -1, "record_id": 1})",
                             "application/json", {{"Prefer", "return=minimal"}});
  EXPECT_EQ(bad.status, 400u);
  EXPECT_NE(bad.body.find("record_type"), std::string::npos) << bad.body;
  EXPECT_EQ(total(62), 1);
}

}  // namespace
}  // namespace slotted::test
