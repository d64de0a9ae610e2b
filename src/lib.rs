//! pinfleet bootstraps, upgrades and governs fleets of Kubernetes clusters
//! on AWS from declarative files.
//!
//! Data flow, in brief:
//!
//! ```text
//! clusters/*.yaml ─▶ spec (extends → check → defaults → validate) ─▶ Cluster
//!    Cluster ─▶ render (cloud-init, kubeadm, kind, kubeconfig)
//!    Cluster ─▶ cloud::model (desired) ─▶ plan (vs cloud::aws::observe) ─▶ cloud::ops ─▶ apply
//!        launches: capacity::launcher decides (offerings in order, the ledger's skips, the cap) ─▶ cloud::aws::ops::launch calls EC2
//!    apply::cluster (bootstrap / apply / destroy) ─▶ rollout::upgrade ◀─ imaging (the AMI job, the gate; ami decides)
//!    clusters/fleet.yaml ─▶ fleet::plan ─▶ fleet::rollout::decide ─▶ fleet::run (each cluster's rollout::upgrade)
//!    Cluster ─▶ addons ─▶ in-cluster controller ─▶ federation (placement, health, fan-out)
//!    Cluster + what runs (AWS, the cluster's API) ─▶ diff (drift by layer, clusters compared)
//!    developers ─▶ gateway (identity, validation, quota, queue, admission, placement) ─▶ member clusters
//!    gateway + members + the fleet's state store ─▶ console::build ─▶ views (fleet, cluster, team, workload)
//!        ─▶ pages (console), JSON (/v1/views) and text (`pinfleet view`)
//! ```
//!
//! Where things live:
//! - pure: [`escape`] (what users typed, safe to show), [`spec`], [`capacity`] (offerings, refusal codes, the
//!   fallback order, the capacity ledger and the launcher's decisions), [`render`], [`cloud::model`], [`cloud::iam`] (the
//!   machines' roles and policies), [`cloud::ops`] (the operations a plan
//!   decides), [`cloud::orphans`], [`plan`], [`ami`] (selection,
//!   recipes, bakes' steps, channels, gates, waves, gc, the AMI job's record), [`rollout::policy`], [`workloads`], [`federation::placement`]
//!   and [`federation::health`], [`kube::validation`], [`kube::ready`], the
//!   serving-certificate approver's decision ([`controller::serving::decide`]),
//!   the fleet rollout's plan and decisions ([`fleet::plan`], [`fleet::rollout`]),
//!   drift and comparison ([`diff`], all but [`diff::observe`]), the
//!   gateway's quota, admission and intake ([`gateway::quota`],
//!   [`gateway::admission`], [`gateway::intake`]), and the view models every
//!   screen draws ([`views`]);
//! - effects: [`cloud::aws`] (the SDK edge), [`state`] (state store, lock,
//!   PKI, the join material machines fetch, history, roll progress), [`apply`] (executor and the cluster
//!   operations), [`rollout`] (driver, roll under the lock), [`imaging`] (the AMI job and
//!   the gate, run),
//!   [`fleet::run`] (the fleet rollout's one writer) and [`fleet::aws`],
//!   [`kube`] (every Kubernetes mechanic), [`addons`], [`controller`], the
//!   gateway's service and API ([`gateway::service`], [`gateway::http`],
//!   its listener, guard and audit trail) and
//!   the web console ([`console`]);
//! - [`cli`]: one file per command, parsing arguments and calling the above;
//!   [`output`] prints the formats and progress (every domain's text is
//!   drawn by its [`views`], and a fleet rollout's by [`fleet::text`]);
//! - [`sim`]: the local Kubernetes API emulator the tests and demos run
//!   against; nothing outside it (and the commands that start it) imports it.

pub mod accelerated;
pub mod addons;
pub mod adopt;
pub mod ami;
pub mod apply;
pub mod autoscale;
pub mod capacity;
pub mod cli;
pub mod cloud;
pub mod console;
pub mod controller;
pub mod delivery;
pub mod diff;
pub mod e2e;
pub mod edge;
pub mod escape;
pub mod etcd;
pub mod federation;
pub mod fleet;
pub mod gateway;
pub mod imaging;
pub mod kube;
pub mod outbound;
pub mod output;
pub mod plan;
pub mod provenance;
pub mod registry;
pub mod render;
pub mod rollout;
pub mod sdk_error;
pub mod sim;
pub mod spec;
pub mod state;
pub mod views;
pub mod workloads;
