//! `pinfleet sim`: a local Kubernetes API emulator for tests, demos and
//! rehearsals where no real cluster can run (no Docker, no kube-apiserver).
//!
//! It is judged by one thing: what works against it works against a real
//! API server. kubectl and kube-rs talk to it over plain HTTP on 127.0.0.1;
//! [`registry`] says what it serves, [`store`] keeps the objects and their
//! semantics, [`crate::kube::fields`] and [`patch`] implement server-side apply and the
//! patch formats, [`server`] is the REST surface.

pub mod auth;
pub mod controllers;
pub mod etcd;
pub mod etcd_manager;
pub mod kubeadm;
pub mod local;
pub mod nodes;
pub mod objects;
pub mod openapi;
pub mod patch;
pub mod procs;
pub mod protobuf;
pub mod registry;
pub mod selector;
pub mod server;
pub mod store;
pub mod table;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use anyhow::{Context as _, Result};

pub use controllers::Controllers;
pub use store::Inner;

/// How often time-based steps (pod start, job completion) are checked.
const TICK: std::time::Duration = std::time::Duration::from_millis(100);
/// Passes in a row that wrote before the controllers wait for an event or
/// a tick; each pass reacts to the previous pass's writes.
const MAX_PASSES: usize = 20;
/// Objects of each kind a pass looks at; the rest wait for the next pass.
const PER_PASS: usize = 100;
/// Milliseconds the controllers give waiting Lease requests before a pass.
const LEASE_WAITS: usize = 50;

/// A running emulator.
pub struct Sim {
    pub addr: SocketAddr,
    pub store: server::Shared,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Sim {
    /// Starts serving on 127.0.0.1:`port` (0 picks a free port), with
    /// every simulated controller running.
    pub async fn start(port: u16) -> Result<Sim> {
        Self::start_with(port, Inner::new(), Controllers::default()).await
    }

    pub async fn start_with(port: u16, inner: Inner, controllers: Controllers) -> Result<Sim> {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
            .await
            .with_context(|| format!("binding 127.0.0.1:{port}"))?;
        let addr = listener.local_addr()?;
        let store: server::Shared = Arc::new(Mutex::new(inner));
        let leases = server::LeaseRequests::default();
        let app = axum::Router::new().fallback(server::handle).with_state((store.clone(), addr.port(), leases.clone()));
        spawn_controllers(store.clone(), controllers, leases);
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    let _ = rx.await;
                })
                .await;
        });
        Ok(Sim { addr, store, shutdown: Some(tx), task: Some(task) })
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A kubeconfig for this emulator (context `pinfleet-sim`).
    pub fn kubeconfig(&self) -> String {
        kubeconfig_for(&self.url())
    }

    pub fn write_kubeconfig(&self, path: &Path) -> Result<()> {
        if let Some(p) = path.parent() {
            std::fs::create_dir_all(p)?;
        }
        // Written whole and renamed into place: a reader waiting for the
        // file (another process, a test's approver) never sees half of it.
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        std::fs::write(&tmp, self.kubeconfig()).with_context(|| format!("writing {}", tmp.display()))?;
        std::fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))
    }

    /// Every object, for a snapshot file.
    pub fn snapshot(&self) -> Vec<serde_json::Value> {
        self.store.lock().expect("store lock").export()
    }

    pub async fn stop(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.task.take() {
            t.abort();
        }
    }
}

/// Runs the controllers on every change and on a short tick, a bounded
/// part of what changed per pass ([`controllers::Changed::take`]).
fn spawn_controllers(store: server::Shared, controllers: Controllers, leases: server::LeaseRequests) {
    let mut events = store.lock().expect("store lock").events.subscribe();
    tokio::spawn(async move {
        // What is left to look at: named objects carried from pass to pass.
        let mut pending = controllers::Changed::everything();
        // Passes in a row since the last wait for an event or a tick.
        let mut passes = 0;
        loop {
            // Wait for an event or a tick after a pass that left nothing to
            // do, or after MAX_PASSES in a row once what changed is taken.
            let idle = passes == 0 || (passes >= MAX_PASSES && pending.is_empty());
            if idle {
                passes = 0;
                tokio::select! {
                    r = events.recv() => {
                        let mut any = match r {
                            Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                            Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                                pending = controllers::Changed::everything();
                                true
                            }
                            Ok(ev) => {
                                pending.note(&ev);
                                controllers::watched(&ev.key)
                            }
                        };
                        // Coalesce a burst of events into one pass.
                        any |= drain(&mut events, &mut pending);
                        if !any && pending.is_empty() {
                            continue;
                        }
                    }
                    _ = tokio::time::sleep(TICK) => {}
                }
            }
            // Lease requests go first (a bounded wait: a flood of them
            // does not stop the controllers).
            for _ in 0..LEASE_WAITS {
                if !leases.waiting() {
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(1)).await;
            }
            let started = std::time::Instant::now();
            let wrote = {
                let mut inner = store.lock().expect("store lock");
                pending.expand(&inner);
                let part = pending.take(PER_PASS);
                controllers.reconcile(&mut inner, &part)
            };
            tracing::debug!(
                ms = started.elapsed().as_millis() as u64,
                wrote,
                left = !pending.is_empty(),
                "controllers' pass"
            );
            // The next pass reacts to this one's writes, and takes the rest.
            drain(&mut events, &mut pending);
            passes = if wrote || !pending.is_empty() { passes + 1 } else { 0 };
            tokio::task::yield_now().await;
        }
    });
}

/// Takes every event waiting; true when one can give the controllers work.
fn drain(events: &mut tokio::sync::broadcast::Receiver<Arc<store::Event>>, changed: &mut controllers::Changed) -> bool {
    let mut any = false;
    loop {
        match events.try_recv() {
            Ok(ev) => {
                changed.note(&ev);
                any |= controllers::watched(&ev.key);
            }
            Err(tokio::sync::broadcast::error::TryRecvError::Lagged(_)) => {
                *changed = controllers::Changed::everything();
                any = true;
            }
            Err(_) => return any,
        }
    }
}

pub fn kubeconfig_for(server: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n  - name: pinfleet-sim\n    cluster:\n      server: {server}\nusers:\n  - name: pinfleet-sim\n    user: {{}}\ncontexts:\n  - name: pinfleet-sim\n    context:\n      cluster: pinfleet-sim\n      user: pinfleet-sim\n      namespace: default\ncurrent-context: pinfleet-sim\n"
    )
}

/// Loads a snapshot written by [`Sim::snapshot`] (objects in creation order).
pub fn load_snapshot(path: &PathBuf) -> Result<Inner> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let objects: Vec<serde_json::Value> =
        serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    let mut inner = Inner::new();
    inner.import(objects);
    Ok(inner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A store serving one custom resource, `gizmos.example.com`; its type.
    fn with_gizmos(a: &mut Inner) -> crate::sim::registry::ResourceType {
        let crd_t = a.registry.get("apiextensions.k8s.io", "v1", "customresourcedefinitions").cloned().unwrap();
        let crd = json!({"metadata": {"name": "gizmos.example.com"}, "spec": {"group": "example.com", "scope": "Namespaced",
            "names": {"plural": "gizmos", "singular": "gizmo", "kind": "Gizmo"},
            "versions": [{"name": "v1", "served": true, "storage": true}]}});
        a.create(&crd_t, "", crd, "t", false).unwrap();
        a.registry.get("example.com", "v1", "gizmos").cloned().unwrap()
    }

    #[test]
    fn snapshots_round_trip_objects_and_crds() {
        let mut a = Inner::new();
        let gizmo_t = with_gizmos(&mut a);
        let g =
            a.create(&gizmo_t, "default", json!({"metadata": {"name": "g1"}, "spec": {"x": 1}}), "t", false).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("snap.json");
        std::fs::write(&path, serde_json::to_string(&a.export()).unwrap()).unwrap();
        let b = load_snapshot(&path).unwrap();
        let t = b.registry.get("example.com", "v1", "gizmos").cloned().expect("the CRD's type is served again");
        let g2 = b.get(&t, "default", "g1").unwrap();
        assert_eq!(g2["metadata"]["uid"], g["metadata"]["uid"]);
        assert_eq!(g2["spec"], json!({"x": 1}));
        assert!(b.resource_version() >= a.resource_version());
    }

    /// A custom resource is answered as the API server answers one (Go's
    /// encoding of unstructured JSON: every map's keys sorted, metadata's
    /// too).
    #[test]
    fn a_custom_resources_keys_come_back_sorted() {
        let mut a = Inner::new();
        let gizmo_t = with_gizmos(&mut a);
        let body = json!({"spec": {"zeta": 1, "alpha": {"b": 2, "a": [{"y": 1, "x": 2}]}}, "metadata": {"name": "g1", "labels": {"z": "1", "a": "2"}}});
        let g = a.create(&gizmo_t, "default", body, "t", false).unwrap();
        let keys = |v: &serde_json::Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
        assert_eq!(keys(&g), ["apiVersion", "kind", "metadata", "spec"]);
        assert_eq!(keys(&g["spec"]), ["alpha", "zeta"]);
        assert_eq!(keys(&g["spec"]["alpha"]), ["a", "b"]);
        assert_eq!(keys(&g["spec"]["alpha"]["a"][0]), ["x", "y"]);
        let meta = keys(&g["metadata"]);
        let mut sorted = meta.clone();
        sorted.sort();
        assert_eq!(meta, sorted, "metadata too");
    }
}
