//! The server-side guard (SPEC "Server-side guard"): ValidatingAdmissionPolicies that make the
//! kube-apiserver itself enforce the claim rules, so they hold for kubectl users too.
//!
//! The manifests live in `guard/guard.yaml` at the top of the repository and are compiled into
//! this crate. [`install`] applies them (server-side apply), [`status`] compares what the
//! cluster has with them, [`uninstall`] removes them. Installing needs cluster-admin rights
//! (ValidatingAdmissionPolicies and RBAC objects are cluster-scoped) and Kubernetes 1.34 or
//! newer (the policies use CEL's `lists.range`).
//!
//! What the guard enforces, for Leases named `corral-vdi-*` or labelled
//! `corral.dev/vdi-member`, and VMs labelled `corral.dev/vdi-pool`:
//! - a Lease with a holder is updated or deleted only by its holder or an administrator
//!   ([`crate::identity::ADMIN_GROUP`]); so a stale Lease is recovered by an administrator;
//! - a Lease is created, or handed on, naming the caller unless the caller is an administrator;
//! - the assigned-to label is set only to the caller's own encoded identity, and removed or
//!   changed only by that identity or an administrator;
//! - only an administrator moves a member out of its pool.

use k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicy;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Client, ResourceExt};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use ts_rs::TS;

use crate::error::{Error, Result, is_status};
use crate::model::ErrorKind;

/// The guard's manifests, as shipped (`guard/guard.yaml`).
pub const MANIFEST: &str = include_str!("../../../guard/guard.yaml");
/// Field manager of [`install`]'s server-side apply.
pub const FIELD_MANAGER: &str = "corral-vdi-guard";
/// Annotation carrying the digest of the manifest an object was installed from.
pub const DIGEST_ANNOTATION: &str = "corral.dev/guard-digest";
/// Name of the policy (and binding) that guards claim Leases.
pub const LEASE_POLICY: &str = "corral-vdi-claim-leases";
/// Name of the policy (and binding) that guards pool members' labels.
pub const MEMBER_POLICY: &str = "corral-vdi-pool-members";
/// Start of every message the guard's policies deny with.
pub const DENIAL_PREFIX: &str = "corral-vdi guard:";

/// First 16 hex digits of the SHA-256 of [`MANIFEST`]: which version of the guard an object
/// came from.
pub fn manifest_digest() -> String {
    Sha256::digest(MANIFEST.as_bytes())
        .iter()
        .take(8)
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The objects of [`MANIFEST`], each annotated with [`manifest_digest`].
///
/// Errors: only if the shipped manifest does not parse, which a unit test rules out.
pub fn objects() -> Result<Vec<DynamicObject>> {
    let digest = manifest_digest();
    serde_yaml::Deserializer::from_str(MANIFEST)
        .map(|doc| {
            let mut obj = DynamicObject::deserialize(doc)
                .map_err(|e| Error::Config(format!("guard/guard.yaml does not parse: {e}")))?;
            obj.annotations_mut()
                .insert(DIGEST_ANNOTATION.to_owned(), digest.clone());
            Ok(obj)
        })
        .collect()
}

fn resource_of(obj: &DynamicObject) -> Result<ApiResource> {
    let types = obj
        .types
        .as_ref()
        .ok_or_else(|| Error::Config(format!("guard object {} has no kind", obj.name_any())))?;
    let (group, version) = types
        .api_version
        .split_once('/')
        .unwrap_or(("", types.api_version.as_str()));
    let plural = match types.kind.as_str() {
        "ValidatingAdmissionPolicy" => "validatingadmissionpolicies",
        "ValidatingAdmissionPolicyBinding" => "validatingadmissionpolicybindings",
        "ClusterRole" => "clusterroles",
        "ClusterRoleBinding" => "clusterrolebindings",
        other => {
            return Err(Error::Config(format!(
                "guard object of unknown kind {other}"
            )));
        }
    };
    Ok(ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(group, version, &types.kind),
        plural,
    ))
}

/// How far the cluster's guard is from the shipped one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, TS)]
#[serde(rename_all = "camelCase")]
#[ts(export)]
pub enum GuardState {
    /// Every object is there, from this version's manifest.
    Installed,
    /// Every object is there, some from another version's manifest.
    Outdated,
    /// Some objects are missing: the rules are not (all) enforced.
    Partial,
    /// None of it is installed: only RBAC protects claims.
    Absent,
    /// The guard's objects could not be read (no permission, or an error).
    Unknown,
}

/// One object of the guard on the cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, TS)]
#[serde(rename_all = "camelCase")]
#[ts(export)]
pub struct GuardObject {
    /// Its kind.
    pub kind: String,
    /// Its name.
    pub name: String,
    /// Whether the cluster has it.
    pub present: bool,
    /// Whether it came from this version's manifest.
    pub current: bool,
}

/// Whether the cluster enforces the claim rules itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, TS)]
#[serde(rename_all = "camelCase")]
#[ts(export)]
pub struct GuardStatus {
    /// The verdict.
    pub state: GuardState,
    /// One sentence saying what that means and what to do.
    pub summary: String,
    /// Each object, as found (empty when they could not be read).
    pub objects: Vec<GuardObject>,
}

impl GuardStatus {
    /// Whether the policies are in force (installed, possibly from another version).
    pub fn enforced(&self) -> bool {
        matches!(self.state, GuardState::Installed | GuardState::Outdated)
    }
}

/// Reads the guard's objects and compares them with the shipped manifest. Every signed-in user
/// may read them once the guard is installed (it grants `get` on exactly these objects), so a
/// 403 means it is not installed, or an older cluster role is in the way.
///
/// Errors: only when the cluster cannot be reached; a 403 gives [`GuardState::Unknown`].
pub async fn status(client: &Client) -> Result<GuardStatus> {
    let digest = manifest_digest();
    let mut objects = Vec::new();
    let mut forbidden = None;
    for obj in objects_to_check()? {
        let resource = resource_of(&obj)?;
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
        let name = obj.name_any();
        match api.get_opt(&name).await {
            Ok(found) => objects.push(GuardObject {
                kind: resource.kind.clone(),
                present: found.is_some(),
                current: found.is_some_and(|f| {
                    f.annotations().get(DIGEST_ANNOTATION).map(String::as_str)
                        == Some(digest.as_str())
                }),
                name,
            }),
            Err(e) if is_status(&e, 403) => {
                forbidden = Some(crate::error::describe(&e));
                break;
            }
            Err(e) => return Err(Error::kube(format!("read {} {name}", resource.kind), e)),
        }
    }
    if let Some(why) = forbidden {
        return Ok(GuardStatus {
            state: GuardState::Unknown,
            summary: format!(
                "cannot tell whether the Corral VDI guard is installed ({why}); with it \
                 installed every signed-in user may read it"
            ),
            objects: Vec::new(),
        });
    }
    let present = objects.iter().filter(|o| o.present).count();
    let (state, summary) = if present == 0 {
        (
            GuardState::Absent,
            "the Corral VDI guard is not installed: claim rules are enforced by this client \
             only, and anyone RBAC allows can change Leases and labels with kubectl; an \
             administrator installs it with `corral-vdi guard install`"
                .to_owned(),
        )
    } else if present < objects.len() {
        let missing: Vec<String> = objects
            .iter()
            .filter(|o| !o.present)
            .map(|o| format!("{} {}", o.kind, o.name))
            .collect();
        (
            GuardState::Partial,
            format!(
                "the Corral VDI guard is incomplete (missing {}): run `corral-vdi guard install`",
                missing.join(", ")
            ),
        )
    } else if objects.iter().all(|o| o.current) {
        (
            GuardState::Installed,
            "the Corral VDI guard is installed: the API server itself enforces the claim rules"
                .to_owned(),
        )
    } else {
        (
            GuardState::Outdated,
            "the Corral VDI guard is installed from another version: run `corral-vdi guard \
             install` to bring it up to date"
                .to_owned(),
        )
    };
    Ok(GuardStatus {
        state,
        summary,
        objects,
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

/// Installs (or updates) the guard: server-side apply of every object of [`MANIFEST`].
///
/// Errors: 403 when the caller may not create cluster-scoped admission policies and RBAC
/// objects (a cluster administrator's job); the API server's refusal of a policy (e.g. an API
/// server older than 1.34 that lacks a CEL function) names the expression.
pub async fn install(client: &Client) -> Result<GuardStatus> {
    for obj in objects()? {
        let resource = resource_of(&obj)?;
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
        let name = obj.name_any();
        api.patch(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&obj),
        )
        .await
        .map_err(|e| match &e {
            kube::Error::Api(s) if s.code == 403 => Error::rejected(
                ErrorKind::Forbidden,
                format!(
                    "you may not install the Corral VDI guard: {} {name}: {}",
                    resource.kind, s.message
                ),
                "installing it takes a cluster administrator (it creates cluster-wide admission \
                 policies and RBAC objects)",
            ),
            _ => Error::kube(format!("apply {} {name}", resource.kind), e),
        })?;
    }
    // Wait (briefly) until the API server has compiled the policies: a policy's status says so.
    let policies: Api<ValidatingAdmissionPolicy> = Api::all(client.clone());
    for name in [LEASE_POLICY, MEMBER_POLICY] {
        for _ in 0..50 {
            let policy = policies
                .get(name)
                .await
                .map_err(|e| Error::kube(format!("read ValidatingAdmissionPolicy {name}"), e))?;
            let observed = policy
                .status
                .as_ref()
                .and_then(|s| s.observed_generation)
                .unwrap_or(0);
            if observed >= policy.metadata.generation.unwrap_or(1) {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }
    status(client).await
}

/// Removes every object of the guard; those already gone are skipped. Returns what was deleted.
///
/// Errors: 403 for callers who may not delete them.
pub async fn uninstall(client: &Client) -> Result<Vec<String>> {
    let mut deleted = Vec::new();
    for obj in objects()?.into_iter().rev() {
        let resource = resource_of(&obj)?;
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
        let name = obj.name_any();
        match api.delete(&name, &DeleteParams::default()).await {
            Ok(_) => deleted.push(format!("{} {name}", resource.kind)),
            Err(e) if is_status(&e, 404) => {}
            Err(e) => return Err(Error::kube(format!("delete {} {name}", resource.kind), e)),
        }
    }
    Ok(deleted)
}

/// Whether an API error is the guard's denial.
pub fn is_denial(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(s) if s.code == 403 && s.message.contains(DENIAL_PREFIX))
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert!(MANIFEST.contains(crate::identity::ADMIN_GROUP));
        assert!(MANIFEST.contains(DENIAL_PREFIX));
    }
}
