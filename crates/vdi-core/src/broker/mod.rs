//! The in-cluster broker (SPEC "Broker", issue 25) as clients and administrators see it: its
//! manifests (`broker/broker.yaml` and `broker/members-policy.yaml` at the top of the
//! repository, compiled in), their install and removal, and whether a broker runs
//! ([`status`], from its leader-election Lease), and who may claim where ([`claimants`]). The broker itself is the binary
//! `corral-vdi-broker` (crate `crates/broker`).

pub mod claimants;
mod manifest;
pub mod namespaces;
mod status;

pub use manifest::{
    DIGEST_ANNOTATION, GRANT_API_GROUP, GRANTED_RIGHTS, MANAGED_BY, MANIFEST, MEMBERS_POLICY,
    ManifestStatus, check_image, default_image, install, install_objects, manifest_digest,
    manifest_status, objects, uninstall,
};

pub use status::{
    BrokerReplica, BrokerState, BrokerStatus, STALE_REPLICA_DURATIONS, status, status_of,
};

/// Name of the Role and RoleBinding (in [`crate::names::BROKER_NAMESPACE`]) that let every
/// signed-in user (`system:authenticated`) read the leader Lease: how clients know a broker is
/// there. RBAC's `resourceNames` limits them to that one Lease, so a `list` or `watch` must
/// carry the field selector `metadata.name=corral-vdi-broker`.
pub const STATUS_ROLE: &str = "corral-vdi:broker-status";

/// The label every object of the broker's carries (`app.kubernetes.io/part-of`), as
/// (key, value).
pub(crate) const PART_OF: (&str, &str) = ("app.kubernetes.io/part-of", "corral-vdi-broker");

/// Field manager of the writes of [`install`], [`namespaces::serve`] and [`claimants::allow`]
/// (the broker's own writes use `corral-vdi-broker/<identity>`).
pub const FIELD_MANAGER: &str = "corral-vdi-broker-install";
