//! Helpers for tests that run against a real sandbox: one instance per test binary, started on
//! first use in a thread of its own (so it outlives each test's runtime), and a namespace per
//! test so that tests in one binary never see each other's objects.
//!
//! Its modules, by what a test needs; their items are used from the crate's root
//! (`corral_tests::client_as`):
//! [`cluster`] (the sandbox, users, namespaces), [`objects`] (VMs, pools, Leases), [`streams`]
//! (connect), [`programs`] (the built binaries, a named sandbox), [`devices`] (capacity),
//! [`policy`] (managed pools: DesktopPools and their members),
//! [`unix_user`] (who a listener serves), [`hostile`] (Leases written by someone else); [`gui`]
//! and [`measure`] are used by path.

pub mod gui;
pub mod measure;

mod cluster;
mod devices;
mod hostile;
mod objects;
mod policy;
mod programs;
mod streams;
mod unix_user;

pub use cluster::*;
pub use devices::*;
pub use hostile::*;
pub use objects::*;
pub use policy::*;
pub use programs::*;
pub use streams::*;
pub use unix_user::*;
