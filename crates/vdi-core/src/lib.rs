//! Corral VDI's domain: pools of KubeVirt desktops, their claims and their live view.
//!
//! This crate is the only code that talks to the cluster; the CLI and the desktop app are thin
//! adapters over it, so they can never disagree about what the cluster says.

pub mod audit;
pub mod broker;
pub mod capacity;
pub mod claim;
pub mod clock;
pub mod cluster;
pub mod connect;
pub mod credentials;
pub mod error;
pub mod guard;
pub mod helpers;
pub mod identity;
pub mod labels;
pub mod lease;
pub mod link;
pub mod managed;
pub mod manifests;
pub mod peer;
pub mod policy;
pub mod pool;
pub mod rdp;
pub mod redact;
pub mod resources;
pub mod scope;
pub mod session;
pub mod state;
pub mod stream;
pub mod usb;
pub mod validate;
pub mod watch;

pub use error::{Error, Result};
