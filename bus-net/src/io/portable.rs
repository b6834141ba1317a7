//! Batches as loops of `recv_from` / `send_to`, for platforms without `recvmmsg`/`sendmmsg`.
//! No `unsafe`.

use std::io;
use std::net::{SocketAddr, UdpSocket};

use super::batch::{RecvBatch, DROPPED, SUFFIX_LEN};
use super::socket::{count_send_error, retry_interrupted, IoStats};

/// Fills `batch` with `recv_from` until the socket would block or the batch is full.
pub(super) fn recv(
    socket: &UdpSocket,
    batch: &mut RecvBatch,
    stats: &mut IoStats,
) -> io::Result<usize> {
    while batch.taken < batch.capacity() {
        let i = batch.taken;
        let max = batch.max_datagram;
        let Some(slot) = batch.slot_mut(i) else { break };
        let (len, from) = retry_interrupted(|| socket.recv_from(slot))?;
        let len = if len > max {
            stats.recv_too_large = stats.recv_too_large.saturating_add(1);
            DROPPED
        } else {
            stats.received = stats.received.saturating_add(1);
            len
        };
        if let (Some(l), Some(a)) = (batch.lens.get_mut(i), batch.addrs.get_mut(i)) {
            *l = len;
            *a = from;
        }
        batch.taken += 1;
        if batch.taken < batch.capacity() {
            stats.recv_calls = stats.recv_calls.saturating_add(1);
        }
    }
    Ok(batch.taken)
}

/// Sends each datagram with `send_to`; one with a suffix is put together in `scratch` first.
pub(super) fn send<'a, I>(
    socket: &UdpSocket,
    stats: &mut IoStats,
    scratch: &mut [u8],
    datagrams: I,
) -> io::Result<usize>
where
    I: Iterator<Item = (&'a [u8], Option<[u8; SUFFIX_LEN]>, SocketAddr)>,
{
    let mut sent = 0;
    for (payload, suffix, dest) in datagrams {
        let whole = match suffix {
            None => payload,
            Some(suffix) => {
                let len = payload.len() + SUFFIX_LEN;
                let Some(buf) = scratch.get_mut(..len) else {
                    stats.send_refused = stats.send_refused.saturating_add(1);
                    continue;
                };
                let (head, tail) = buf.split_at_mut(payload.len());
                head.copy_from_slice(payload);
                tail.copy_from_slice(&suffix);
                &*buf
            }
        };
        stats.send_calls = stats.send_calls.saturating_add(1);
        match retry_interrupted(|| socket.send_to(whole, dest)) {
            Ok(_) => {
                stats.sent = stats.sent.saturating_add(1);
                sent += 1;
            }
            Err(e) => count_send_error(stats, e, 1)?,
        }
    }
    Ok(sent)
}
