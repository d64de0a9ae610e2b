//! The watches that feed the reconciles: each workload kind's, its child
//! kinds' (into the caches a reconcile compares against, events filtered
//! to those that change what the workload reads, never the controller's
//! own write), the profile and Namespace caches, and a new leader's
//! takeover (what waited first, then every workload).

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::Api;
use kube::runtime::controller::Controller;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};

use super::context::{obj_key, Caches, Ctx, Sighting};
use super::reconcile::{error_policy, reconcile};
use super::workload::{api_resource, Workload};
use super::{child, status, PROFILE_CONFIGMAP};

/// Page size for the controller's lists (a relist of 20,000 objects is
/// 40 requests, not one answer of hundreds of megabytes).
const PAGE: u32 = 500;

/// Reconciles at once per workload kind. Each holds its rendered children
/// while it waits on the API, so a backlog of thousands (a fresh start, a
/// new runtime profile) costs memory by this bound, not by its length;
/// above the client's in-flight budget, more would only wait in line.
const CONCURRENCY: u16 = 32;

/// Drops what a cache never reads: managed fields are often half an object.
fn slim<R: Resource>(o: &mut R) {
    o.meta_mut().managed_fields = None;
}

pub(super) async fn run_one<K: Workload>(ctx: Arc<Ctx>) {
    use futures::TryStreamExt as _;
    use kube::runtime::{reflector, WatchStreamExt as _};
    let client = ctx.client.clone();
    let (reader, writer) = reflector::store::<K>();
    let c = ctx.clone();
    // The workloads: a change to what the controller renders from is a
    // reason to reconcile (not its status, which only the controller
    // writes); a new generation starts its latency clock.
    let scope = ctx.namespace.get().cloned();
    // What changed while this replica stood by and the leader has not
    // reported done: reconciled first when this replica comes to lead,
    // before everything else is (a change made as the leader died waits
    // for its own reconcile, not for every workload's).
    let waiting: Arc<Mutex<HashMap<String, ObjectRef<K>>>> = Default::default();
    let w = waiting.clone();
    let workloads: Api<K> = match &scope {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let main = watcher(workloads, watcher::Config::default().page_size(PAGE))
        .default_backoff()
        .modify(slim::<K>)
        .reflect(writer)
        .try_filter_map(move |ev| {
            let trigger = match ev {
                watcher::Event::Apply(o) | watcher::Event::InitApply(o) => {
                    let key = obj_key(K::KIND.name(), &o.namespace().unwrap_or_default(), &o.name_any());
                    let changed = c.changed(&key, o.meta());
                    if changed {
                        c.seen(&key, o.meta().generation.unwrap_or(1));
                    }
                    if !c.is_leading() {
                        let done = o.observed() == Some(o.meta().generation.unwrap_or(1));
                        let mut w = w.lock().expect("waiting");
                        if done {
                            w.remove(&key);
                        } else if changed {
                            w.insert(key, ObjectRef::from_obj(&o));
                        }
                    }
                    changed.then_some(o)
                }
                // A workload gone: its children go by their owner
                // references; what the controller noted of it goes now.
                watcher::Event::Delete(o) => {
                    c.forget(&obj_key(K::KIND.name(), &o.namespace().unwrap_or_default(), &o.name_any()));
                    None
                }
                _ => None,
            };
            futures::future::ready(Ok(trigger))
        });
    let mut controller = Controller::for_stream(main, reader);
    for (av, kind, plural) in K::CHILDREN {
        let ar = api_resource(av, kind, plural);
        let kind_key = format!("{av}/{kind}");
        // Several workload kinds own the same child kinds (ConfigMaps …):
        // each watches its own, by the kind label.
        let cfg = watcher::Config::default().labels(&format!("pinfleet.dev/kind={}", K::KIND.name())).page_size(PAGE);
        let w = reflector::store::Writer::new(ar.clone());
        let store = w.as_reader();
        let c = ctx.clone();
        let key_kind = kind_key.clone();
        let status_read = status::reads_status(kind);
        let wait = waiting.clone();
        let api: Api<child::Child> = match &scope {
            Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
            None => Api::all_with(client.clone(), &ar),
        };
        let stream =
            watcher(api, cfg).default_backoff().modify(slim::<child::Child>).reflect(w).try_filter_map(move |ev| {
                let trigger = match ev {
                    // A child gone is always a reason: it is made again.
                    watcher::Event::Delete(o) => {
                        let key = obj_key(&key_kind, &o.namespace().unwrap_or_default(), &o.name_any());
                        c.child_hashes.lock().expect("child hashes").remove(&key);
                        c.index_child(kind, &o, false);
                        Some(o)
                    }
                    watcher::Event::Apply(o) | watcher::Event::InitApply(o) => {
                        c.index_child(kind, &o, true);
                        let key = obj_key(&key_kind, &o.namespace().unwrap_or_default(), &o.name_any());
                        let sighting = c.child_changed(&key, &o, status_read);
                        let changed = sighting != Sighting::Same;
                        let own = c.is_own(&key, o.meta().resource_version.as_deref());
                        // A child first seen (a standby's initial list) is
                        // no reason for its owner to go first: counted so,
                        // every owner whose children listed after it waited
                        // first, and at 20,000 services the change made as
                        // the leader died queued behind thousands.
                        if sighting == Sighting::Changed && !own && !c.is_leading() {
                            let ns = o.namespace().unwrap_or_default();
                            for r in o.owner_references().iter().filter(|r| r.kind == K::KIND.name()) {
                                wait.lock()
                                    .expect("waiting")
                                    .insert(obj_key(K::KIND.name(), &ns, &r.name), ObjectRef::new(&r.name).within(&ns));
                            }
                        }
                        (changed && !own).then_some(o)
                    }
                    _ => None,
                };
                futures::future::ready(Ok(trigger))
            });
        controller = controller.owns_stream_with(stream, ar);
        ctx.children.write().expect("children").insert(format!("{}/{}", K::KIND.name(), kind_key), store);
    }
    // Coming to lead reconciles what waits first, then every workload
    // (from the warm caches: unchanged ones cost no request).
    let (first_tx, first_rx) = futures::channel::mpsc::unbounded::<ObjectRef<K>>();
    let (all_tx, all_rx) = futures::channel::mpsc::unbounded::<()>();
    let c = ctx.clone();
    let mut leading = ctx.leading.subscribe();
    let takeover = tokio::spawn(async move {
        while leading.changed().await.is_ok() {
            if !*leading.borrow_and_update() {
                continue;
            }
            let first: Vec<ObjectRef<K>> = waiting.lock().expect("waiting").drain().map(|(_, r)| r).collect();
            let (n, before) = (first.len() as u64, c.reconciles.load(Ordering::Relaxed));
            for r in first {
                let _ = first_tx.unbounded_send(r);
            }
            // Everything else once those are done (or after a while: the
            // count is shared by the kinds).
            let since = tokio::time::Instant::now();
            while c.reconciles.load(Ordering::Relaxed) < before + n && since.elapsed() < TAKEOVER_FIRST {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            let _ = all_tx.unbounded_send(());
        }
    });
    let _stop_takeover = AbortOnDrop(takeover);
    controller
        .with_config(kube::runtime::controller::Config::default().concurrency(CONCURRENCY))
        .reconcile_on(first_rx)
        .reconcile_all_on(all_rx)
        .run(reconcile::<K>, error_policy::<K>, ctx)
        .for_each(|_| async {})
        .await;
}

/// How long a new leader lets what waited go first before reconciling
/// every workload.
const TAKEOVER_FIRST: Duration = Duration::from_secs(3);

/// Ends a task when dropped (the takeover watcher ends with its controller).
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Starts the watches behind the caches and waits until they are filled.
pub(super) async fn start_caches(ctx: &Ctx) {
    use kube::runtime::{reflector, WatchStreamExt as _};
    let client = ctx.client.clone();
    let (profiles, pw) = reflector::store::<ConfigMap>();
    let (namespaces, nw) = reflector::store::<Namespace>();
    // Only the one ConfigMap: the controller's Role names it (resourceNames).
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ctx.profile_namespace());
    let cfg = watcher::Config::default().fields(&format!("metadata.name={PROFILE_CONFIGMAP}"));
    tokio::spawn(reflector(pw, watcher(cms, cfg)).default_backoff().for_each(|_| async {}));
    let nss: Api<Namespace> = Api::all(client);
    tokio::spawn(reflector(nw, watcher(nss, watcher::Config::default())).default_backoff().for_each(|_| async {}));
    let ready = async {
        let _ = futures::join!(profiles.wait_until_ready(), namespaces.wait_until_ready());
    };
    // If the watches can't start (RBAC, an old server), reconciles keep
    // reading with GETs.
    if tokio::time::timeout(Duration::from_secs(30), ready).await.is_ok() {
        let _ = ctx.caches.set(Caches { profiles, namespaces });
    } else {
        tracing::warn!("the runtime-support and Namespace watches did not start; reading them per reconcile");
    }
}
