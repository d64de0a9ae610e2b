//! pinfleet bootstraps, upgrades and governs fleets of Kubernetes clusters
//! on AWS from declarative files.
//!
//! Data flow, in brief:
//!
//! ```text
//! clusters/*.yaml ─▶ spec (extends → check → defaults → validate) ─▶ Cluster
//!    Cluster ─▶ render (cloud-init, kubeadm, kind, kubeconfig)
//!    Cluster ─▶ desired cloud model ─▶ plan (vs observed) ─▶ apply ─▶ rollout
//!    Cluster ─▶ addons ─▶ in-cluster controller ─▶ federation
//! ```
//!
//! Pure modules ([`spec`], [`render`], [`cloud::model`], [`plan`], [`ami`])
//! do no IO beyond reading the cluster files; effects live at the edges
//! ([`cloud::aws`], [`state`], [`apply`], [`kube`], [`cli`]). [`sim`] is
//! the local Kubernetes API emulator the tests and demos run against.

pub mod addons;
pub mod ami;
pub mod apply;
pub mod cli;
pub mod cloud;
pub mod controller;
pub mod federation;
pub mod kube;
pub mod output;
pub mod plan;
pub mod render;
pub mod rollout;
pub mod sim;
pub mod spec;
pub mod state;
pub mod workloads;
