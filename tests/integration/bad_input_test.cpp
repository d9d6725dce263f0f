// Every error case of the README's HTTP API gets its status and a JSON error, and applies nothing:
// not to memory (nothing is flushed afterwards) and not to the database.

#include <gtest/gtest.h>

#include "integration/load.hpp"
#include "support/daemon_process.hpp"
#include "support/http_client.hpp"

namespace slotted::test {
namespace {

constexpr const char* token = "s3cret-token";

class BadInput : public ::testing::Test {
 protected:
  void SetUp() override {
    auto& server = shared_mariadb();
    database_ = migrated_database(server);
    auto cfg = test_config(server, database_);
    cfg.accept_undeclared_types = false;
    cfg.counters = {{"repo_downloads", 123, std::nullopt}, {"page_views", 7, std::nullopt}};
    cfg.http.auth_token = token;
    cfg.http.max_body_bytes = 4096;
    cfg.http.max_items_per_request = 10;
    cfg.flush.interval = std::chrono::hours(1);
    daemon_ = std::make_unique<in_process_daemon>(cfg);
    client_ = std::make_unique<http_client>(daemon_->port());
    // Something already in the database, to see that it stays as it is.
    ASSERT_EQ(
        post(
            R"([{"record_type": 123, "record_id": 1, "delta": 5}, {"record_type": "page_views", "record_id": 2}])")
            .status,
        202u);
    ASSERT_EQ(flush(), 2);
    before_ = read_table(shared_mariadb(), database_);
  }
  void TearDown() override {
    client_.reset();
    daemon_.reset();
  }

  http_reply post(const std::string& body, const std::string& type = "application/json",
                  std::map<std::string, std::string> headers = {
                      {"Authorization", std::string("Bearer ") + token}}) {
    return client_->request("POST", "/v1/increments", body, type, headers);
  }
  std::int64_t flush() {
    const auto r = client_->request("POST", "/v1/flush", "", "",
                                    {{"Authorization", std::string("Bearer ") + token}});
    EXPECT_EQ(r.status, 200u) << r.body;
    return r.status == 200 ? json_int(r.body, "flushed_rows") : -1;
  }
  // The reply is an error with a JSON body; nothing was applied anywhere.
  void expect_refused(const http_reply& r, unsigned status,
                      std::optional<std::int64_t> index = std::nullopt) {
    EXPECT_EQ(r.status, status) << r.body;
    EXPECT_EQ(r.headers.count("content-type") ? r.headers.at("content-type") : "",
              "application/json");
    EXPECT_NE(r.body.find("\"error\": "), std::string::npos) << r.body;
    if (index) {
      EXPECT_EQ(json_int(r.body, "index"), *index) << r.body;
    }
    EXPECT_EQ(flush(), 0) << "a refused request left something pending";
    EXPECT_EQ(read_table(shared_mariadb(), database_).totals, before_.totals);
  }

  std::string database_;
  std::unique_ptr<in_process_daemon> daemon_;
  std::unique_ptr<http_client> client_;
  table_state before_;
};

constexpr const char* good = R"({"record_type": 123, "record_id": 9, "delta": 1})";

TEST_F(BadInput, MalformedJsonIs400AndNamesTheItem) {
  expect_refused(post(std::string("[") + good + ", {\"record_type\": 123, \"record_id\": }]"), 400,
                 1);
  expect_refused(post("{\"record_type\": 123"), 400, 0);
  expect_refused(post(""), 400);
  expect_refused(post(std::string(good) + " trailing"), 400);
  expect_refused(post(std::string(good) + "\n{\"record_type\": 123, \"record_id\": 1,}\n",
                      "application/x-ndjson"),
                 400, 1);
  expect_refused(post("42"), 400);
}

TEST_F(BadInput, WrongTypeOutOfRangeUnknownFieldAndUndeclaredTypeAre400) {
  expect_refused(post(std::string("[") + good + R"(, {"record_type": 123, "record_id": 1.5}])"),
                 400, 1);
  expect_refused(post(R"({"record_type": 123, "record_id": true})"), 400, 0);
  expect_refused(post(R"({"record_type": 123, "record_id": -1})"), 400, 0);
  expect_refused(post(R"({"record_type": 123, "record_id": 18446744073709551616})"), 400, 0);
  expect_refused(post(R"({"record_type": 123, "record_id": "18446744073709551616"})"), 400, 0);
  expect_refused(post(R"({"record_type": 123, "record_id": "12a"})"), 400, 0);
  expect_refused(post(R"({"record_type": 2147483648, "record_id": 1})"), 400, 0);
  expect_refused(post(R"({"record_type": 123, "record_id": 1, "delta": 2147483648})"), 400, 0);
  expect_refused(post(R"({"record_type": 123, "record_id": 1, "delta": "1"})"), 400, 0);
  expect_refused(post(std::string("[") + good + "," + good +
                      R"(, {"record_type": 123, "record_id": 1, "dleta": 1}])"),
                 400, 2);
  expect_refused(post(R"({"record_type": 999, "record_id": 1})"), 400, 0);
  expect_refused(post(R"({"record_type": "no_such_counter", "record_id": 1})"), 400, 0);
  expect_refused(post(R"({"record_id": 1})"), 400, 0);
  expect_refused(post(R"([1])"), 400, 0);
}

TEST_F(BadInput, MissingOrWrongTokenIs401) {
  expect_refused(post(good, "application/json", {}), 401);
  expect_refused(post(good, "application/json", {{"Authorization", "Bearer wrong"}}), 401);
  expect_refused(post(good, "application/json", {{"Authorization", std::string("Basic ") + token}}),
                 401);
  // Health and metrics stay open.
  EXPECT_EQ(client_->get("/healthz").status, 200u);
  EXPECT_EQ(client_->get("/metrics").status, 200u);
  // The scheme name is case-insensitive (RFC 7235).
  EXPECT_EQ(
      post(good, "application/json", {{"Authorization", std::string("bearer ") + token}}).status,
      202u);
}

TEST_F(BadInput, UnknownPathIs404AndWrongMethodIs405WithAllow) {
  expect_refused(client_->request("POST", "/v1/increment", good, "application/json"), 404);
  const auto r = client_->request("GET", "/v1/increments");
  expect_refused(r, 405);
  EXPECT_EQ(r.headers.count("allow") ? r.headers.at("allow") : "", "POST");
}

TEST_F(BadInput, OversizedBodyAndTooManyItemsAre413) {
  std::string big = "[";
  while (big.size() < 5000) big += std::string(good) + ",";
  big += std::string(good) + "]";
  expect_refused(post(big), 413);
  std::string eleven = "[";
  for (int i = 0; i < 11; ++i) eleven += std::string(i ? "," : "") + good;
  expect_refused(post(eleven + "]"), 413, 10);
}

TEST_F(BadInput, OtherContentTypeIs415) {
  expect_refused(post(good, "text/plain"), 415);
  expect_refused(post(good, ""), 415);
}

TEST_F(BadInput, PendingLimitIs503WithRetryAfterAndRecoversAfterFlush) {
  // A daemon of its own with a tiny limit and no periodic flush.
  auto cfg = test_config(shared_mariadb(), database_);
  cfg.flush.interval = std::chrono::hours(1);
  cfg.flush.max_pending_keys = 3;
  in_process_daemon small(cfg);
  http_client c(small.port());
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(c.post_json("/v1/increments",
                          R"({"record_type": 1, "record_id": )" + std::to_string(100 + i) + "}")
                  .status,
              202u);
  }
  const auto refused = c.post_json("/v1/increments", R"({"record_type": 1, "record_id": 200})");
  EXPECT_EQ(refused.status, 503u);
  EXPECT_TRUE(refused.headers.count("retry-after"));
  ASSERT_EQ(c.request("POST", "/v1/flush").status, 200u);
  EXPECT_EQ(shared_mariadb().query_int(
                database_, "SELECT COUNT(*) FROM slotted_counters WHERE record_id = 200"),
            0);
  EXPECT_EQ(
      shared_mariadb().query_int(
          database_, "SELECT COUNT(*) FROM slotted_counters WHERE record_id BETWEEN 100 AND 102"),
      3);
  EXPECT_EQ(c.post_json("/v1/increments", R"({"record_type": 1, "record_id": 200})").status, 202u);
}

}  // namespace
}  // namespace slotted::test
