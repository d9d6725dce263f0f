// The daemon's one error category (model/errc.hpp) and its result type (model/result.hpp).
#include "model/result.hpp"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace slotted {
namespace {

TEST(SlottedErrc, OneCategoryNamedSlottedWithAMessageForEveryCode) {
  std::set<std::string> messages;
  for (int v = 1; v <= static_cast<int>(last_errc); ++v) {
    const std::error_code e = static_cast<errc>(v);
    EXPECT_EQ(&e.category(), &slotted_category());
    EXPECT_STREQ(e.category().name(), "slotted");
    EXPECT_TRUE(e) << v;
    EXPECT_NE(e.message().rfind("unknown slotted error", 0), 0u) << v << ": " << e.message();
    messages.insert(e.message());
  }
  // No two codes read alike.
  EXPECT_EQ(messages.size(), static_cast<std::size_t>(last_errc));
  EXPECT_EQ(std::error_code(errc::wal_write_failed).message(),
            "the write-ahead log cannot be written; retry later");
  const std::error_code unknown(static_cast<int>(last_errc) + 1, slotted_category());
  EXPECT_EQ(unknown.message(), "unknown slotted error " + std::to_string(unknown.value()));
  // Another category's code with the same value is not ours.
  EXPECT_NE(std::error_code(errc::over_limit), std::make_error_code(std::errc::invalid_argument));
}

TEST(SlottedResult, AValueOrACodeWithItsDetail) {
  const result<int> ok = 7;
  ASSERT_TRUE(ok);
  EXPECT_EQ(*ok, 7);
  EXPECT_FALSE(ok.error());

  const result<int> failed(errc::database_unavailable, "database: gone");
  ASSERT_FALSE(failed);
  EXPECT_EQ(failed.error(), errc::database_unavailable);
  EXPECT_EQ(failed.failed().detail, "database: gone");
  EXPECT_EQ(failed.failed().text(), "database: gone");
  EXPECT_THROW(static_cast<void>(failed.value()), std::bad_variant_access);

  // Without a detail, the text is the code's message.
  const result<std::string> bare = failure(errc::draining);
  EXPECT_EQ(bare.failed().text(), "shutting down");
}

TEST(SlottedResult, VoidIsSuccessOrAFailure) {
  const result<void> ok;
  EXPECT_TRUE(ok);
  EXPECT_FALSE(ok.error());
  const result<void> failed(errc::wal_sync_failed, "fdatasync: Input/output error");
  ASSERT_FALSE(failed);
  EXPECT_EQ(failed.error(), errc::wal_sync_failed);
  EXPECT_EQ(failed.failed().text(), "fdatasync: Input/output error");
  // A failure passes on unchanged from one result type to another.
  const result<int> passed = failed.failed();
  EXPECT_EQ(passed.error(), errc::wal_sync_failed);
}

}  // namespace
}  // namespace slotted
