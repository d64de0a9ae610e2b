//! The effectful half of the installer: server-side apply of rendered
//! addons (field manager `pinfleet`), waits for readiness, prunes what is
//! no longer rendered, records the inventory, and diffs live against
//! desired. Talks to any API server through kube-rs (the sim, kind, or a
//! real cluster).
//!
//! A failure stops at the addon that failed, naming it; nothing is pruned
//! and the inventory is not rewritten, so a re-run applies again (a no-op
//! for what already landed) and carries on from there.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams};
use kube::discovery::{ApiCapabilities, ApiResource};
use kube::Client;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::package::{Readiness, ReadyKind};
use super::ready;
use super::render::{namespaces, ObjectKey, RenderedAddon, ADDON_LABEL};
use crate::kube::apply::Applier;
pub use crate::kube::apply::{comparable, connect};

/// Field manager for everything the CLI applies.
pub const FIELD_MANAGER: &str = "pinfleet";
/// Where the in-cluster inventory lives.
pub const INVENTORY_NAMESPACE: &str = "pinfleet-system";
pub const INVENTORY_CONFIGMAP: &str = "pinfleet-addons";

/// What is installed: per addon, its version and the objects it applied.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Inventory {
    pub addons: BTreeMap<String, InstalledAddon>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InstalledAddon {
    pub version: String,
    pub objects: Vec<ObjectKey>,
}

impl Inventory {
    pub fn of(addons: &[RenderedAddon]) -> Inventory {
        Inventory {
            addons: addons
                .iter()
                .map(|a| {
                    let objects = a.objects.iter().map(|o| o.key.clone()).collect();
                    (a.name.clone(), InstalledAddon { version: a.version.clone(), objects })
                })
                .collect(),
        }
    }
}

/// How an install went, per addon.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    pub addons: Vec<AddonReport>,
    /// Objects deleted because no addon renders them any more.
    pub pruned: Vec<ObjectKey>,
    /// Would have been pruned, but Namespaces and CRDs need `--prune-crds`.
    pub kept: Vec<ObjectKey>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AddonReport {
    pub name: String,
    /// Version installed before, if any.
    pub from: Option<String>,
    pub version: String,
    pub objects: usize,
    /// Objects whose resourceVersion moved (created or changed).
    pub changed: usize,
    pub seconds: f64,
}

#[derive(Debug, Clone)]
pub struct Options {
    /// How long each addon may take to become ready.
    pub timeout: Duration,
    /// Also prune Namespaces and CRDs.
    pub prune_crds: bool,
    /// Show spinners (a terminal) instead of one line per step.
    pub progress: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options { timeout: Duration::from_secs(300), prune_crds: false, progress: false }
    }
}

fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

/// The installer: an applier (server-side apply and discovery, from
/// `kube::apply`) and the addon bookkeeping around it.
pub struct Installer {
    applier: Applier,
}

impl Installer {
    pub fn new(client: Client) -> Self {
        Installer { applier: Applier::new(client, FIELD_MANAGER) }
    }

    async fn resource(&mut self, api_version: &str, kind: &str) -> Result<(ApiResource, ApiCapabilities)> {
        self.applier.resource(api_version, kind).await
    }

    async fn api(&mut self, key: &ObjectKey) -> Result<Api<DynamicObject>> {
        self.applier.api(&key.api_version, &key.kind, &key.namespace).await
    }

    async fn get(&mut self, key: &ObjectKey) -> Result<Option<Value>> {
        self.applier.get(&key.api_version, &key.kind, &key.namespace, &key.name).await
    }

    /// Server-side apply; returns whether the resourceVersion moved.
    async fn apply(&mut self, key: &ObjectKey, value: &Value) -> Result<bool> {
        self.applier.apply(&key.api_version, &key.kind, &key.namespace, &key.name, value).await
    }

    /// What applying would leave (server-side dry run), for diffs.
    async fn dry_run(&mut self, key: &ObjectKey, value: &Value) -> Result<Value> {
        self.applier.dry_run(&key.api_version, &key.kind, &key.namespace, &key.name, value).await
    }

    /// The inventory recorded in the cluster (empty when none).
    pub async fn inventory(&mut self) -> Result<Inventory> {
        let cms: Api<k8s_openapi::api::core::v1::ConfigMap> =
            Api::namespaced(self.applier.client().clone(), INVENTORY_NAMESPACE);
        let cm = match cms.get_opt(INVENTORY_CONFIGMAP).await {
            Ok(cm) => cm,
            Err(e) if is_not_found(&e) => None,
            Err(e) => return Err(e).context("reading the addon inventory"),
        };
        let text = cm.and_then(|c| c.data).and_then(|d| d.get("inventory.json").cloned());
        match text {
            Some(t) => serde_json::from_str(&t).with_context(|| {
                format!("the addon inventory {INVENTORY_NAMESPACE}/{INVENTORY_CONFIGMAP} is not readable")
            }),
            None => Ok(Inventory::default()),
        }
    }

    async fn write_inventory(&mut self, inv: &Inventory) -> Result<()> {
        let cm = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": INVENTORY_CONFIGMAP, "namespace": INVENTORY_NAMESPACE,
                         "labels": {super::render::MANAGED_BY_LABEL: "pinfleet"}},
            "data": {"inventory.json": serde_json::to_string_pretty(inv).expect("inventory serialises")},
        });
        let key = ObjectKey {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: INVENTORY_NAMESPACE.into(),
            name: INVENTORY_CONFIGMAP.into(),
        };
        self.apply(&key, &cm).await.map(|_| ())
    }

    /// Installs the addons in order, waits for each to be ready, prunes
    /// what is no longer rendered, and records the inventory.
    pub async fn install(
        &mut self,
        addons: &[RenderedAddon],
        opts: &Options,
        on_event: &mut dyn FnMut(Event),
    ) -> Result<Report> {
        let previous = self.inventory().await?;
        let mut report = Report::default();
        for ns in namespaces(addons).iter().chain(std::iter::once(&inventory_namespace())) {
            let key = ObjectKey {
                api_version: "v1".into(),
                kind: "Namespace".into(),
                namespace: String::new(),
                name: ns["metadata"]["name"].as_str().unwrap_or_default().into(),
            };
            if self.get(&key).await?.is_none() {
                self.apply(&key, ns).await?;
            }
        }
        for a in addons {
            let start = Instant::now();
            on_event(Event::Applying { addon: a.name.clone(), objects: a.objects.len() });
            let changed =
                self.install_one(a, opts, on_event).await.with_context(|| format!("addon {} failed", a.name))?;
            let r = AddonReport {
                name: a.name.clone(),
                from: previous.addons.get(&a.name).map(|i| i.version.clone()),
                version: a.version.clone(),
                objects: a.objects.len(),
                changed,
                seconds: start.elapsed().as_secs_f64(),
            };
            on_event(Event::Ready(r.clone()));
            report.addons.push(r);
        }
        let (pruned, kept) = self.prune(addons, &previous, opts.prune_crds, false).await?;
        for k in &pruned {
            on_event(Event::Pruned(k.clone()));
        }
        report.pruned = pruned;
        report.kept = kept;
        let inv = Inventory::of(addons);
        if inv != previous {
            self.write_inventory(&inv).await?;
        }
        Ok(report)
    }

    async fn install_one(
        &mut self,
        a: &RenderedAddon,
        opts: &Options,
        on_event: &mut dyn FnMut(Event),
    ) -> Result<usize> {
        let mut changed = 0;
        // CRDs first, then wait until they are Established so the custom
        // resources after them (here or in later addons) can be served.
        let (crds, rest): (Vec<_>, Vec<_>) = a.objects.iter().partition(|o| o.key.kind == "CustomResourceDefinition");
        for o in &crds {
            changed += usize::from(self.apply(&o.key, &o.value).await?);
        }
        for o in &crds {
            let check =
                Readiness { kind: ReadyKind::CustomResourceDefinition, name: o.key.name.clone(), namespace: None };
            self.wait(&check, opts.timeout, on_event, &a.name).await?;
        }
        for o in &rest {
            changed += usize::from(self.apply(&o.key, &o.value).await?);
        }
        for check in &a.readiness {
            self.wait(check, opts.timeout, on_event, &a.name).await?;
        }
        Ok(changed)
    }

    /// Waits for one readiness check, polling (the status of a handful of
    /// addon objects; a watch per object buys nothing here).
    async fn wait(
        &mut self,
        check: &Readiness,
        timeout: Duration,
        on_event: &mut dyn FnMut(Event),
        addon: &str,
    ) -> Result<()> {
        let (api_version, kind) = match check.kind {
            ReadyKind::CustomResourceDefinition => ("apiextensions.k8s.io/v1", "CustomResourceDefinition"),
            ReadyKind::Deployment => ("apps/v1", "Deployment"),
            ReadyKind::DaemonSet => ("apps/v1", "DaemonSet"),
            ReadyKind::StatefulSet => ("apps/v1", "StatefulSet"),
            ReadyKind::Job => ("batch/v1", "Job"),
        };
        let key = ObjectKey {
            api_version: api_version.into(),
            kind: kind.into(),
            namespace: check.namespace.clone().unwrap_or_default(),
            name: check.name.clone(),
        };
        let deadline = Instant::now() + timeout;
        let mut last = String::new();
        loop {
            let why = match self.get(&key).await? {
                None => "not found".to_string(),
                Some(obj) => match ready::ready(check.kind, &obj) {
                    Ok(()) => return Ok(()),
                    Err(_) if ready::terminal(check.kind, &obj) => bail!("{key} failed"),
                    Err(why) => why,
                },
            };
            if why != last {
                on_event(Event::Waiting { addon: addon.to_string(), object: key.to_string(), why: why.clone() });
                last = why.clone();
            }
            if Instant::now() >= deadline {
                bail!("{key} not ready after {}: {why}", humantime::format_duration(timeout));
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Objects labelled as some addon's that no addon renders now. Kinds
    /// searched: those rendered now and those in the previous inventory.
    async fn stale(&mut self, addons: &[RenderedAddon], previous: &Inventory) -> Result<Vec<ObjectKey>> {
        let wanted: BTreeSet<&ObjectKey> = addons.iter().flat_map(|a| a.objects.iter().map(|o| &o.key)).collect();
        let kinds: BTreeSet<(String, String)> = wanted
            .iter()
            .map(|k| (k.api_version.clone(), k.kind.clone()))
            .chain(
                previous
                    .addons
                    .values()
                    .flat_map(|i| i.objects.iter().map(|k| (k.api_version.clone(), k.kind.clone()))),
            )
            .collect();
        let mut stale = Vec::new();
        for (api_version, kind) in kinds {
            let (ar, _) = match self.resource(&api_version, &kind).await {
                Ok(r) => r,
                // A kind the server no longer serves has nothing left to prune.
                Err(_) => continue,
            };
            let api: Api<DynamicObject> = Api::all_with(self.applier.client().clone(), &ar);
            let list = api
                .list(&ListParams::default().labels(ADDON_LABEL))
                .await
                .with_context(|| format!("listing {kind}"))?;
            for o in list.items {
                let key = ObjectKey {
                    api_version: api_version.clone(),
                    kind: kind.clone(),
                    namespace: o.metadata.namespace.clone().unwrap_or_default(),
                    name: o.metadata.name.clone().unwrap_or_default(),
                };
                if !wanted.contains(&key) {
                    stale.push(key);
                }
            }
        }
        Ok(stale)
    }

    /// Deletes stale objects (or, with `dry`, only lists them). Returns
    /// (pruned, kept because they are Namespaces or CRDs).
    async fn prune(
        &mut self,
        addons: &[RenderedAddon],
        previous: &Inventory,
        prune_crds: bool,
        dry: bool,
    ) -> Result<(Vec<ObjectKey>, Vec<ObjectKey>)> {
        let (mut pruned, mut kept) = (Vec::new(), Vec::new());
        for key in self.stale(addons, previous).await? {
            if !prune_crds && matches!(key.kind.as_str(), "Namespace" | "CustomResourceDefinition") {
                kept.push(key);
                continue;
            }
            if !dry {
                let api = self.api(&key).await?;
                match api.delete(&key.name, &DeleteParams::background()).await {
                    Ok(_) => {}
                    Err(e) if is_not_found(&e) => {}
                    Err(e) => return Err(e).with_context(|| format!("pruning {key}")),
                }
            }
            pruned.push(key);
        }
        Ok((pruned, kept))
    }

    /// Live vs desired, for the fields pinfleet manages: each object is
    /// dry-run applied and compared with what is there now; objects that
    /// would be pruned show as removed.
    pub async fn diff(&mut self, addons: &[RenderedAddon], prune_crds: bool) -> Result<Vec<ObjectDiff>> {
        let previous = self.inventory().await?;
        let mut out = Vec::new();
        for a in addons {
            for o in &a.objects {
                let live = match self.resource(&o.key.api_version, &o.key.kind).await {
                    Ok(_) => self.get(&o.key).await?,
                    // The CRD that serves it is not installed yet.
                    Err(_) => None,
                };
                let desired = match &live {
                    Some(_) => self.dry_run(&o.key, &o.value).await?,
                    // Creation: a dry run may fail for want of a namespace
                    // or CRD that the same install would create first.
                    None => match self.dry_run(&o.key, &o.value).await {
                        Ok(v) => v,
                        Err(_) => o.value.clone(),
                    },
                };
                let (live, desired) = (live.map(|v| comparable(&v)), comparable(&desired));
                if live.as_ref() != Some(&desired) {
                    out.push(ObjectDiff { addon: a.name.clone(), key: o.key.clone(), live, desired: Some(desired) });
                }
            }
        }
        let (pruned, _) = self.prune(addons, &previous, prune_crds, true).await?;
        for key in pruned {
            let live = self.get(&key).await?.map(|v| comparable(&v));
            let addon = live
                .as_ref()
                .and_then(|v| v["metadata"]["labels"][ADDON_LABEL].as_str().map(str::to_string))
                .unwrap_or_default();
            out.push(ObjectDiff { addon, key, live, desired: None });
        }
        Ok(out)
    }
}

fn inventory_namespace() -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace",
           "metadata": {"name": INVENTORY_NAMESPACE, "labels": {super::render::MANAGED_BY_LABEL: "pinfleet"}}})
}

/// One object whose live form differs from the desired one.
#[derive(Debug, Clone, Serialize)]
pub struct ObjectDiff {
    pub addon: String,
    pub key: ObjectKey,
    /// None: not there yet.
    pub live: Option<Value>,
    /// None: to be pruned.
    pub desired: Option<Value>,
}

impl ObjectDiff {
    /// A unified diff of the YAML forms.
    pub fn unified(&self) -> String {
        let yaml =
            |v: &Option<Value>| v.as_ref().map(|v| serde_saphyr::to_string(v).unwrap_or_default()).unwrap_or_default();
        let (a, b) = (yaml(&self.live), yaml(&self.desired));
        let label = format!("{} ({})", self.key, self.addon);
        similar::TextDiff::from_lines(&a, &b)
            .unified_diff()
            .context_radius(3)
            .header(&format!("live {label}"), &format!("desired {label}"))
            .to_string()
    }
}

/// Progress of an install, for the display and `-o json`.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "event", rename_all = "camelCase")]
pub enum Event {
    Applying { addon: String, objects: usize },
    Waiting { addon: String, object: String, why: String },
    Ready(AddonReport),
    Pruned(ObjectKey),
}
