//! The socket layer: non-blocking UDP sockets and batched send and receive with preallocated
//! buffers, polled by the bridge actor (busy polling when pinned).
//!
//! - [`socket`]: [`UdpEndpoint`], creation and options (`socket2`), the error policy, counters.
//! - [`batch`]: [`RecvBatch`] and [`SendBatch`], the preallocated buffers of a batch.
//! - `linux`: `recvmmsg`/`sendmmsg`, one system call per batch (Linux only; all of the crate's
//!   `unsafe` is here).
//! - `portable`: the same batches as loops of `recv_from`/`send_to`, everywhere else.
//!
//! The error policy, in one place ([`socket::classify`]): `EINTR` is retried; `EAGAIN` /
//! `EWOULDBLOCK` means no data (receive) or no room (send, the datagram is dropped and
//! counted: a low-latency bridge does not queue behind a full socket); errors that an ICMP
//! message surfaces (`ECONNREFUSED`, `ECONNRESET`, `EHOSTUNREACH`, `ENETUNREACH`) and
//! per-datagram refusals (`EMSGSIZE`, `EACCES`/`EPERM`, `ENOBUFS`) are counted in [`IoStats`] and
//! the batch goes on; anything else (a closed or invalid socket, `ENOMEM`, ...) is returned to
//! the caller as fatal.

pub(crate) mod batch;
#[cfg(target_os = "linux")]
mod linux;
// Also built for tests on Linux, so the fallback is exercised there too.
#[cfg(any(not(target_os = "linux"), test))]
mod portable;
pub(crate) mod socket;

pub use batch::{RecvBatch, SendBatch};
pub use socket::{IoStats, SocketConfig, UdpEndpoint};
