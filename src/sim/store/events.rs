//! The store's watch events: every write's event, kept in a log for
//! watches that resume from a resourceVersion and broadcast to the ones
//! streaming; each event serialized once, however many watch it.

use std::sync::Arc;

use serde_json::Value;

use super::Inner;
use crate::sim::registry::ResourceType;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

#[derive(Debug, Clone)]
pub struct Event {
    pub rv: u64,
    pub kind: EventType,
    /// (group, plural)
    pub key: (String, String),
    pub namespace: String,
    pub object: Arc<Value>,
    /// The event as a watch sends it, serialized once for every watcher.
    pub line: std::sync::OnceLock<bytes::Bytes>,
}

impl Event {
    pub fn new(
        rv: u64,
        kind: EventType,
        key: (String, String),
        namespace: String,
        object: impl Into<Arc<Value>>,
    ) -> Self {
        Event { rv, kind, key, namespace, object: object.into(), line: Default::default() }
    }

    /// `{"type": …, "object": …}` and a newline, as a watch streams it.
    pub fn line(&self) -> bytes::Bytes {
        self.line
            .get_or_init(|| {
                let mut line = Vec::with_capacity(1024);
                line.extend_from_slice(self.prefix().as_bytes());
                serde_json::to_writer(&mut line, &*self.object).expect("a JSON value serializes");
                line.extend_from_slice(b"}\n");
                bytes::Bytes::from(line)
            })
            .clone()
    }

    fn prefix(&self) -> &'static str {
        match self.kind {
            EventType::Added => "{\"type\":\"ADDED\",\"object\":",
            EventType::Modified => "{\"type\":\"MODIFIED\",\"object\":",
            EventType::Deleted => "{\"type\":\"DELETED\",\"object\":",
        }
    }

    /// The object alone as JSON: a part of [`Event::line`], not a second
    /// serialization (the write's response is the same text its watchers get).
    pub fn object_json(&self) -> bytes::Bytes {
        let line = self.line();
        line.slice(self.prefix().len()..line.len() - 2)
    }
}

impl Inner {
    pub(super) fn emit(&mut self, kind: EventType, t: &ResourceType, ns: &str, object: impl Into<Arc<Value>>) {
        let ev = Arc::new(Event::new(self.rv, kind, t.key(), ns.to_string(), object));
        self.last_event = Some(ev.clone());
        self.log.push_back(ev.clone());
        while self.log.len() > self.log_capacity {
            if let Some(old) = self.log.pop_front() {
                self.compacted = old.rv;
            }
        }
        let _ = self.events.send(ev);
    }

    /// Events after `rv` still in the log, or None when `rv` is too old.
    pub fn events_since(&self, rv: u64) -> Option<Vec<Arc<Event>>> {
        if rv < self.compacted {
            return None;
        }
        Some(self.log.iter().filter(|e| e.rv > rv).cloned().collect())
    }

    /// The newest event, when it carries exactly `object` (the same
    /// allocation): the write that returned it answers with its text.
    pub fn event_of(&self, object: &Arc<Value>) -> Option<Arc<Event>> {
        self.last_event.as_ref().filter(|e| Arc::ptr_eq(&e.object, object)).cloned()
    }
}
