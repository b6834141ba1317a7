//! The bridge's ports: one per exported or imported topic, each typed, behind a small trait so
//! the bridge can hold a list of them. A port moves messages between the bus and the
//! endpoint: an export's port feeds what its rings hold into an [`ExportBatch`], an import's
//! decodes what the endpoint lets through and publishes it. Called once per poll, not once per
//! message.

use std::sync::Arc;

use llbus::{Context, Inputs, Message, Out, Setup, TopicName};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::endpoint::{Endpoint, ExportBatch, Wire};
use crate::{decode_compat_packet, decode_payload, DropReason};

/// A topic's name, id and fingerprint.
pub(crate) trait Topic {
    fn topic(&self) -> std::sync::Arc<str>;
    fn topic_id(&self) -> u64;
    fn fingerprint(&self) -> u64;
}

/// An exported topic: reads the rings the bus made for it.
pub(crate) trait ExportPort: Topic + Send {
    /// Moves up to `budget` queued messages per ring into `batch`. Returns how many it took.
    fn pump(&mut self, batch: &mut ExportBatch<'_>, budget: usize) -> usize;
}

/// An imported topic: decodes the payloads the endpoint lets through and publishes them on
/// the local bus (never waiting on it).
pub(crate) trait ImportPort: Topic + Send {
    fn deliver(&mut self, payload: &[u8], ctx: &mut Context<'_>) -> Result<(), DropReason>;
}

/// A topic exported in the ll-udp-pubsub v0.1 format.
pub(crate) trait CompatExportPort: Topic + Send {
    /// Sends up to `budget` queued messages per ring through compat export `k` of
    /// `endpoint`, one datagram each, on `wire` (its socket). Returns how many it took.
    fn pump(
        &mut self,
        endpoint: &mut Endpoint,
        k: usize,
        wire: &mut dyn Wire,
        budget: usize,
    ) -> usize;
}

/// A topic imported in the ll-udp-pubsub v0.1 format.
pub(crate) trait CompatImportPort: Send {
    /// Decodes one datagram and publishes it.
    fn deliver(
        &mut self,
        datagram: &[u8],
        max_datagram: usize,
        ctx: &mut Context<'_>,
    ) -> Result<(), DropReason>;
}

/// A named topic as it runs on the bus: its name and id (after the bus's remapping).
struct Running {
    name: Arc<str>,
    id: u64,
}

impl Running {
    fn of<T: Message>(setup: &Setup<'_>, declared: &TopicName) -> Running {
        let running = setup.topic(&llbus::Topic::<T>::with_name(declared.clone()));
        Running {
            name: Arc::from(running.name().as_str()),
            id: running.id(),
        }
    }
}

macro_rules! named_topic_of {
    ($t:ident) => {
        impl<T: Message> Topic for $t<T> {
            fn topic(&self) -> Arc<str> {
                Arc::clone(&self.running.name)
            }
            fn topic_id(&self) -> u64 {
                self.running.id
            }
            fn fingerprint(&self) -> u64 {
                T::FINGERPRINT
            }
        }
    };
}

pub(crate) struct Export<T> {
    inputs: Inputs<T>,
    running: Running,
}

impl<T: Message + Serialize> Export<T> {
    pub(crate) fn make(setup: &mut Setup<'_>, topic: &TopicName) -> Box<dyn ExportPort> {
        Box::new(Export::<T> {
            inputs: setup.inputs_on(&llbus::Topic::<T>::with_name(topic.clone())),
            running: Running::of::<T>(setup, topic),
        })
    }
}

named_topic_of!(Export);

impl<T: Message + Serialize> ExportPort for Export<T> {
    fn pump(&mut self, batch: &mut ExportBatch<'_>, budget: usize) -> usize {
        self.inputs.poll(budget, |msg| batch.push(&msg))
    }
}

pub(crate) struct Import<T> {
    out: Out<T>,
    running: Running,
}

impl<T: Message + DeserializeOwned + Clone> Import<T> {
    pub(crate) fn make(setup: &mut Setup<'_>, topic: &TopicName) -> Box<dyn ImportPort> {
        Box::new(Import::<T> {
            out: setup.output_on(&llbus::Topic::<T>::with_name(topic.clone())),
            running: Running::of::<T>(setup, topic),
        })
    }
}

impl<T: Message + DeserializeOwned + Clone> Import<T> {
    /// One port per local topic `pattern` matched (`Bridge::discover_matching`).
    pub(crate) fn make_matching(
        setup: &mut Setup<'_>,
        pattern: &llbus::TopicPattern,
    ) -> Vec<Box<dyn ImportPort>> {
        (setup.outputs_matching::<T>(pattern).into_iter())
            .map(|(topic, out)| {
                // `outputs_matching` names each topic as it runs: no remapping left to apply.
                let running = Running {
                    name: Arc::from(topic.name().as_str()),
                    id: topic.id(),
                };
                Box::new(Import::<T> { out, running }) as Box<dyn ImportPort>
            })
            .collect()
    }
}

named_topic_of!(Import);

impl<T: Message + DeserializeOwned + Clone> ImportPort for Import<T> {
    #[inline]
    fn deliver(&mut self, payload: &[u8], ctx: &mut Context<'_>) -> Result<(), DropReason> {
        let msg: T = decode_payload(payload)?;
        ctx.try_publish(self.out, msg);
        Ok(())
    }
}

pub(crate) struct CompatExport<T> {
    inputs: Inputs<T>,
    running: Running,
}

impl<T: Message + Serialize> CompatExport<T> {
    pub(crate) fn make(setup: &mut Setup<'_>, topic: &TopicName) -> Box<dyn CompatExportPort> {
        Box::new(CompatExport::<T> {
            inputs: setup.inputs_on(&llbus::Topic::<T>::with_name(topic.clone())),
            running: Running::of::<T>(setup, topic),
        })
    }
}

named_topic_of!(CompatExport);

impl<T: Message + Serialize> CompatExportPort for CompatExport<T> {
    fn pump(
        &mut self,
        endpoint: &mut Endpoint,
        k: usize,
        wire: &mut dyn Wire,
        budget: usize,
    ) -> usize {
        self.inputs
            .poll(budget, |msg| endpoint.compat_send(k, &msg, &mut *wire))
    }
}

pub(crate) struct CompatImport<T> {
    out: Out<T>,
}

impl<T: Message + DeserializeOwned + Clone> CompatImport<T> {
    pub(crate) fn make(setup: &mut Setup<'_>, topic: &TopicName) -> Box<dyn CompatImportPort> {
        Box::new(CompatImport::<T> {
            out: setup.output_on(&llbus::Topic::<T>::with_name(topic.clone())),
        })
    }
}

impl<T: Message + DeserializeOwned + Clone> CompatImportPort for CompatImport<T> {
    fn deliver(
        &mut self,
        datagram: &[u8],
        max_datagram: usize,
        ctx: &mut Context<'_>,
    ) -> Result<(), DropReason> {
        let (msg, _sent_ts): (T, i64) = decode_compat_packet(datagram, max_datagram)?;
        ctx.try_publish(self.out, msg);
        Ok(())
    }
}
