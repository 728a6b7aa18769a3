#pragma once
// Several non-blocking SimGrid calls made as one simcall.
//
// Each s4u call an actor makes (starting a transfer, resuming an actor) is a simcall: a context
// switch to SimGrid's maestro and back. Made from inside a simcall, the same calls take SimGrid's
// maestro fast path and run directly. `code` must not block (no wait, sleep or suspension) and must
// not create activities whose owner SimGrid takes from the calling actor (Mailbox::put_init and
// get_init, Exec): create those before, and start (or test) them inside. The calls run at the same
// simulated instant and in the same order among themselves; other actors' calls of that instant no
// longer fall between them.
#include <utility>

#include <simgrid/simix.hpp>

namespace memtwin::sim {

template <class Code>
void in_one_simcall(Code&& code) {
  simgrid::kernel::actor::simcall_answered(std::forward<Code>(code));
}

}  // namespace memtwin::sim
