//! A UDP relay between one subscriber and a publisher that loses some of the publisher's data
//! datagrams, as a lossy network would: for tests of loss accounting and recovery.

use std::collections::BTreeSet;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

/// Which of the publisher's data datagrams a [`LossyRelay`] drops.
#[derive(Clone, Copy, Debug)]
pub enum Loss {
    /// Every `n`th.
    EveryNth(u64),
    /// Each with this probability in permille, from a generator seeded with `seed`.
    Permille {
        /// The probability.
        permille: u32,
        /// The generator's seed.
        seed: u64,
    },
}

/// The relay: the subscriber sends to [`addr`](Self::addr); it runs until dropped.
#[derive(Debug)]
pub struct LossyRelay {
    /// Where the subscriber sends (its "publisher").
    pub addr: SocketAddr,
    stop: Arc<AtomicBool>,
    dropped: Arc<Mutex<(u64, BTreeSet<u64>)>>,
    thread: Option<JoinHandle<()>>,
}

impl LossyRelay {
    /// Relays to `publisher`, losing data datagrams (those whose first frame is Data) as
    /// `loss` says.
    ///
    /// # Panics
    /// If loopback sockets cannot be bound.
    pub fn start(publisher: SocketAddr, loss: Loss) -> LossyRelay {
        let facing_sub = UdpSocket::bind("127.0.0.1:0").expect("bind");
        let facing_pub = UdpSocket::bind("127.0.0.1:0").expect("bind");
        for s in [&facing_sub, &facing_pub] {
            s.set_nonblocking(true).expect("non-blocking");
        }
        let addr = facing_sub.local_addr().expect("addr");
        let stop = Arc::new(AtomicBool::new(false));
        let dropped = Arc::new(Mutex::new((0, BTreeSet::new())));
        let (s, d) = (Arc::clone(&stop), Arc::clone(&dropped));
        let thread = std::thread::spawn(move || {
            let mut buf = vec![0u8; 65_536];
            let mut subscriber = None;
            let mut data = 0u64;
            let mut rng = fastrand::Rng::with_seed(match loss {
                Loss::Permille { seed, .. } => seed,
                Loss::EveryNth(_) => 0,
            });
            while !s.load(Ordering::Relaxed) {
                let mut idle = true;
                if let Ok((n, from)) = facing_sub.recv_from(&mut buf) {
                    idle = false;
                    subscriber = Some(from);
                    let _ = facing_pub.send_to(&buf[..n], publisher);
                }
                let Ok((n, _)) = facing_pub.recv_from(&mut buf) else {
                    if idle {
                        std::thread::sleep(Duration::from_micros(100));
                    }
                    continue;
                };
                if let Some(sub) = subscriber {
                    let datagram = &buf[..n];
                    // Byte 4 of a frame is its kind; 01 is Data.
                    if n > 4 && datagram[4] == 0x01 {
                        data += 1;
                        let lose = match loss {
                            Loss::EveryNth(nth) => data % nth == 0,
                            Loss::Permille { permille, .. } => rng.u32(0..1000) < permille,
                        };
                        if lose {
                            let mut d = d.lock().unwrap_or_else(PoisonError::into_inner);
                            d.0 += 1;
                            d.1.extend(data_seqs(datagram));
                            continue;
                        }
                    }
                    let _ = facing_sub.send_to(datagram, sub);
                }
            }
        });
        LossyRelay {
            addr,
            stop,
            dropped,
            thread: Some(thread),
        }
    }

    /// How many datagrams it dropped.
    pub fn dropped(&self) -> u64 {
        self.dropped
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .0
    }

    /// The sequence numbers of the data frames in the datagrams it dropped.
    pub fn dropped_seqs(&self) -> BTreeSet<u64> {
        let d = self.dropped.lock().unwrap_or_else(PoisonError::into_inner);
        d.1.clone()
    }
}

/// The sequence numbers of a native datagram's data frames (48-byte headers: the kind at 4,
/// the payload length at 6, the sequence number at 32), as far as they parse.
fn data_seqs(mut datagram: &[u8]) -> Vec<u64> {
    let mut seqs = Vec::new();
    while datagram.len() >= 48 {
        let len = usize::from(u16::from_le_bytes([datagram[6], datagram[7]]));
        if datagram[4] == 0x01 {
            let mut seq = [0u8; 8];
            seq.copy_from_slice(&datagram[32..40]);
            seqs.push(u64::from_le_bytes(seq));
        }
        match datagram.get(48 + len..) {
            Some(rest) => datagram = rest,
            None => break,
        }
    }
    seqs
}

impl Drop for LossyRelay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
