//! The socket layer: non-blocking UDP sockets and batched send and receive with preallocated
//! buffers, polled by the bridge actor (busy polling when pinned).
//!
//! - [`socket`]: [`UdpEndpoint`], creation and options (`socket2`), the error policy, counters.
//! - `multicast`: joining a group on a shared port, and the TTL, interface and loopback of
//!   multicast sends.
//! - [`batch`]: [`RecvBatch`] and [`SendBatch`], the preallocated buffers of a batch.
//! - [`start`]: the session id of a start, the `CLOCK_REALTIME` send timestamp, and cookie
//!   secrets from the operating system's random source.
//! - `linux`: `recvmmsg`/`sendmmsg`, one system call per batch (Linux only; all of the crate's
//!   `unsafe` is here).
//! - `portable`: the same batches as loops of `recv_from`/`send_to`, everywhere else.
//!
//! The error policy, in one place ([`socket::classify`]): `EINTR` is retried; `EAGAIN` /
//! `EWOULDBLOCK` means no data (receive) or no room (send, the datagram is dropped and
//! counted: a low-latency bridge does not queue behind a full socket); errors that an ICMP
//! message surfaces (`ECONNREFUSED`, `ECONNRESET`, `EHOSTUNREACH`, `ENETUNREACH`) and
//! per-datagram refusals (`EMSGSIZE`, `EACCES`/`EPERM`, `ENOBUFS`) are counted in [`IoStats`] and
//! the batch goes on. A send that fails for its destination (`EINVAL`, `EADDRNOTAVAIL`,
//! `EAFNOSUPPORT`: an answer to a forged source such as `0.0.0.0:0`) or for any reason that does
//! not say the socket is broken is counted and dropped too: one destination never stops the
//! others. Only a broken socket (`EBADF`, `ENOTSOCK`, `EFAULT`; on receive, anything
//! unclassified) is returned to the caller as fatal.

pub(crate) mod batch;
#[cfg(target_os = "linux")]
mod linux;
mod multicast;
pub use multicast::multicast_v4_interfaces;
pub(crate) use multicast::v6_interface;
// Also built for tests on Linux, so the fallback is exercised there too.
#[cfg(any(not(target_os = "linux"), test))]
mod portable;
pub(crate) mod socket;
pub(crate) mod start;

pub(crate) use batch::SUFFIX_LEN;
pub use batch::{RecvBatch, SendBatch, MAX_BATCH};
pub use socket::{IoStats, SocketConfig, UdpEndpoint};
pub use start::{new_session_id, random_secret, realtime_ns};

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;
    use std::time::{Duration, Instant};

    use super::*;

    fn endpoint() -> UdpEndpoint {
        let addr: SocketAddr = "127.0.0.1:0".parse().unwrap();
        UdpEndpoint::bind(addr, &SocketConfig::default()).unwrap()
    }

    /// Receives until `want` datagrams arrived or 5 s passed, sleeping between empty polls.
    fn recv_all(
        ep: &mut UdpEndpoint,
        batch: &mut RecvBatch,
        want: usize,
    ) -> Vec<(Vec<u8>, SocketAddr)> {
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut got = Vec::new();
        while got.len() < want && Instant::now() < deadline {
            if ep.recv_batch(batch).unwrap() == 0 {
                std::thread::sleep(Duration::from_millis(1));
            }
            got.extend(batch.iter().map(|(b, a)| (b.to_vec(), a)));
        }
        got
    }

    /// A fan-out where each destination's datagram ends with its own suffix: the shared bytes
    /// and the suffix arrive as one datagram, whatever the batch size (one goes by `sendmsg`,
    /// several by `sendmmsg`).
    #[test]
    #[cfg_attr(miri, ignore)]
    fn each_destination_gets_its_own_suffix() {
        let mut tx = endpoint();
        let mut rx = [endpoint(), endpoint(), endpoint()];
        let dests: Vec<_> = rx.iter().map(|r| r.local_addr()).collect();
        let mut batch = SendBatch::new(16);
        let mut recv = RecvBatch::new(4, 1472);
        let shared = [0xabu8; 40];
        for fan in [1usize, 3] {
            let sent = tx
                .send_batch_suffixed(
                    &mut batch,
                    dests
                        .iter()
                        .take(fan)
                        .enumerate()
                        .map(|(i, &d)| (&shared[..], Some([i as u8 + 1; SUFFIX_LEN]), d)),
                )
                .unwrap();
            assert_eq!(sent, fan);
            for (i, r) in rx.iter_mut().take(fan).enumerate() {
                let got = recv_all(r, &mut recv, 1);
                let mut want = shared.to_vec();
                want.extend([i as u8 + 1; SUFFIX_LEN]);
                assert_eq!(got[0].0, want, "destination {i}, fan-out {fan}");
            }
        }
        // Without a suffix the datagram is the shared bytes alone.
        tx.send_batch_suffixed(&mut batch, [(&shared[..], None, dests[0])])
            .unwrap();
        assert_eq!(recv_all(&mut rx[0], &mut recv, 1)[0].0, shared.to_vec());
    }

    #[test]
    #[cfg_attr(miri, ignore)]
    fn empty_socket_receives_nothing() {
        let mut ep = endpoint();
        let mut batch = RecvBatch::new(16, 1472);
        assert_eq!(ep.recv_batch(&mut batch).unwrap(), 0);
        assert_eq!(batch.iter().count(), 0);
        assert_eq!(ep.stats().received, 0);
    }

    /// Light traffic asks for one datagram (a drained socket was seen last); a call that
    /// fills what it asked for makes the next ask for the whole batch; nothing is lost or
    /// reordered across the switch.
    #[test]
    #[cfg(target_os = "linux")]
    #[cfg_attr(miri, ignore)]
    fn a_drained_socket_is_polled_for_one_then_a_full_batch() {
        let mut rx = endpoint();
        let mut tx = endpoint();
        let dest = rx.local_addr();
        let mut batch = RecvBatch::new(16, 1472);
        assert_eq!(
            rx.recv_batch(&mut batch).unwrap(),
            0,
            "empty: light from now"
        );
        for i in 0..20u8 {
            assert!(tx.send_to(&[i], dest).unwrap());
        }
        // Loopback delivers synchronously: all 20 wait in the socket's buffer now.
        let mut sizes = Vec::new();
        let mut got = Vec::new();
        while got.len() < 20 {
            let n = rx.recv_batch(&mut batch).unwrap();
            assert!(n > 0, "all 20 were queued");
            sizes.push(n);
            got.extend(batch.iter().map(|(b, _)| b[0]));
        }
        assert_eq!(sizes, [1, 16, 3], "one, then whole batches");
        assert_eq!(got, (0..20).collect::<Vec<u8>>());
        assert_eq!(rx.recv_batch(&mut batch).unwrap(), 0);
        // The light receive checks sizes and senders as the batched one does.
        let mut small = RecvBatch::new(16, 100);
        assert_eq!(rx.recv_batch(&mut small).unwrap(), 0, "light from now");
        assert!(tx.send_to(&[7u8; 101], dest).unwrap());
        assert_eq!(
            rx.recv_batch(&mut small).unwrap(),
            1,
            "taken off the socket"
        );
        assert_eq!(small.iter().count(), 0, "and dropped: too large");
        assert_eq!(rx.stats().recv_too_large, 1);
        assert_eq!(
            rx.recv_batch(&mut small).unwrap(),
            0,
            "whole batch, empty: light"
        );
        assert!(tx.send_to(&[7u8; 100], dest).unwrap());
        assert_eq!(rx.recv_batch(&mut small).unwrap(), 1);
        let (bytes, from) = small.get(0).expect("a datagram at the limit is kept");
        assert_eq!((bytes.len(), from), (100, tx.local_addr()));
    }

    #[test]
    #[cfg_attr(miri, ignore)]
    fn batch_send_to_many_destinations_and_batch_receive() {
        const K: usize = 40;
        for n in 1..=4usize {
            let mut sender = endpoint();
            let mut receivers: Vec<UdpEndpoint> = (0..n).map(|_| endpoint()).collect();
            let dests: Vec<SocketAddr> = receivers.iter().map(|r| r.local_addr()).collect();
            let payloads: Vec<Vec<u8>> = (0..K).map(|i| vec![i as u8; 1 + i * 30]).collect();
            // Every payload to every destination; batches of 16 so several calls are needed.
            let mut send = SendBatch::new(16);
            let datagrams = payloads
                .iter()
                .flat_map(|p| dests.iter().map(move |&d| (p.as_slice(), d)));
            let sent = sender.send_batch(&mut send, datagrams).unwrap();
            assert_eq!(sent, K * n);
            assert_eq!(sender.stats().sent, (K * n) as u64);
            let mut batch = RecvBatch::new(32, 1472);
            for r in &mut receivers {
                let got = recv_all(r, &mut batch, K);
                assert_eq!(got.len(), K, "receiver {} of {n}", r.local_addr());
                for (i, (bytes, from)) in got.iter().enumerate() {
                    assert_eq!(bytes, &payloads[i]);
                    assert_eq!(*from, sender.local_addr());
                }
                assert_eq!(r.stats().received, K as u64);
            }
        }
    }

    #[test]
    #[cfg_attr(miri, ignore)]
    fn oversized_datagram_is_counted_and_dropped() {
        let mut sender = endpoint();
        let mut receiver = endpoint();
        let to = receiver.local_addr();
        let big = vec![7u8; 2000];
        let small = vec![1u8; 1472];
        let mut send = SendBatch::new(4);
        let list = [(big.as_slice(), to), (small.as_slice(), to)];
        assert_eq!(sender.send_batch(&mut send, list).unwrap(), 2);
        let mut batch = RecvBatch::new(8, 1472);
        let got = recv_all(&mut receiver, &mut batch, 1);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].0, small);
        assert_eq!(receiver.stats().recv_too_large, 1);
    }

    /// A closed loopback port answers with ICMP port unreachable; the error surfaces as
    /// `ECONNREFUSED` on the (connected) socket and is counted, never returned.
    #[test]
    #[cfg_attr(miri, ignore)]
    fn connection_refused_is_counted_not_fatal() {
        let closed = endpoint().local_addr(); // bound, then dropped: nobody listens there now
        let mut ep = endpoint();
        ep.connect(closed).unwrap();
        let mut batch = RecvBatch::new(8, 1472);
        let deadline = Instant::now() + Duration::from_secs(5);
        let counted = |s: &IoStats| s.recv_icmp_errors + s.send_icmp_errors;
        while counted(ep.stats()) < 2 && Instant::now() < deadline {
            ep.send_to(b"hello", closed).unwrap();
            std::thread::sleep(Duration::from_millis(2));
            assert_eq!(ep.recv_batch(&mut batch).unwrap(), 0);
        }
        assert!(counted(ep.stats()) >= 2, "{:?}", ep.stats());
        assert!(ep.stats().recv_icmp_errors >= 1, "{:?}", ep.stats());
        // The endpoint still works afterwards: a datagram from its peer arrives.
        let mut peer = UdpEndpoint::bind(closed, &SocketConfig::default()).unwrap();
        let mut send = SendBatch::new(1);
        assert_eq!(
            peer.send_batch(&mut send, [(&b"x"[..], ep.local_addr())])
                .unwrap(),
            1
        );
        assert_eq!(recv_all(&mut ep, &mut batch, 1).len(), 1);
    }

    /// An unconnected socket sending to a closed port: nothing fatal, whatever the platform
    /// reports is counted.
    #[test]
    #[cfg_attr(miri, ignore)]
    fn unconnected_send_to_closed_port_is_not_fatal() {
        let closed = endpoint().local_addr();
        let mut ep = endpoint();
        let mut send = SendBatch::new(4);
        let mut batch = RecvBatch::new(8, 1472);
        for _ in 0..3 {
            let list = [(&b"a"[..], closed), (&b"b"[..], closed)];
            let icmp_before = ep.stats().send_icmp_errors;
            let sent = ep.send_batch(&mut send, list).unwrap();
            std::thread::sleep(Duration::from_millis(2));
            assert_eq!(ep.recv_batch(&mut batch).unwrap(), 0);
            // Linux reports ICMP errors only on connected sockets (udp(7), unless IP_RECVERR):
            // here both datagrams are simply sent. Elsewhere an error may be counted instead.
            let icmp = ep.stats().send_icmp_errors - icmp_before;
            assert_eq!(sent as u64 + icmp, 2);
        }
    }

    #[test]
    #[cfg_attr(miri, ignore)]
    fn portable_fallback_round_trip() {
        let sender = endpoint();
        let receiver = endpoint();
        let to = receiver.local_addr();
        let mut stats = IoStats::default();
        let payloads: Vec<Vec<u8>> = (0..10u8).map(|i| vec![i; 100]).collect();
        let mut scratch = vec![0u8; 1472];
        // Every other datagram with a suffix of its own, put together in the scratch buffer.
        let suffix = |i: usize| (i % 2 == 1).then_some([i as u8; SUFFIX_LEN]);
        let sent = portable::send(
            sender.socket(),
            &mut stats,
            &mut scratch,
            payloads
                .iter()
                .enumerate()
                .map(|(i, p)| (p.as_slice(), suffix(i), to)),
        )
        .unwrap();
        assert_eq!(sent, 10);
        let payloads: Vec<Vec<u8>> = payloads
            .into_iter()
            .enumerate()
            .map(|(i, mut p)| {
                p.extend(suffix(i).into_iter().flatten());
                p
            })
            .collect();
        let mut batch = RecvBatch::new(4, 1472);
        let mut rstats = IoStats::default();
        let mut got = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(5);
        while got.len() < 10 && Instant::now() < deadline {
            batch.clear();
            match portable::recv(receiver.socket(), &mut batch, &mut rstats) {
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => panic!("{e}"),
            }
            got.extend(batch.iter().map(|(b, _)| b.to_vec()));
            if batch.taken() == 0 {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        assert_eq!(got, payloads);
        assert_eq!(rstats.received, 10);
    }
}
