//! Blocking `push` and `pop` on the ring, built on the idle strategies. This module joins the
//! ring layer and the wait layer, so that neither needs to know the other.
//!
//! With [`Park`](crate::Park), the side that sleeps must be woken by the other: attach the
//! sleeper's doorbell with [`Producer::notify_on_push`] (consumer sleeps when empty) or
//! [`Consumer::notify_on_pop`] (producer sleeps when full) before blocking.

use std::time::{Duration, Instant};

use crate::ring::{Consumer, PopError, Producer, PushError};
use crate::wait::IdleStrategy;

impl<T> Producer<T> {
    /// Pushes `value`, waiting with `idle` while the ring is full.
    ///
    /// # Errors
    /// [`PushError::Abandoned`] with the value if the ring is full and the consumer is gone.
    pub fn push<S: IdleStrategy + ?Sized>(
        &mut self,
        value: T,
        idle: &mut S,
    ) -> Result<(), PushError<T>> {
        self.push_until(value, None, idle)
    }

    /// Pushes `value`, waiting with `idle` at most `timeout` while the ring is full.
    ///
    /// # Errors
    /// [`PushError::Full`] with the value if the ring is still full when the timeout passes;
    /// [`PushError::Abandoned`] if it is full and the consumer is gone.
    pub fn push_timeout<S: IdleStrategy + ?Sized>(
        &mut self,
        value: T,
        timeout: Duration,
        idle: &mut S,
    ) -> Result<(), PushError<T>> {
        self.push_until(value, Instant::now().checked_add(timeout), idle)
    }

    fn push_until<S: IdleStrategy + ?Sized>(
        &mut self,
        mut value: T,
        deadline: Option<Instant>,
        idle: &mut S,
    ) -> Result<(), PushError<T>> {
        loop {
            match self.try_push(value) {
                Ok(()) => {
                    idle.reset();
                    return Ok(());
                }
                Err(e) => value = e.into_inner(),
            }
            if self.is_abandoned() {
                // The consumer may have freed a slot just before it went; one last try.
                return self
                    .try_push(value)
                    .map_err(|e| PushError::Abandoned(e.into_inner()));
            }
            match deadline {
                Some(d) if Instant::now() >= d => return Err(PushError::Full(value)),
                Some(d) => idle.idle_until(0, d),
                None => idle.idle(0),
            }
        }
    }
}

impl<T> Consumer<T> {
    /// Pops the oldest value, waiting with `idle` while the ring is empty.
    ///
    /// # Errors
    /// [`PopError::Abandoned`] once the ring is empty and the producer is gone.
    pub fn pop<S: IdleStrategy + ?Sized>(&mut self, idle: &mut S) -> Result<T, PopError> {
        self.pop_until(None, idle)
    }

    /// Pops the oldest value, waiting with `idle` at most `timeout` while the ring is empty.
    ///
    /// # Errors
    /// [`PopError::Empty`] if nothing arrives before the timeout; [`PopError::Abandoned`] once the
    /// ring is empty and the producer is gone.
    pub fn pop_timeout<S: IdleStrategy + ?Sized>(
        &mut self,
        timeout: Duration,
        idle: &mut S,
    ) -> Result<T, PopError> {
        self.pop_until(Instant::now().checked_add(timeout), idle)
    }

    fn pop_until<S: IdleStrategy + ?Sized>(
        &mut self,
        deadline: Option<Instant>,
        idle: &mut S,
    ) -> Result<T, PopError> {
        loop {
            if let Some(value) = self.try_pop() {
                idle.reset();
                return Ok(value);
            }
            if self.is_abandoned() {
                // The producer may have pushed just before it went: abandoned, then empty.
                return self.try_pop().ok_or(PopError::Abandoned);
            }
            match deadline {
                Some(d) if Instant::now() >= d => return Err(PopError::Empty),
                Some(d) => idle.idle_until(0, d),
                None => idle.idle(0),
            }
        }
    }
}
