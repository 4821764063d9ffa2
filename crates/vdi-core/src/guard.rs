//! The server-side guard (SPEC "Server-side guard"): ValidatingAdmissionPolicies that make the
//! kube-apiserver itself enforce the claim rules, so they hold for kubectl users too.
//!
//! The manifests live in `guard/guard.yaml` at the top of the repository and are compiled into
//! this crate. [`install`] writes them (each object created, or replaced whole), [`status`]
//! compares the cluster's policies and bindings with them field by field, [`uninstall`] removes
//! them. Installing needs cluster-admin rights (ValidatingAdmissionPolicies and RBAC objects
//! are cluster-scoped) and Kubernetes 1.34 or newer (the policies use CEL's `lists.range`).
//!
//! What the guard enforces, for Leases named `corral-vdi-*` or labelled
//! `corral.dev/vdi-member` or `corral.dev/vdi-pool` (but not the broker's leader-election Lease
//! [`crate::names::BROKER_NAME`] in [`crate::names::BROKER_NAMESPACE`], and only there), and
//! VMs labelled `corral.dev/vdi-pool` (pool members), on everyone but administrators
//! ([`crate::names::ADMIN_GROUP`]):
//! - a Lease with a holder is updated or deleted only by its holder, or deleted by the broker
//!   ([`crate::names::BROKER_USER`], which reclaims expired claims but never creates or hands
//!   one on); so a stale Lease is reclaimed by the broker where one runs, else recovered by an
//!   administrator;
//! - a Lease is created, or handed on, naming the caller;
//! - a claim (a Lease created naming a holder, or handed on) carries its pool's label, and its
//!   claimant has the RBAC verb `claim` on that pool (SPEC "Entitlements",
//!   [`crate::entitlement`]; asked of the API server's authorizer with the claimant's own
//!   groups); so has a user setting their own assigned-to label in the client-side flow; only
//!   administrators write [`crate::names::FORCED_BY_ANNOTATION`], with their own identity;
//! - a Lease's `leaseDurationSeconds` is 1..=[`crate::validate::MAX_LEASE_SECONDS`] (required
//!   when it names a holder), and its `acquireTime`/`renewTime` are micro-times
//!   (`YYYY-MM-DDTHH:MM:SS.ffffffZ`) before the year 9000, so that jiff (whose range ends at
//!   9999-12-30T22:00Z) reads them and adds a claim's duration to them; a Lease with a holder
//!   carries both times (without `renewTime` it would never expire, and never be reclaimed);
//! - no finalizer or owner reference is added to a Lease (a finalizer kept a reclaimed claim
//!   Terminating, its member blocked), and a Lease labelled for a member or with a pool is
//!   named `corral-vdi-<member>` after its `corral.dev/vdi-member` label
//!   ([`crate::names::lease_name`]);
//! - the assigned-to label is set only to the caller's own encoded identity, and removed or
//!   changed only by that identity; the claimed-at annotation is set only beside the caller's
//!   own label, and removed only by whoever may remove the label;
//! - the broker may write any member's assigned-to label and claimed-at annotation (with a
//!   broker, it does the cluster's half of a claim); only the broker and administrators write
//!   its own annotations [`crate::names::GRANTED_TO_ANNOTATION`] and
//!   [`crate::names::BROKER_REASON_ANNOTATION`];
//! - only an administrator adds a VM to a pool or moves it out of one;
//! - nothing else of a member changes: its other labels and annotations, `spec` (run strategy,
//!   template), finalizers and owner references, nor is it deleted; KubeVirt's virt-api and
//!   virt-controller (namespaces `kubevirt`, `openshift-cnv`) and the controller manager's
//!   garbage collector and namespace controller are trusted with these (virt-api applies the
//!   start/stop subresources by changing the run strategy), never with the claim labels.

use kube::Client;
use kube::api::DynamicObject;
use serde::Serialize;

#[cfg(doc)]
use crate::error::Error;
use crate::error::Result;
use crate::manifests::{Comparison, Manifest, Verdict};

/// The guard's manifests, as shipped (`guard/guard.yaml`).
pub const MANIFEST: &str = include_str!("../../../guard/guard.yaml");
/// Field manager of [`install`]'s writes.
pub const FIELD_MANAGER: &str = "corral-vdi-guard";
/// Annotation carrying the digest of the manifest an object was installed from: tells an
/// object edited on the cluster from one another version installed.
pub const DIGEST_ANNOTATION: &str = "corral.dev/guard-digest";
/// Name of the policy (and binding) that guards claim Leases.
pub const LEASE_POLICY: &str = "corral-vdi-claim-leases";
/// Name of the policy (and binding) that guards pool members' labels.
pub const MEMBER_POLICY: &str = "corral-vdi-pool-members";

/// The guard as a [`Manifest`]: installed, compared and removed by [`crate::manifests`].
const GUARD: Manifest = Manifest {
    what: "the Corral VDI guard",
    files: &[("guard/guard.yaml", MANIFEST)],
    digest_annotation: DIGEST_ANNOTATION,
    field_manager: FIELD_MANAGER,
    needs: "it creates cluster-wide admission policies and RBAC objects",
    keeps: &[],
};

/// First 16 hex digits of the SHA-256 of [`MANIFEST`]: which version of the guard an object
/// came from.
pub fn manifest_digest() -> String {
    GUARD.digest()
}

/// The objects of [`MANIFEST`], each annotated with [`manifest_digest`].
///
/// Errors: only if the shipped manifest does not parse, which a unit test rules out.
pub fn objects() -> Result<Vec<DynamicObject>> {
    GUARD.objects()
}

/// How far the cluster's guard is from the shipped one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "bindings", derive(specta::Type))]
#[serde(rename_all = "camelCase")]
pub enum GuardState {
    /// Every object is there, as this version's manifest has it (field by field; fields the
    /// API server fills in with their defaults do not count).
    Installed,
    /// Every object is there, but some differ from this version's manifest: installed by
    /// another version, or edited on the cluster (a binding set to `Warn` or `Audit`, a changed
    /// expression), so the API server may not enforce every claim rule. The summary names each
    /// difference; `corral-vdi guard install` restores them.
    Outdated,
    /// Some objects are missing: the rules are not (all) enforced.
    Partial,
    /// None of it is installed: only RBAC protects claims.
    Absent,
    /// The guard's objects could not be read (no permission, or an error).
    Unknown,
}

/// One object of the guard on the cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "bindings", derive(specta::Type))]
#[serde(rename_all = "camelCase")]
pub struct GuardObject {
    /// Its kind.
    pub kind: String,
    /// Its name.
    pub name: String,
    /// Whether the cluster has it.
    pub present: bool,
    /// Whether it is as this version's manifest has it (see [`GuardState::Installed`]).
    pub current: bool,
}

/// Whether the cluster enforces the claim rules itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "bindings", derive(specta::Type))]
#[serde(rename_all = "camelCase")]
pub struct GuardStatus {
    /// The verdict.
    pub state: GuardState,
    /// One sentence saying what that means and what to do.
    pub summary: String,
    /// Each object, as found (empty when they could not be read).
    pub objects: Vec<GuardObject>,
}

impl GuardStatus {
    /// Whether the policies are there (installed, possibly different from this version's): the
    /// client then expects the API server's refusals and says them first.
    pub fn enforced(&self) -> bool {
        matches!(self.state, GuardState::Installed | GuardState::Outdated)
    }
}

/// Reads the guard's policies and bindings and compares each `spec` with the shipped manifest's
/// ([`crate::manifests::spec_differences`]). Every signed-in user may read them once the guard
/// is installed (it grants `get` on exactly these objects), so a 403 means it is not installed,
/// or an older cluster role is in the way.
///
/// Errors: only when the cluster cannot be reached; a 403 gives [`GuardState::Unknown`].
pub async fn status(client: &Client) -> Result<GuardStatus> {
    let compared = match GUARD
        .compare(client, &objects_to_check()?, |kind| {
            if kind.ends_with("Binding") {
                "binding"
            } else {
                "policy"
            }
            .to_owned()
        })
        .await?
    {
        Comparison::Read(compared) => compared,
        Comparison::Forbidden(why) => {
            return Ok(GuardStatus {
                state: GuardState::Unknown,
                summary: format!(
                    "cannot tell whether the Corral VDI guard is installed ({why}); with it \
                     installed every signed-in user may read it"
                ),
                objects: Vec::new(),
            });
        }
    };
    let differences = compared.differences.join("; ");
    let (state, summary) = match compared.verdict() {
        Verdict::Absent => (
            GuardState::Absent,
            "the Corral VDI guard is not installed: claim rules are enforced by this client \
             only, and anyone RBAC allows can change Leases and labels with kubectl; an \
             administrator installs it with `corral-vdi guard install`"
                .to_owned(),
        ),
        Verdict::Partial => (
            GuardState::Partial,
            format!(
                "the Corral VDI guard is incomplete (missing {}): run `corral-vdi guard install`",
                compared.missing().join(", ")
            ),
        ),
        Verdict::Installed => (
            GuardState::Installed,
            "the Corral VDI guard is installed: the API server itself enforces the claim rules"
                .to_owned(),
        ),
        Verdict::AnotherVersion => (
            GuardState::Outdated,
            format!(
                "the Corral VDI guard is installed from another version ({differences}): run \
                 `corral-vdi guard install` to bring it up to date"
            ),
        ),
        Verdict::Changed => (
            GuardState::Outdated,
            format!(
                "the Corral VDI guard was changed on the cluster, so the API server may not \
                 enforce every claim rule ({differences}): run `corral-vdi guard install` to \
                 restore it"
            ),
        ),
    };
    Ok(GuardStatus {
        state,
        summary,
        objects: compared
            .objects
            .into_iter()
            .map(|o| GuardObject {
                kind: o.kind,
                name: o.name,
                present: o.present,
                current: o.current,
            })
            .collect(),
    })
}

/// The policies and their bindings: the objects whose presence makes the rules hold.
fn objects_to_check() -> Result<Vec<DynamicObject>> {
    Ok(objects()?
        .into_iter()
        .filter(|o| {
            o.types
                .as_ref()
                .is_some_and(|t| t.kind.starts_with("ValidatingAdmissionPolicy"))
        })
        .collect())
}

/// Installs (or updates) the guard: every object of [`MANIFEST`] is created, or replaced whole
/// (with the resourceVersion read, retried on a conflict), so that what was edited on the
/// cluster goes, fields added by hand included (a server-side apply would keep those). Labels
/// and annotations others put on the objects stay. Returns once the policies are type-checked
/// ([`Manifest::install`]); the API server enforces them a moment later.
///
/// Errors: [`Error::Rejected`] `Forbidden` when RBAC does not let the caller create
/// cluster-scoped admission policies and RBAC objects (a cluster administrator's job); the API
/// server's refusal of a policy (e.g. an API server older than 1.34 that lacks a CEL function)
/// names the expression.
pub async fn install(client: &Client) -> Result<GuardStatus> {
    GUARD.install(client).await?;
    status(client).await
}

/// Removes every object of the guard; those already gone are skipped. Returns what was deleted.
///
/// Errors: [`Error::Rejected`] `Forbidden` for callers RBAC does not let delete them (a
/// cluster administrator's job: [`Error::for_cluster_admins`]); the API server's other
/// refusals.
pub async fn uninstall(client: &Client) -> Result<Vec<String>> {
    GUARD
        .uninstall(client)
        .await
        .map_err(|e| e.for_cluster_admins("remove the guard"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifests::{resource_of, spec_differences};
    use kube::ResourceExt;
    use serde_json::Value;

    #[test]
    fn the_manifest_trusts_the_broker_by_the_names_the_product_uses() {
        // The policies are CEL text: if the broker's ServiceAccount or namespace moved, the
        // guard would refuse its reclaims and labels, or exempt the wrong Lease.
        for name in [
            crate::names::BROKER_USER,
            crate::names::BROKER_NAMESPACE,
            crate::names::BROKER_NAME,
            crate::names::GRANTED_TO_ANNOTATION,
            crate::names::BROKER_REASON_ANNOTATION,
        ] {
            assert!(MANIFEST.contains(name), "guard/guard.yaml names {name}");
        }
    }

    #[test]
    fn the_manifest_parses_into_policies_bindings_and_a_reader_role() {
        let objects = objects().unwrap();
        let kinds: Vec<(String, String)> = objects
            .iter()
            .map(|o| (o.types.clone().unwrap().kind, o.name_any()))
            .collect();
        for (kind, name) in [
            ("ValidatingAdmissionPolicy", LEASE_POLICY),
            ("ValidatingAdmissionPolicyBinding", LEASE_POLICY),
            ("ValidatingAdmissionPolicy", MEMBER_POLICY),
            ("ValidatingAdmissionPolicyBinding", MEMBER_POLICY),
        ] {
            assert!(
                kinds.contains(&(kind.to_owned(), name.to_owned())),
                "{kind} {name} in {kinds:?}"
            );
        }
        for obj in &objects {
            resource_of(obj).unwrap();
            assert_eq!(
                obj.annotations()[DIGEST_ANNOTATION],
                manifest_digest(),
                "{}",
                obj.name_any()
            );
        }
        assert!(MANIFEST.contains(crate::names::ADMIN_GROUP));
        assert!(MANIFEST.contains(crate::names::DENIAL_PREFIX));
        assert!(
            MANIFEST.contains(&crate::validate::MAX_LEASE_SECONDS.to_string()),
            "the guard bounds a claim's duration as the product does"
        );
    }

    fn shipped(kind: &str, name: &str) -> Value {
        objects()
            .unwrap()
            .into_iter()
            .find(|o| o.types.as_ref().unwrap().kind == kind && o.name_any() == name)
            .unwrap()
            .data["spec"]
            .clone()
    }

    #[test]
    fn a_spec_with_the_server_defaults_added_matches() {
        let ours = shipped("ValidatingAdmissionPolicy", MEMBER_POLICY);
        let mut live = ours.clone();
        let constraints = &mut live["matchConstraints"];
        constraints["matchPolicy"] = "Equivalent".into();
        constraints["namespaceSelector"] = serde_json::json!({});
        constraints["objectSelector"] = serde_json::json!({});
        constraints["resourceRules"][0]["scope"] = "*".into();
        assert_eq!(spec_differences(&ours, &live), Vec::<String>::new());

        let ours = shipped("ValidatingAdmissionPolicyBinding", MEMBER_POLICY);
        let mut live = ours.clone();
        live["matchResources"] = serde_json::json!({
            "namespaceSelector": {}, "objectSelector": {}, "matchPolicy": "Equivalent"
        });
        assert_eq!(spec_differences(&ours, &live), Vec::<String>::new());
    }

    #[test]
    fn each_difference_is_named_by_its_field() {
        let ours = shipped("ValidatingAdmissionPolicyBinding", LEASE_POLICY);
        let mut live = ours.clone();
        live["validationActions"] = serde_json::json!(["Warn"]);
        live["matchResources"] =
            serde_json::json!({ "namespaceSelector": { "matchLabels": { "a": "b" } } });
        assert_eq!(
            spec_differences(&ours, &live),
            [
                "validationActions is [Warn], this version ships [Deny]",
                "matchResources is set, this version ships none"
            ]
        );

        let ours = shipped("ValidatingAdmissionPolicy", MEMBER_POLICY);
        let mut live = ours.clone();
        live["validations"][1]["expression"] = "true".into();
        live["failurePolicy"] = "Ignore".into();
        assert_eq!(
            spec_differences(&ours, &live),
            [
                "failurePolicy is Ignore, this version ships Fail",
                "validations[1].expression differs from this version's"
            ]
        );
        live = ours.clone();
        live["validations"].as_array_mut().unwrap().pop();
        live.as_object_mut().unwrap().remove("failurePolicy");
        let count = ours["validations"].as_array().unwrap().len();
        assert_eq!(
            spec_differences(&ours, &live),
            [
                "failurePolicy is not set, this version ships Fail".to_owned(),
                format!(
                    "validations has {} entries, this version ships {count}",
                    count - 1
                )
            ]
        );
    }
}
