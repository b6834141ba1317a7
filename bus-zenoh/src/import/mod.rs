//! Imports: samples of a zenoh key published into a local topic from zenoh's own callback
//! threads, each sample judged first by the pure checks of [`verdicts`].
//!
//! An import is an external publisher of the bus, into which the zenoh subscriber's callback
//! publishes with `try_publish`: a full ring drops and counts on its edge, it never blocks
//! zenoh. Each sample's outcome is counted once, before `zenoh.received` (so a live report
//! never shows more received than decided): published, refused (another topic or fingerprint,
//! [`Verdict::Refused`]), malformed (no valid attachment, an unknown encoding, a payload that
//! does not decode: bincode through [`llbus::decode_bounded`], so a hostile length cannot make
//! it allocate) or stopped (the bus is stopping); gaps in a stream are counted lost, older
//! samples late. A close shuts the callback's gate and waits for the callbacks still running,
//! so the figures it returns are final.

use std::borrow::Cow;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use llbus::{Message, Metric, PublishError, Publisher, PublisherKey, RunningBus, Topic, TopicName};
use parking_lot::Mutex;
use serde::de::DeserializeOwned;
use zenoh::bytes::Encoding;
use zenoh::sample::Sample;
use zenoh::Wait;

use crate::errors::{ErrorKind, ErrorTable};
use crate::export::{zenoh_encoding, PayloadEncoding};
use crate::gateway::{key_of, report, Gateway, GatewayError, Pending};

mod verdicts;

pub use verdicts::{Verdict, Verdicts, MAX_JUMP, MAX_STREAMS};

/// How long `Gateway::close` waits for an import's callbacks still running (each only decodes
/// and `try_publish`es, so it waits microseconds unless the machine is starved).
const CALLBACK_WAIT: Duration = Duration::from_secs(5);

/// How one topic is imported: [`Import::new`] then its setters.
#[derive(Clone, Debug, Default)]
pub struct Import {
    pub(crate) key: Option<String>,
}

impl Import {
    /// From key `<prefix>/<topic>`.
    pub fn new() -> Self {
        Import::default()
    }

    /// The key expression to subscribe to, instead of `<prefix>/<topic>`.
    pub fn key(mut self, key: &str) -> Self {
        self.key = Some(key.to_owned());
        self
    }
}

pub(crate) struct PendingImport<T> {
    pub(crate) key: PublisherKey<T>,
    pub(crate) import: Import,
    /// The topic as declared; it runs under `RunningBus::topic` of it.
    pub(crate) topic: Topic<T>,
}

pub(crate) struct RunningImport {
    pub(crate) metrics: ImportMetrics,
    subscriber: Mutex<Option<zenoh::pubsub::Subscriber<()>>>,
    gate: Arc<CallbackGate>,
}

impl RunningImport {
    /// Stops taking samples: from here on a callback that starts counts nothing; undeclares the
    /// zenoh subscriber (which does not wait for a callback already running), then waits for
    /// the callbacks still running, for at most [`CALLBACK_WAIT`], so that the figures read
    /// after this are final.
    pub(crate) fn subscriber_closed(&self) {
        self.gate.closed.store(true, Ordering::SeqCst);
        if let Some(s) = self.subscriber.lock().take() {
            if let Err(e) = s.undeclare().wait() {
                log::warn!("zenoh subscriber did not undeclare cleanly: {e}");
            }
        }
        let deadline = std::time::Instant::now() + CALLBACK_WAIT;
        while self.gate.in_flight.load(Ordering::SeqCst) > 0 {
            if std::time::Instant::now() >= deadline {
                log::warn!(
                    "a zenoh import callback still runs after {CALLBACK_WAIT:?}: the gateway's \
                     figures may still change"
                );
                return;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }
}

/// Which of an import's callbacks may count, and how many are running: zenoh's undeclare does
/// not wait for a callback in progress, so close waits here.
#[derive(Default)]
struct CallbackGate {
    closed: AtomicBool,
    in_flight: AtomicUsize,
}

impl CallbackGate {
    /// Runs `f` unless the import is closed. The count goes up before the flag is read, and the
    /// close sets the flag before it reads the count (both sequentially consistent): a
    /// callback either sees the flag, or is waited for.
    fn run(&self, f: impl FnOnce()) {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        if !self.closed.load(Ordering::SeqCst) {
            f();
        }
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

#[derive(Clone)]
pub(crate) struct ImportMetrics {
    received: Metric,
    pub(crate) published: Metric,
    pub(crate) refused: Metric,
    pub(crate) malformed: Metric,
    pub(crate) lost: Metric,
    pub(crate) stopped: Metric,
    pub(crate) late: Metric,
}

impl<T: Message + Clone + DeserializeOwned> Pending for PendingImport<T> {
    fn topic(&self) -> (&TopicName, bool) {
        (self.topic.name(), false)
    }

    fn given_key(&self) -> Option<&str> {
        self.import.key.as_deref()
    }

    fn start(
        self: Box<Self>,
        bus: &mut RunningBus,
        prefix: &str,
        gateway: &mut Gateway,
    ) -> Result<(), GatewayError> {
        let publisher = bus.publisher(self.key).map_err(GatewayError::Handle)?;
        // Resolved once, here: each sample is checked against the running name's id.
        let topic = bus.topic(&self.topic).name().clone();
        let key = key_of(self.import.key.as_deref(), prefix, topic.as_str());
        let metrics = ImportMetrics {
            received: publisher.metric("zenoh.received"),
            published: publisher.metric("zenoh.published"),
            refused: publisher.metric("zenoh.refused"),
            malformed: publisher.metric("zenoh.malformed"),
            lost: publisher.metric("zenoh.lost"),
            stopped: publisher.metric("zenoh.stopped"),
            late: publisher.metric("zenoh.late"),
        };
        let state = Mutex::new(ImportRun {
            publisher,
            verdicts: Verdicts::new(topic.as_str(), topic.id(), T::FINGERPRINT, &key),
            bincode: zenoh_encoding(PayloadEncoding::Bincode, topic.as_str()),
            json: zenoh_encoding(PayloadEncoding::Json, topic.as_str()),
            topic,
            metrics: metrics.clone(),
            errors: Arc::clone(&gateway.errors),
            received: 0,
        });
        let gate = Arc::new(CallbackGate::default());
        let subscriber = {
            let gate = Arc::clone(&gate);
            gateway
                .session
                .declare_subscriber(key)
                .callback(move |sample| gate.run(|| state.lock().take(&sample)))
                .wait()?
        };
        gateway.imports.push(RunningImport {
            metrics,
            subscriber: Mutex::new(Some(subscriber)),
            gate,
        });
        Ok(())
    }
}

/// One import's state, behind the lock its zenoh callback takes (never held while waiting:
/// `try_publish` does not wait).
struct ImportRun<T> {
    /// The topic's running name, for errors.
    topic: TopicName,
    publisher: Publisher<T>,
    verdicts: Verdicts,
    bincode: Encoding,
    json: Encoding,
    metrics: ImportMetrics,
    errors: Arc<Mutex<ErrorTable>>,
    /// Samples taken so far, whose outcome is counted: what `zenoh.received` shows.
    received: u64,
}

impl<T: Message + Clone + DeserializeOwned> ImportRun<T> {
    /// Takes one sample, counting its outcome first and `zenoh.received` after it, with a
    /// release store: a report reads `zenoh.received` before the outcomes (the order they were
    /// registered in), so in every live snapshot `received` never runs ahead of the outcomes.
    fn take(&mut self, sample: &Sample) {
        self.decide(sample);
        self.received = self.received.saturating_add(1);
        self.metrics.received.set(self.received);
    }

    /// Counts one sample's outcome: published, refused, malformed or stopped.
    fn decide(&mut self, sample: &Sample) {
        let attachment = sample.attachment().map(|a| a.to_bytes());
        match self.verdicts.check(attachment.as_deref()) {
            Verdict::Accept { lost, late } => {
                self.metrics.lost.add(lost);
                if late {
                    self.metrics.late.add(1);
                }
            }
            Verdict::Refused { error, other_topic } => {
                self.metrics.refused.add(1);
                if let Some(e) = error {
                    let kind = if other_topic {
                        ErrorKind::OtherTopic
                    } else {
                        ErrorKind::Fingerprint
                    };
                    report(&self.errors, self.topic.as_str(), kind, e);
                }
                return;
            }
            Verdict::Malformed => {
                self.malformed("a sample without the gateway's attachment");
                return;
            }
        }
        let payload: Cow<'_, [u8]> = sample.payload().to_bytes();
        let decoded = if sample.encoding() == &self.bincode {
            llbus::decode_bounded::<T>(&payload)
                .map(|(m, _)| m)
                .map_err(|e| e.to_string())
        } else if sample.encoding() == &self.json {
            serde_json::from_slice::<T>(&payload).map_err(|e| e.to_string())
        } else {
            Err(format!("unknown encoding {}", sample.encoding()))
        };
        match decoded {
            Ok(msg) => match self.publisher.try_publish(msg) {
                Ok(()) => self.metrics.published.add(1),
                Err(PublishError::Stopped(_)) => self.metrics.stopped.add(1),
            },
            Err(e) => self.malformed(&e),
        }
    }

    fn malformed(&mut self, why: &str) {
        self.metrics.malformed.add(1);
        report(
            &self.errors,
            self.topic.as_str(),
            ErrorKind::Malformed,
            format!(
                "zenoh gateway dropped a malformed sample of topic '{}': {why}",
                self.topic
            ),
        );
    }
}
