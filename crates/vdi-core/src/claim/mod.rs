//! Claims: handing a pool member to an identity through its Lease, and releasing it
//! (SPEC "Assign", "Unassign").
//!
//! The Lease `corral-vdi-<member>` is the ownership record. It is created first-writer-wins
//! (a 409 `AlreadyExists` means another claimant won), and a stale one is taken over only by
//! an update carrying the resourceVersion that was read (a 409 `Conflict` means another
//! claimant won) — never delete-then-create, never an unconditional patch. Only the Lease
//! holder then writes the VM's presentation label and annotation, with the VM's
//! resourceVersion as a precondition, so the label can never name someone who lost the Lease.
//! However many claimants race, each member ends with at most one holder.
//!
//! Expiry is judged with the API server's clock ([`ServerClock`]), and Lease times are written
//! in it, so a workstation whose clock is off neither steals a live claim nor keeps a dead one.
//!
//! Who acts is always the identity from the cluster ([`Actor`]). A label and a Lease that name
//! different people (another tool wrote one of them) are a conflict: never claimed, never
//! resumed over, resolved by an administrator. With the server-side guard installed
//! ([`crate::guard`]), a stale Lease held by someone else is an administrator's to recover: an
//! ordinary claimant skips it and says how many it skipped.
//!
//! The parts: `rules` decides without a request (who may claim or release which member, the
//! Lease a claim writes, the order of the candidates, every refusal's words) and is
//! unit-tested; `assign` and `unassign` are the two flows, step by step, against the API
//! server; `power` starts and stops the VM through KubeVirt's subresources; `granting` waits
//! for the broker's half; `side` says who does that half here, in the words both front ends
//! show.
//!
//! With a broker on the cluster ([`crate::broker`], SPEC "Broker"), the cluster's half of a
//! claim is the broker's: a claim is the Lease alone (won by the same rules), after which the
//! client waits, watching the member's VM, until the broker has labelled it, bound the
//! holder's access and started it (`granting`); a release deletes the Lease alone and the
//! broker does the rest. Without one, the seed's client-side flow applies, and both front ends
//! say what that means ([`side`]).

mod access;
mod assign;
pub mod cluster_half;
mod granting;
pub mod offers;
pub mod ownership;
mod power;
pub mod renew;
mod rules;
mod unassign;

use std::time::Duration;

use jiff::Timestamp;
use serde::Serialize;

pub use access::check_connect;
pub use assign::{StartCheck, assign, assign_with_progress};
pub use granting::ClaimProgress;
pub use power::{PowerAction, STOPPING_WAIT_SECONDS, restart, start, stop};
pub use rules::{Adoption, check_assign, check_unassign};
pub use unassign::{FORCE_RELEASE_REASON, unassign};

use crate::names::DEFAULT_LEASE_SECONDS;
#[cfg(doc)]
use crate::{clock::ServerClock, identity::Actor};

/// How a claim is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClaimOptions {
    /// `spec.leaseDurationSeconds` of a new or taken-over Lease, in seconds (default 3600;
    /// [`crate::validate::MIN_LEASE_SECONDS`] ..= [`crate::validate::MAX_LEASE_SECONDS`]).
    pub lease_seconds: i64,
    /// Hand out another member even when the user already holds one in this pool (by default
    /// they get that one back).
    pub another: bool,
    /// With a broker: how long the claim waits, in all, for a member the broker is releasing
    /// when none is free, and, once its Lease is held, for the broker to label the member,
    /// bind the holder's access and start it (default [`DEFAULT_GRANT_TIMEOUT`], 1 s to 24 h).
    /// Without a broker it is not used.
    pub timeout: Duration,
    /// An administrator's assignment to someone the pool is not for (SPEC "Entitlements"): not
    /// checked, and recorded on the Lease ([`crate::names::FORCED_BY_ANNOTATION`]) so that the
    /// broker grants it. Without it such an assignment is refused before anything is written.
    pub force: bool,
}

/// How long a claim waits for the broker's grant by default: 120 s.
pub const DEFAULT_GRANT_TIMEOUT: Duration = Duration::from_secs(120);

impl Default for ClaimOptions {
    fn default() -> Self {
        ClaimOptions {
            lease_seconds: i64::from(DEFAULT_LEASE_SECONDS),
            another: false,
            timeout: DEFAULT_GRANT_TIMEOUT,
            force: false,
        }
    }
}

/// How a release is made.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UnassignOptions {
    /// Release an active claim held by someone else (an administrator's act, or whoever RBAC
    /// lets delete the Lease when the guard is not installed); recorded as a Kubernetes Event
    /// on the VM.
    pub force: bool,
}

/// A successful claim.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "bindings", derive(specta::Type))]
#[serde(rename_all = "camelCase")]
pub struct Claimed {
    /// Namespace of the pool.
    pub namespace: String,
    /// Pool name.
    pub pool: String,
    /// The member now held.
    pub member: String,
    /// The holder (`spec.holderIdentity`).
    pub identity: String,
    /// `true` when the identity already held this member (an idempotent retry).
    pub resumed: bool,
    /// Races lost to other claimants before this member was won.
    pub races_lost: u32,
    /// When the Lease expires (API server time).
    pub lease_expires_at: Timestamp,
    /// What was done to the VM's power.
    pub power: PowerAction,
}

/// A successful release.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "bindings", derive(specta::Type))]
#[serde(rename_all = "camelCase")]
pub struct Released {
    /// Namespace of the member.
    pub namespace: String,
    /// The member released.
    pub member: String,
    /// Who held it (Lease holder or label), if anyone.
    pub previous_holder: Option<String>,
    /// Whether a Lease was deleted.
    pub lease_released: bool,
    /// Whether the assigned-to label and claimed-at annotation were removed (by this client;
    /// with a broker, the broker removes them: `false`).
    pub label_removed: bool,
    /// What was done to the VM's power.
    pub power: PowerAction,
    /// Whether someone else's active claim was released (`force`); an Event on the VM
    /// records it.
    pub forced: bool,
}
