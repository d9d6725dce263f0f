// systemd notifications at start-up (README: Running under systemd): the start timeout is
// extended while the WAL replay makes progress, and only then.

#include "util/notify.hpp"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>

#include "support/notify_socket.hpp"
#include "support/temp_dir.hpp"

namespace slotted::notify {
namespace {

using namespace std::chrono_literals;

TEST(StartupExtender, ExtendsAtOnceThenOnlyWhileThereIsProgress) {
  const std::string dir = test::make_temp_dir("notify-test");
  {
    test::notify_socket socket(dir + "/notify");
    {
      startup_extender extend(7s, 20ms);
      EXPECT_EQ(socket.next(5s), "EXTEND_TIMEOUT_USEC=7000000");
      // No progress: the extension runs out rather than being renewed.
      EXPECT_EQ(socket.next(200ms), "");
      progress();
      EXPECT_EQ(socket.next(5s), "EXTEND_TIMEOUT_USEC=7000000");
      EXPECT_EQ(socket.next(200ms), "");
      progress();
      EXPECT_EQ(socket.next(5s), "EXTEND_TIMEOUT_USEC=7000000");
    }
    progress();  // over: nothing more is sent
    EXPECT_EQ(socket.next(200ms), "");
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace slotted::notify
