//! Managed pools (SPEC "Pool policy and lifecycle"): the broker's loop for each pool that has
//! a `DesktopPool` ([`vdi_core::policy`]). Pools without one are never touched here.
//!
//! The loop is keyed by (namespace, pool) and runs in the controller's work queue beside the
//! members' reconciles ([`crate::controller`]): a change to a DesktopPool, to a pool member's
//! VM or to a claim Lease queues the pool, as does every full pass. For a pool whose policy
//! reads ([`vdi_core::policy::DesktopPool::policy`]):
//! - [`vdi_core::policy::plan`]: the rules (size, warm buffer, removals), pure, in the core
//!   (the app's settings dialog and `pool resize` preview a resize with them);
//! - [`apply`]: one pool's reconcile (read the stores, plan, act, write the status); `act`: its
//!   writes; [`status`]: `.status` and its conditions;
//! - [`take`]: a member taken for removal (shrink, `onRelease: reset`): its Lease made the
//!   broker's first, then the VM marked.
//!
//! A policy that does not read is shown as the `PolicyInvalid` condition (with the field and
//! the fix) and nothing is done to the pool.

mod act;
pub mod apply;
pub mod status;
pub mod take;

pub use apply::reconcile;
