//! Managed pools (SPEC "Pool policy and lifecycle"): the broker's loop for each pool that has
//! a `DesktopPool` ([`vdi_core::policy`]). Pools without one are never touched here.
//!
//! The loop is keyed by (namespace, pool) and runs in the controller's work queue beside the
//! members' reconciles ([`crate::controller`]): a change to a DesktopPool, to a pool member's
//! VM or to a claim Lease queues the pool, as does every full pass. For a pool whose policy
//! reads ([`vdi_core::policy::DesktopPool::policy`]):
//! - [`plan`]: the rules (size, warm buffer, removals), pure;
//! - [`apply`]: one pool's reconcile (read the stores, plan, act, write the status); `act`: its
//!   writes; [`status`]: `.status` and its conditions;
//! - [`take`]: a member taken for removal (shrink, `onRelease: reset`): its Lease made the
//!   broker's first, then the VM marked.
//!
//! A policy that does not read is shown as the `PolicyInvalid` condition (with the field and
//! the fix) and nothing is done to the pool.

mod act;
pub mod apply;
pub mod plan;
pub mod status;
pub mod take;

pub use apply::{PoolKey, reconcile};

use std::sync::OnceLock;

use kube::runtime::events::Reporter;
use vdi_core::labels::BROKER_NAME;

/// This replica's identity, set once when it leads ([`set_identity`]): the Events'
/// `reportingInstance`.
static IDENTITY: OnceLock<String> = OnceLock::new();

/// Records this replica's identity for the pool loop's Events (the first one set stays).
pub fn set_identity(identity: &str) {
    let _ = IDENTITY.set(identity.to_owned());
}

/// The reporter of the pool loop's Events: controller `corral-vdi-broker`, instance this
/// replica (the controller's name until [`set_identity`] was called).
pub fn reporter() -> Reporter {
    Reporter {
        controller: BROKER_NAME.into(),
        instance: Some(
            IDENTITY
                .get()
                .cloned()
                .unwrap_or_else(|| BROKER_NAME.into()),
        ),
    }
}
