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
//! `corral.dev/vdi-member`, and VMs labelled `corral.dev/vdi-pool` (pool members), on
//! everyone but administrators ([`crate::labels::ADMIN_GROUP`]):
//! - a Lease with a holder is updated or deleted only by its holder; so a stale Lease is
//!   recovered by an administrator;
//! - a Lease is created, or handed on, naming the caller;
//! - a Lease's `leaseDurationSeconds` is 1..=[`crate::validate::MAX_LEASE_SECONDS`] (required
//!   when it names a holder), and its `acquireTime`/`renewTime` are micro-times
//!   (`YYYY-MM-DDTHH:MM:SS.ffffffZ`) before the year 9000, so that jiff (whose range ends at
//!   9999-12-30T22:00Z) reads them and adds a claim's duration to them;
//! - the assigned-to label is set only to the caller's own encoded identity, and removed or
//!   changed only by that identity; the claimed-at annotation is set only beside the caller's
//!   own label, and removed only by whoever may remove the label;
//! - only an administrator adds a VM to a pool or moves it out of one;
//! - nothing else of a member changes: its other labels and annotations, `spec` (run strategy,
//!   template), finalizers and owner references, nor is it deleted; KubeVirt's virt-api and
//!   virt-controller (namespaces `kubevirt`, `openshift-cnv`) and the controller manager's
//!   garbage collector and namespace controller are trusted with these (virt-api applies the
//!   start/stop subresources by changing the run strategy), never with the claim labels.

use k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicy;
use kube::api::{Api, DeleteParams, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Client, ResourceExt};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::error::{Error, ErrorKind, Result, is_status};

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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, specta::Type)]
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, specta::Type)]
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, specta::Type)]
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
/// ([`spec_differences`]). Every signed-in user may read them once the guard is installed (it
/// grants `get` on exactly these objects), so a 403 means it is not installed, or an older
/// cluster role is in the way.
///
/// Errors: only when the cluster cannot be reached; a 403 gives [`GuardState::Unknown`].
pub async fn status(client: &Client) -> Result<GuardStatus> {
    let digest = manifest_digest();
    let mut objects = Vec::new();
    let mut differences = Vec::new();
    let mut from_another_version = false;
    let mut forbidden = None;
    for shipped in objects_to_check()? {
        let resource = resource_of(&shipped)?;
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
        let name = shipped.name_any();
        match api.get_opt(&name).await {
            Ok(found) => {
                let current = found.as_ref().is_some_and(|live| {
                    let found = spec_differences(&shipped.data["spec"], &live.data["spec"]);
                    if !found.is_empty()
                        && live.annotations().get(DIGEST_ANNOTATION) != Some(&digest)
                    {
                        from_another_version = true;
                    }
                    let what = if resource.kind.ends_with("Binding") {
                        "binding"
                    } else {
                        "policy"
                    };
                    differences.extend(found.iter().map(|d| format!("{what} {name}: {d}")));
                    found.is_empty()
                });
                objects.push(GuardObject {
                    kind: resource.kind.clone(),
                    present: found.is_some(),
                    current,
                    name,
                });
            }
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
    } else if differences.is_empty() {
        (
            GuardState::Installed,
            "the Corral VDI guard is installed: the API server itself enforces the claim rules"
                .to_owned(),
        )
    } else if from_another_version {
        (
            GuardState::Outdated,
            format!(
                "the Corral VDI guard is installed from another version ({}): run `corral-vdi \
                 guard install` to bring it up to date",
                differences.join("; ")
            ),
        )
    } else {
        (
            GuardState::Outdated,
            format!(
                "the Corral VDI guard was changed on the cluster, so the API server may not \
                 enforce every claim rule ({}): run `corral-vdi guard install` to restore it",
                differences.join("; ")
            ),
        )
    };
    Ok(GuardStatus {
        state,
        summary,
        objects,
    })
}

/// Fields the shipped manifest leaves out that the API server fills in, with their defaults
/// (Kubernetes `pkg/apis/admissionregistration/v1/defaults.go`: `matchPolicy` of match
/// resources, `scope` of resource rules; empty selectors are empty values).
const SERVER_DEFAULTS: &[(&str, &str)] = &[("matchPolicy", "Equivalent"), ("scope", "*")];

/// Longest value a difference quotes; a longer one (an expression) is said to differ.
const QUOTED_CHARS: usize = 60;

/// How a guard object's `spec` on the cluster (`live`) differs from the shipped one, each
/// difference a phrase naming the field by its path: `validationActions is [Warn], this version
/// ships [Deny]`, `validations[1].expression differs from this version's`, `matchResources is
/// set, this version ships none`. A field the shipped spec leaves out counts unless the cluster
/// has it empty or at the API server's default ([`SERVER_DEFAULTS`]), so a binding narrowed by
/// hand (say, by a namespace selector) differs too. Empty when they match.
pub fn spec_differences(shipped: &Value, live: &Value) -> Vec<String> {
    let mut found = Vec::new();
    differ("", shipped, live, &mut found);
    found
}

fn differ(path: &str, shipped: &Value, live: &Value, found: &mut Vec<String>) {
    let field = |key: &str| {
        if path.is_empty() {
            key.to_owned()
        } else {
            format!("{path}.{key}")
        }
    };
    match (shipped, live) {
        (Value::Object(ours), Value::Object(theirs)) => {
            for (key, value) in ours {
                differ(
                    &field(key),
                    value,
                    theirs.get(key).unwrap_or(&Value::Null),
                    found,
                );
            }
            for (key, value) in theirs {
                if !ours.contains_key(key) && !defaulted(key, value) {
                    differ(&field(key), &Value::Null, value, found);
                }
            }
        }
        (Value::Array(ours), Value::Array(theirs))
            if ours.len() == theirs.len() && !ours.iter().all(is_scalar) =>
        {
            for (i, (ours, theirs)) in ours.iter().zip(theirs).enumerate() {
                differ(&format!("{path}[{i}]"), ours, theirs, found);
            }
        }
        (Value::Array(ours), Value::Array(theirs)) if !ours.iter().all(is_scalar) => {
            found.push(format!(
                "{path} has {} entries, this version ships {}",
                theirs.len(),
                ours.len()
            ))
        }
        _ if shipped == live => {}
        _ => found.push(match (quoted(live), quoted(shipped)) {
            (_, Some(ours)) if live.is_null() => {
                format!("{path} is not set, this version ships {ours}")
            }
            _ if live.is_null() => format!("{path} is not set"),
            (None, _) if shipped.is_null() => format!("{path} is set, this version ships none"),
            (Some(theirs), Some(ours)) => format!("{path} is {theirs}, this version ships {ours}"),
            _ => format!("{path} differs from this version's"),
        }),
    }
}

fn is_scalar(value: &Value) -> bool {
    !matches!(value, Value::Array(_) | Value::Object(_))
}

/// Whether field `key` of a live spec holds nothing but what the API server fills in: an empty
/// value, a [`SERVER_DEFAULTS`] entry, or an object of only those (`matchResources` defaulted
/// to an empty selector and `matchPolicy: Equivalent`).
fn defaulted(key: &str, value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::String(s) => s.is_empty() || SERVER_DEFAULTS.contains(&(key, s.as_str())),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.iter().all(|(k, v)| defaulted(k, v)),
        _ => false,
    }
}

/// A value as a difference quotes it (`none`, `Fail`, `[Deny, Warn]`); `None` when it is too
/// long or not a scalar or a list of scalars.
fn quoted(value: &Value) -> Option<String> {
    let text = match value {
        Value::Null => "none".to_owned(),
        Value::String(s) => s.clone(),
        Value::Array(items) if items.iter().all(is_scalar) => format!(
            "[{}]",
            items
                .iter()
                .map(|i| i.as_str().map_or_else(|| i.to_string(), str::to_owned))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Value::Object(_) | Value::Array(_) => return None,
        other => other.to_string(),
    };
    (text.chars().count() <= QUOTED_CHARS && !text.contains('\n')).then_some(text)
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
/// and annotations others put on the objects stay.
///
/// Errors: 403 when the caller may not create cluster-scoped admission policies and RBAC
/// objects (a cluster administrator's job); the API server's refusal of a policy (e.g. an API
/// server older than 1.34 that lacks a CEL function) names the expression.
pub async fn install(client: &Client) -> Result<GuardStatus> {
    let params = PostParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..Default::default()
    };
    for obj in objects()? {
        let resource = resource_of(&obj)?;
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
        let name = obj.name_any();
        let failed = |e: kube::Error| match &e {
            kube::Error::Api(s) if s.code == 403 => Error::rejected(
                ErrorKind::Forbidden,
                format!(
                    "you may not install the Corral VDI guard: {} {name}: {}",
                    resource.kind, s.message
                ),
                "installing it takes a cluster administrator (it creates cluster-wide admission \
                 policies and RBAC objects)",
            ),
            _ => Error::kube(format!("write {} {name}", resource.kind), e),
        };
        for attempt in 1.. {
            let written = match api.get_opt(&name).await.map_err(failed)? {
                None => api.create(&params, &obj).await,
                Some(live) => api.replace(&name, &params, &replacement(&obj, &live)).await,
            };
            match written {
                Ok(_) => break,
                // Someone else wrote it meanwhile (another install): read it again.
                Err(e) if attempt < 5 && is_status(&e, 409) => {}
                Err(e) => return Err(failed(e)),
            }
        }
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

/// `shipped` as the replacement of `live`: with its resourceVersion (the precondition), and the
/// labels and annotations others put on it beside the manifest's.
fn replacement(shipped: &DynamicObject, live: &DynamicObject) -> DynamicObject {
    let mut obj = shipped.clone();
    obj.metadata.resource_version = live.resource_version();
    for (key, value) in live.labels() {
        obj.labels_mut()
            .entry(key.clone())
            .or_insert_with(|| value.clone());
    }
    for (key, value) in live.annotations() {
        obj.annotations_mut()
            .entry(key.clone())
            .or_insert_with(|| value.clone());
    }
    obj
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
        assert!(MANIFEST.contains(crate::labels::ADMIN_GROUP));
        assert!(MANIFEST.contains(crate::labels::DENIAL_PREFIX));
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
