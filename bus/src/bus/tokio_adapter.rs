//! The tokio adapter (feature `tokio`): an external handle turned into a tokio channel, for
//! async code that feeds a bus or reads from one.
//!
//! The bus itself stays on its pinned threads; the adapter sits at its edge. Each adapter is one
//! plain thread that moves messages between a bounded `tokio::sync::mpsc` channel and the
//! handle: the channel's bound and the edge's backpressure both hold (a full `Block` ring
//! stops the forwarding, the channel fills, and `send(..).await` waits). The cost is one hop
//! through the channel (which allocates a block per 32 messages) and one thread per adapter:
//! use the handles directly where every microsecond counts.

use tokio::sync::mpsc;

use super::handle::{Publisher, Subscription};
use crate::message::Message;

/// How long the forwarding thread of a subscription waits for a message before it looks
/// whether the async side is still there.
const CHECK_EVERY: std::time::Duration = std::time::Duration::from_millis(50);

impl<T: Message + Clone> Publisher<T> {
    /// Turns this publisher into the sending half of a tokio channel of `capacity` (at least
    /// 1): what is sent on it is published, in order, by a forwarding thread. Once the bus
    /// stops the thread ends and sends fail, handing the message back.
    ///
    /// # Errors
    /// If the forwarding thread cannot be spawned.
    pub fn into_async(mut self, capacity: usize) -> std::io::Result<mpsc::Sender<T>> {
        let (tx, mut rx) = mpsc::channel::<T>(capacity.max(1));
        std::thread::Builder::new()
            .name(format!("llbus-async-{}", self.name()))
            .spawn(move || {
                while let Some(m) = rx.blocking_recv() {
                    if self.publish(m).is_err() {
                        break;
                    }
                }
            })?;
        Ok(tx)
    }
}

impl<T: Message> Subscription<T> {
    /// Turns this subscription into the receiving half of a tokio channel of `capacity` (at
    /// least 1), filled in order by a forwarding thread. The channel ends (`recv` returns
    /// `None`) once the subscription is closed; dropping the receiver ends the thread, and
    /// what it had not forwarded is counted lost on its edges.
    ///
    /// # Errors
    /// If the forwarding thread cannot be spawned.
    pub fn into_async(mut self, capacity: usize) -> std::io::Result<mpsc::Receiver<T>> {
        let (tx, rx) = mpsc::channel::<T>(capacity.max(1));
        std::thread::Builder::new()
            .name(format!("llbus-async-{}", self.name()))
            .spawn(move || loop {
                match self.recv_timeout(CHECK_EVERY) {
                    Ok(m) => {
                        if tx.blocking_send(m).is_err() {
                            break;
                        }
                    }
                    Err(super::handle::RecvTimeoutError::Timeout) => {
                        if tx.is_closed() {
                            break;
                        }
                    }
                    Err(super::handle::RecvTimeoutError::Closed) => break,
                }
            })?;
        Ok(rx)
    }
}
