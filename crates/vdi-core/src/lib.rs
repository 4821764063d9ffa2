//! Corral VDI's domain: pools of KubeVirt desktops, their claims and their live view.
//!
//! This crate is the only code that talks to the cluster; the CLI and the desktop app are thin
//! adapters over it, so they can never disagree about what the cluster says.
//!
//! Two floors: the cluster floor (views and rules, claims, pools, policy, the guard's and the
//! broker's manifests, watches), which the in-cluster broker uses alone, and, behind the feature
//! `desktop`, what only a workstation does (sessions, forwards, RDP in the app, USB, the peer
//! check of local listeners, helper programs, kubeconfig contexts and credentials plugins, the
//! app's cluster link). The cluster floor imports nothing of the desktop floor. The TypeScript derives of the
//! app's wire types sit behind the feature `bindings`.

pub mod audit;
pub mod broker;
pub mod capacity;
pub mod claim;
pub mod clock;
#[cfg(feature = "desktop")]
pub mod cluster;
#[cfg(feature = "desktop")]
pub mod connect;
#[cfg(feature = "desktop")]
pub mod credentials;
pub mod entitlement;
pub mod error;
pub mod guard;
pub mod identity;
pub mod lease;
#[cfg(feature = "desktop")]
pub mod link;
pub mod managed;
pub mod manifests;
pub mod names;
#[cfg(feature = "desktop")]
pub mod peer;
pub mod policy;
pub mod pool;
#[cfg(feature = "desktop")]
pub mod programs;
#[cfg(feature = "desktop")]
pub mod rdp;
pub mod redact;
pub mod resources;
pub mod scope;
#[cfg(feature = "desktop")]
pub mod session;
pub mod state;
pub mod stream;
#[cfg(feature = "desktop")]
pub mod usb;
pub mod validate;
pub mod watch;

pub use error::{Error, Result};
