//! The endpoint's sans-IO tests on one simulated network ([`world`]): hosts at addresses,
//! each a shipped `Endpoint` driven through the calls a bridge makes, a simulated clock, a
//! link with loss, duplication, reordering and outages, multicast groups, and an off-path
//! adversary that forges any source (and allowed hosts that subscribe like anyone). Modules
//! by subject, each attack beside the promise it attacks:
//!
//! - `world`: the network; `stream`: one publisher's stream to one subscriber on it;
//!   `alloc`: a per-thread allocation counter (this build's global allocator).
//! - `reliable`: reliable delivery under loss, outages and forged NAKs/`Unavailable`s.
//! - `large`: fragmented messages, reliable and best effort.
//! - `schema`: schema fetches, forged replies and spoofed requests.

mod admission;
mod alloc;
mod discovery;
mod fleet;
mod flood;
mod handshake;
mod large;
mod multicast;
mod pair;
mod psk;
mod reliable;
mod schema;
mod stream;
mod tokens;
mod wire;
mod world;
