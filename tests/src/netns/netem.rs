//! The shaping of a link ([`Netem`]: loss, duplication, reordering, delay, as `tc netem` takes
//! them) and the userspace netem that applies it where the kernel has none: the tun wire, a
//! thread that copies IP packets between a TUN device in each namespace.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use super::error::io_err;
use super::tun::{open_tun_in, write_packet};
use super::{NetnsError, Side};

/// Link impairment, with netem's meaning. All zero (the default) is a clean link.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Netem {
    /// Percentage of packets dropped, independently at random.
    pub loss_pct: f64,
    /// Percentage of packets sent twice.
    pub duplicate_pct: f64,
    /// Percentage of packets sent at once while the rest wait `delay_ms`, which reorders them.
    /// Needs `delay_ms > 0`.
    pub reorder_pct: f64,
    /// Delay added to every packet (except the reordered ones), in milliseconds.
    pub delay_ms: u32,
    /// Uniform random variation of the delay, plus or minus, in milliseconds.
    pub jitter_ms: u32,
    /// Packets the link may hold at once; 0 means the default (10,000).
    pub limit: u32,
}

impl Netem {
    pub(super) fn check(&self) -> Result<(), NetnsError> {
        let pct = [
            ("loss_pct", self.loss_pct),
            ("duplicate_pct", self.duplicate_pct),
            ("reorder_pct", self.reorder_pct),
        ];
        for (name, v) in pct {
            if !(0.0..=100.0).contains(&v) {
                return Err(NetnsError::BadShape(format!(
                    "{name} = {v} is not a percentage in 0..=100"
                )));
            }
        }
        if self.reorder_pct > 0.0 && self.delay_ms == 0 {
            return Err(NetnsError::BadShape(
                "reorder_pct needs delay_ms > 0 (netem reorders by sending some packets \
                 ahead of the delayed ones)"
                    .into(),
            ));
        }
        if self.jitter_ms > self.delay_ms {
            return Err(NetnsError::BadShape(
                "jitter_ms must not exceed delay_ms".into(),
            ));
        }
        Ok(())
    }

    fn limit_or_default(&self) -> u32 {
        if self.limit == 0 {
            10_000
        } else {
            self.limit
        }
    }

    /// The arguments after `netem` for `tc qdisc replace`.
    pub(super) fn tc_args(&self) -> Vec<String> {
        let mut a = vec!["limit".to_string(), self.limit_or_default().to_string()];
        if self.delay_ms > 0 {
            a.push("delay".into());
            a.push(format!("{}ms", self.delay_ms));
            if self.jitter_ms > 0 {
                a.push(format!("{}ms", self.jitter_ms));
            }
        }
        if self.loss_pct > 0.0 {
            a.push("loss".into());
            a.push(format!("{}%", self.loss_pct));
        }
        if self.duplicate_pct > 0.0 {
            a.push("duplicate".into());
            a.push(format!("{}%", self.duplicate_pct));
        }
        if self.reorder_pct > 0.0 {
            a.push("reorder".into());
            a.push(format!("{}%", self.reorder_pct));
        }
        a
    }
}

/// A thread that copies IP packets between a TUN device in each namespace, shaping each
/// direction like a root netem qdisc on the sending side.
#[derive(Debug)]
pub(super) struct Wire {
    shapes: Arc<Mutex<[Netem; 2]>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Wire {
    /// Makes `IFNAME` as a TUN device in each namespace (by path of its `ip netns` file) and
    /// starts forwarding between them.
    pub(super) fn start(ns_paths: [String; 2]) -> Result<Wire, NetnsError> {
        // setns changes only the calling thread's namespace; do it on a throwaway thread so the
        // caller's thread stays where it is. A TUN device is made in the namespace of the thread
        // that opens /dev/net/tun.
        let opener = thread::spawn(move || -> Result<[OwnedFd; 2], NetnsError> {
            let a = open_tun_in(&ns_paths[0])?;
            let b = open_tun_in(&ns_paths[1])?;
            Ok([a, b])
        });
        let fds = opener.join().map_err(|_| NetnsError::Io {
            what: "tun opener thread panicked".into(),
            source: io::Error::other("panic"),
        })??;
        let shapes = Arc::new(Mutex::new([Netem::default(); 2]));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let shapes = Arc::clone(&shapes);
            let stop = Arc::clone(&stop);
            thread::Builder::new()
                .name("llbus-netns-wire".into())
                .spawn(move || wire_loop(fds, &shapes, &stop))
                .map_err(io_err("cannot start the wire thread"))?
        };
        Ok(Wire {
            shapes,
            stop,
            thread: Some(thread),
        })
    }

    pub(super) fn shape(&self, side: Side, netem: Netem) {
        let mut shapes = self.shapes.lock().unwrap_or_else(|p| p.into_inner());
        shapes[side.index()] = netem;
    }

    pub(super) fn stop(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Wire {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// True with probability `pct` percent.
pub(super) fn chance(rng: &mut fastrand::Rng, pct: f64) -> bool {
    pct > 0.0 && rng.f64() * 100.0 < pct
}

/// A delay offset uniform in `-j..=j` milliseconds, in microseconds.
fn jitter(rng: &mut fastrand::Rng, j: u32) -> i64 {
    let j = i64::from(j) * 1000;
    rng.i64(-j..=j)
}

/// A packet waiting for its time, ordered by due time then arrival.
struct Held {
    due: Instant,
    order: u64,
    to: usize,
    packet: Vec<u8>,
}

impl PartialEq for Held {
    fn eq(&self, o: &Self) -> bool {
        (self.due, self.order) == (o.due, o.order)
    }
}
impl Eq for Held {}
impl PartialOrd for Held {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Held {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        // Reversed: BinaryHeap is a max-heap and we want the earliest first.
        (o.due, o.order).cmp(&(self.due, self.order))
    }
}

fn wire_loop(fds: [OwnedFd; 2], shapes: &Mutex<[Netem; 2]>, stop: &AtomicBool) {
    let mut rng = fastrand::Rng::new();
    let mut held: std::collections::BinaryHeap<Held> = std::collections::BinaryHeap::new();
    let mut order = 0u64;
    let mut buf = vec![0u8; 65_536];
    while !stop.load(Ordering::Relaxed) {
        // Release what is due.
        let now = Instant::now();
        while held.peek().is_some_and(|h| h.due <= now) {
            let h = held.pop().expect("peeked");
            write_packet(&fds[h.to], &h.packet);
        }
        let wait_ms = held
            .peek()
            // Rounded up: a packet due in under a millisecond must not make this a busy loop
            // (it then leaves up to 1 ms late, which the delay emulation tolerates).
            .map(|h| {
                h.due
                    .saturating_duration_since(now)
                    .as_micros()
                    .div_ceil(1000) as i32
            })
            .unwrap_or(20)
            .clamp(0, 20);
        let mut pfds = [
            libc::pollfd {
                fd: fds[0].as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: fds[1].as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: `pfds` is a valid array of two pollfd structs.
        let ready = unsafe { libc::poll(pfds.as_mut_ptr(), 2, wait_ms) };
        if ready <= 0 {
            continue;
        }
        let current = *shapes.lock().unwrap_or_else(|p| p.into_inner());
        for from in 0..2 {
            if pfds[from].revents & libc::POLLIN == 0 {
                continue;
            }
            let to = 1 - from;
            let shape = current[from];
            // Drain what is queued on this side (bounded, to stay fair to the other side).
            for _ in 0..256 {
                // SAFETY: `buf` is a valid writable buffer of `buf.len()` bytes.
                let n = unsafe {
                    libc::read(fds[from].as_raw_fd(), buf.as_mut_ptr().cast(), buf.len())
                };
                if n <= 0 {
                    break;
                }
                let packet = &buf[..n as usize];
                if chance(&mut rng, shape.loss_pct) {
                    continue;
                }
                let copies = if chance(&mut rng, shape.duplicate_pct) {
                    2
                } else {
                    1
                };
                for _ in 0..copies {
                    let ahead = chance(&mut rng, shape.reorder_pct);
                    if shape.delay_ms == 0 || ahead {
                        write_packet(&fds[to], packet);
                    } else {
                        let delay_us = (i64::from(shape.delay_ms) * 1000
                            + jitter(&mut rng, shape.jitter_ms))
                        .max(0) as u64;
                        let limit = shape.limit_or_default() as usize;
                        if held.len() >= limit {
                            continue; // queue full: dropped, like netem over its limit
                        }
                        order += 1;
                        held.push(Held {
                            due: Instant::now() + Duration::from_micros(delay_us),
                            order,
                            to,
                            packet: packet.to_vec(),
                        });
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod unit {
    use super::*;

    #[test]
    fn netem_arguments_match_tc_syntax() {
        let n = Netem {
            loss_pct: 5.0,
            duplicate_pct: 1.0,
            reorder_pct: 10.0,
            delay_ms: 1,
            ..Netem::default()
        };
        assert_eq!(
            n.tc_args().join(" "),
            "limit 10000 delay 1ms loss 5% duplicate 1% reorder 10%"
        );
        let n = Netem {
            loss_pct: 0.5,
            delay_ms: 5,
            jitter_ms: 2,
            limit: 500,
            ..Netem::default()
        };
        assert_eq!(n.tc_args().join(" "), "limit 500 delay 5ms 2ms loss 0.5%");
        assert_eq!(Netem::default().tc_args().join(" "), "limit 10000");
    }

    #[test]
    fn netem_settings_are_checked() {
        let reorder_without_delay = Netem {
            reorder_pct: 10.0,
            ..Netem::default()
        };
        assert!(matches!(
            reorder_without_delay.check(),
            Err(NetnsError::BadShape(_))
        ));
        let too_much = Netem {
            loss_pct: 101.0,
            ..Netem::default()
        };
        assert!(too_much.check().is_err());
        let jitter_over_delay = Netem {
            delay_ms: 1,
            jitter_ms: 2,
            ..Netem::default()
        };
        assert!(jitter_over_delay.check().is_err());
        assert!(Netem::default().check().is_ok());
    }

    #[test]
    fn the_wire_draws_close_to_the_asked_percentage() {
        let mut rng = fastrand::Rng::with_seed(0x1234_5678_9abc_def1);
        let hits = (0..100_000).filter(|_| chance(&mut rng, 5.0)).count();
        assert!((4_500..=5_500).contains(&hits), "{hits}");
        assert!(!(0..1000).any(|_| chance(&mut rng, 0.0)));
        assert!((0..1000).all(|_| chance(&mut rng, 100.0)));
    }

    #[test]
    fn jitter_stays_within_its_bound() {
        let mut rng = fastrand::Rng::with_seed(7);
        assert!((0..10_000).all(|_| (-2000..=2000).contains(&jitter(&mut rng, 2))));
        assert_eq!(jitter(&mut rng, 0), 0);
    }
}
