//! The typed bus (placeholder while the ring layer is written).

use std::marker::PhantomData;

/// The rings of one topic feeding one actor (placeholder).
#[derive(Debug)]
pub struct Inputs<M> {
    _m: PhantomData<M>,
}

impl<M: Send + 'static> Inputs<M> {
    /// Takes this topic's rings out of the wiring.
    pub fn take(_wiring: &mut Wiring) -> Self {
        Inputs { _m: PhantomData }
    }

    /// Hands at most `budget` messages to `handler`.
    pub fn poll<F: FnMut(M)>(&mut self, _budget: usize, _handler: F) -> usize {
        0
    }

    /// True when every ring is empty and abandoned.
    pub fn is_finished(&self) -> bool {
        true
    }
}

/// The rings made by `start()`, waiting to be taken by each actor's inbox (placeholder).
#[derive(Debug, Default)]
pub struct Wiring {}
