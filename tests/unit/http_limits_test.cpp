// Connection limits and the HTTP threads' resilience to a failing handler.

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <chrono>
#include <new>
#include <thread>

#include "http/listener.hpp"

namespace slotted {
namespace {

TEST(ConnectionLimit, KeepsAReserveOfDescriptorsForTheDaemon) {
  EXPECT_EQ(http::connection_limit(10000, 1048576, 300), 10000u);
  EXPECT_EQ(http::connection_limit(10000, 10100, 300), 9800u);  // lowered
  EXPECT_EQ(http::connection_limit(10000, 1024, 300), 724u);
  EXPECT_EQ(http::connection_limit(10000, 400, 300), 200u);  // half when the reserve is large
  EXPECT_EQ(http::connection_limit(10000, RLIM_INFINITY, 300), 10000u);
}

TEST(RunIoContext, AThrowingHandlerDoesNotEndTheThread) {
  boost::asio::io_context ctx;
  std::atomic<bool> later_ran{false};
  boost::asio::post(ctx, [] { throw std::bad_alloc(); });
  boost::asio::post(ctx, [] { throw std::runtime_error("boom"); });
  boost::asio::post(ctx, [&] { later_ran = true; });
  std::thread t([&] { http::run_io_context(ctx); });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!later_ran && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  ctx.stop();
  t.join();
  EXPECT_TRUE(later_ran);
}

}  // namespace
}  // namespace slotted
