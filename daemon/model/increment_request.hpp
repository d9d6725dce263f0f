#pragma once
// One POST /v1/increments as the router validated it, and as the backend takes it
// (http::backend::submit). Pure data.

#include "model/keyed_request.hpp"

namespace slotted::ingest {

// Its increments and, when it carried an Idempotency-Key, that key with its body hash and
// the time it arrived: a keyed request whole (model/keyed_request.hpp). Without one `key`
// is empty (idempotency::valid_key() passes no empty key) and only `increments` counts.
struct increment_request : idempotency::keyed_request {
  bool keyed() const { return !key.empty(); }
};

}  // namespace slotted::ingest
