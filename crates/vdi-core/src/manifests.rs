//! Manifests shipped in the repository and compiled in (the guard's `guard/guard.yaml`, the
//! broker's `broker/*.yaml`): their objects annotated with the digest of the version they came
//! from, installed by creating or replacing each whole, compared with the cluster's field by
//! field, and removed. [`crate::guard`] and [`crate::broker`] say what their own objects mean.
//!
//! A bottom module: it imports nothing of the crate but [`crate::error`].

use k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicy;
use kube::api::{Api, DeleteParams, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Client, ResourceExt};
use serde::Deserialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::error::{Error, ErrorKind, Result, describe, is_status};
use crate::names::BROKER_IMAGE_ANNOTATION;

/// A set of manifests shipped with this version.
#[derive(Debug, Clone, Copy)]
pub struct Manifest {
    /// What it is, in messages ("the Corral VDI guard").
    pub what: &'static str,
    /// Its files, in the order they are installed: (path in the repository, text).
    pub files: &'static [(&'static str, &'static str)],
    /// Annotation carrying [`Manifest::digest`] on every object installed.
    pub digest_annotation: &'static str,
    /// Field manager of [`Manifest::install`]'s writes.
    pub field_manager: &'static str,
    /// Why installing takes an administrator: the fix of a 403 ("it creates cluster-wide
    /// admission policies and RBAC objects").
    pub needs: &'static str,
    /// Kinds [`Manifest::uninstall`] leaves in place (a Namespace: deleting one is asynchronous,
    /// and an install right after would find it terminating).
    pub keeps: &'static [&'static str],
}

/// How the cluster's copy of a manifest compares with the shipped one ([`Manifest::compare`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Comparison {
    /// The objects could not be read: the API server's refusal (403), described.
    Forbidden(String),
    /// Each object compared.
    Read(Compared),
}

/// The objects of a manifest as found on the cluster.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Compared {
    /// Each object: (kind, name, present, current).
    pub objects: Vec<Found>,
    /// Every difference, as "`<what>` `<name>`: `<difference>`" (see [`spec_differences`]).
    pub differences: Vec<String>,
    /// Whether a differing object carries another version's digest (installed by another
    /// version rather than edited on the cluster).
    pub from_another_version: bool,
}

/// One shipped object on the cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    /// Its kind.
    pub kind: String,
    /// Its name.
    pub name: String,
    /// Whether the cluster has it.
    pub present: bool,
    /// Whether it is as this version's manifest has it.
    pub current: bool,
}

/// What a [`Compared`] amounts to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Every object there, as shipped.
    Installed,
    /// Every object there, some edited on the cluster.
    Changed,
    /// Every object there, some from another version.
    AnotherVersion,
    /// Some objects missing (named by [`Compared::missing`]).
    Partial,
    /// None there.
    Absent,
}

impl Compared {
    /// The verdict.
    pub fn verdict(&self) -> Verdict {
        let present = self.objects.iter().filter(|o| o.present).count();
        if present == 0 {
            Verdict::Absent
        } else if present < self.objects.len() {
            Verdict::Partial
        } else if self.differences.is_empty() {
            Verdict::Installed
        } else if self.from_another_version {
            Verdict::AnotherVersion
        } else {
            Verdict::Changed
        }
    }

    /// The objects missing, as "`<kind>` `<name>`".
    pub fn missing(&self) -> Vec<String> {
        self.objects
            .iter()
            .filter(|o| !o.present)
            .map(|o| format!("{} {}", o.kind, o.name))
            .collect()
    }
}

impl Manifest {
    /// First 16 hex digits of the SHA-256 of the files' texts, in order: which version an
    /// object came from.
    pub fn digest(&self) -> String {
        let mut hash = Sha256::new();
        for (_, text) in self.files {
            hash.update(text.as_bytes());
        }
        hash.finalize()
            .iter()
            .take(8)
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    /// The objects of every file, in order, each annotated with [`Manifest::digest`].
    ///
    /// Errors: only if a shipped file does not parse, which the unit tests rule out.
    pub fn objects(&self) -> Result<Vec<DynamicObject>> {
        let digest = self.digest();
        let mut objects = Vec::new();
        for (path, text) in self.files {
            for doc in serde_yaml::Deserializer::from_str(text) {
                let value = serde_yaml::Value::deserialize(doc)
                    .map_err(|e| Error::Config(format!("{path} does not parse: {e}")))?;
                // A file of comments only (or a trailing `---`) is no object.
                if value.is_null() {
                    continue;
                }
                let mut obj: DynamicObject = serde_yaml::from_value(value)
                    .map_err(|e| Error::Config(format!("{path} does not parse: {e}")))?;
                obj.annotations_mut()
                    .insert(self.digest_annotation.to_owned(), digest.clone());
                objects.push(obj);
            }
        }
        Ok(objects)
    }

    /// Installs (or updates) the manifest: every object is created, or replaced whole (with
    /// the resourceVersion read, retried on a conflict), so that what was edited on the cluster
    /// goes, fields added by hand included (a server-side apply would keep those). Labels and
    /// annotations others put on the objects stay. Returns what was done, one phrase per
    /// object ("created ClusterRole corral-vdi:broker", "replaced …"), once the admission
    /// policies among them are type-checked: their status's `observedGeneration`, which
    /// kube-controller-manager's ValidatingAdmissionPolicy status controller sets (Kubernetes
    /// `pkg/controller/validatingadmissionpolicystatus`), waited for up to 5 s each since a
    /// cluster may run without that controller. The API server enforces a policy a moment after
    /// it is written: it compiles them at a refresh every second (k8s.io/apiserver
    /// `pkg/admission/plugin/policy/generic/policy_source.go`), and no status says when.
    ///
    /// Errors: 403 when the caller may not write an object (an administrator's job:
    /// [`Manifest::needs`]), naming it; the API server's refusal of an object names it.
    pub async fn install(&self, client: &Client) -> Result<Vec<String>> {
        self.install_objects(client, self.objects()?).await
    }

    /// [`Manifest::install`] of `objects`: this manifest's [`Manifest::objects`] with settings
    /// an administrator chose at install (the broker's image) applied.
    ///
    /// Errors: as [`Manifest::install`].
    pub async fn install_objects(
        &self,
        client: &Client,
        objects: Vec<DynamicObject>,
    ) -> Result<Vec<String>> {
        let params = PostParams {
            field_manager: Some(self.field_manager.to_owned()),
            ..Default::default()
        };
        let mut done = Vec::new();
        for obj in &objects {
            let (api, resource) = api_for(client, obj)?;
            let name = named(&resource, obj);
            let failed = |e: kube::Error| match &e {
                kube::Error::Api(s) if s.code == 403 => Error::rejected(
                    ErrorKind::Forbidden,
                    format!("you may not install {}: {name}: {}", self.what, s.message),
                    format!(
                        "installing it takes a cluster administrator ({})",
                        self.needs
                    ),
                ),
                _ => Error::kube(format!("write {name}"), e),
            };
            for attempt in 1.. {
                let obj_name = obj.name_any();
                let written = match api.get_opt(&obj_name).await.map_err(failed)? {
                    None => api.create(&params, obj).await.map(|_| "created"),
                    Some(live) => api
                        .replace(&obj_name, &params, &replacement(obj, &live))
                        .await
                        .map(|_| "replaced"),
                };
                match written {
                    Ok(how) => {
                        done.push(format!("{how} {name}"));
                        break;
                    }
                    // Someone else wrote it meanwhile (another install): read it again.
                    Err(e) if attempt < 5 && is_status(&e, 409) => {}
                    Err(e) => return Err(failed(e)),
                }
            }
        }
        // Wait (briefly) until the admission policies written are type-checked, so that a
        // policy the API server cannot compile is not left unnoticed for long.
        let policies: Api<ValidatingAdmissionPolicy> = Api::all(client.clone());
        for obj in &objects {
            if resource_of(obj)?.kind != "ValidatingAdmissionPolicy" {
                continue;
            }
            let name = obj.name_any();
            for _ in 0..50 {
                let policy = policies.get(&name).await.map_err(|e| {
                    Error::kube(format!("read ValidatingAdmissionPolicy {name}"), e)
                })?;
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
        Ok(done)
    }

    /// Removes every object of the manifest but those of the kinds it [`keeps`](Manifest::keeps),
    /// last first; those already gone are skipped. Returns what was deleted ("`<kind>`
    /// `<name>`", with its namespace if it has one).
    ///
    /// Errors: 403 for callers who may not delete them.
    pub async fn uninstall(&self, client: &Client) -> Result<Vec<String>> {
        let mut deleted = Vec::new();
        for obj in self.objects()?.into_iter().rev() {
            let (api, resource) = api_for(client, &obj)?;
            if self.keeps.contains(&resource.kind.as_str()) {
                continue;
            }
            let name = named(&resource, &obj);
            match api.delete(&obj.name_any(), &DeleteParams::default()).await {
                Ok(_) => deleted.push(name),
                Err(e) if is_status(&e, 404) => {}
                Err(e) => return Err(Error::kube(format!("delete {name}"), e)),
            }
        }
        Ok(deleted)
    }

    /// Reads each of `shipped` (objects of this manifest) from the cluster and compares it with
    /// the manifest ([`compared_part`], [`spec_differences`]); `what_of(kind)` names an
    /// object's sort in a difference ("policy", "binding"). Stops at the first 403.
    ///
    /// Errors: only when the cluster cannot be reached (or answers with another error).
    pub async fn compare(
        &self,
        client: &Client,
        shipped: &[DynamicObject],
        what_of: impl Fn(&str) -> String,
    ) -> Result<Comparison> {
        let digest = self.digest();
        let mut compared = Compared::default();
        for shipped in shipped {
            let (api, resource) = api_for(client, shipped)?;
            let name = shipped.name_any();
            let live = match api.get_opt(&name).await {
                Ok(live) => live,
                Err(e) if is_status(&e, 403) => return Ok(Comparison::Forbidden(describe(&e))),
                Err(e) => {
                    return Err(Error::kube(
                        format!("read {}", named(&resource, shipped)),
                        e,
                    ));
                }
            };
            let current = live.as_ref().is_some_and(|live| {
                let found = compared_part(&resource.kind, shipped, live);
                if !found.is_empty()
                    && live.annotations().get(self.digest_annotation) != Some(&digest)
                {
                    compared.from_another_version = true;
                }
                let what = what_of(&resource.kind);
                compared
                    .differences
                    .extend(found.iter().map(|d| format!("{what} {name}: {d}")));
                found.is_empty()
            });
            compared.objects.push(Found {
                kind: resource.kind.clone(),
                present: live.is_some(),
                current,
                name,
            });
        }
        Ok(Comparison::Read(compared))
    }
}

/// "`<kind>` `<name>`", with " in namespace "`<ns>`"" for a namespaced object.
fn named(resource: &ApiResource, obj: &DynamicObject) -> String {
    match obj.namespace() {
        Some(ns) => format!("{} {} in namespace \"{ns}\"", resource.kind, obj.name_any()),
        None => format!("{} {}", resource.kind, obj.name_any()),
    }
}

/// Kinds a manifest may hold, with their plural resource names.
const KINDS: &[(&str, &str)] = &[
    ("ValidatingAdmissionPolicy", "validatingadmissionpolicies"),
    (
        "ValidatingAdmissionPolicyBinding",
        "validatingadmissionpolicybindings",
    ),
    ("ClusterRole", "clusterroles"),
    ("ClusterRoleBinding", "clusterrolebindings"),
    ("Role", "roles"),
    ("RoleBinding", "rolebindings"),
    ("Namespace", "namespaces"),
    ("ServiceAccount", "serviceaccounts"),
    ("Deployment", "deployments"),
    ("CustomResourceDefinition", "customresourcedefinitions"),
];

/// The API resource of a manifest's object.
///
/// Errors: the object has no kind, or one outside [`KINDS`] (a unit test rules both out for
/// the shipped manifests).
pub fn resource_of(obj: &DynamicObject) -> Result<ApiResource> {
    let types = obj
        .types
        .as_ref()
        .ok_or_else(|| Error::Config(format!("manifest object {} has no kind", obj.name_any())))?;
    let (group, version) = types
        .api_version
        .split_once('/')
        .unwrap_or(("", types.api_version.as_str()));
    let plural = KINDS
        .iter()
        .find(|(kind, _)| *kind == types.kind)
        .map(|(_, plural)| *plural)
        .ok_or_else(|| {
            Error::Config(format!(
                "manifest object {} of unknown kind {}",
                obj.name_any(),
                types.kind
            ))
        })?;
    Ok(ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(group, version, &types.kind),
        plural,
    ))
}

/// The API of `obj`'s resource: in its namespace when it has one, else cluster-wide.
fn api_for(client: &Client, obj: &DynamicObject) -> Result<(Api<DynamicObject>, ApiResource)> {
    let resource = resource_of(obj)?;
    let api = match obj.namespace() {
        Some(ns) => Api::namespaced_with(client.clone(), &ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    };
    Ok((api, resource))
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

/// How the part of a `kind` object that says what it does differs between `shipped` and
/// `live`: an admission policy's or binding's `spec` field by field ([`spec_differences`]),
/// an RBAC object's `rules`, `roleRef` and `subjects` likewise; a Deployment's `spec` and a
/// Namespace's only in the fields the manifest sets (the API server fills in many defaults of
/// its own there: a replica count or image changed by hand counts, a defaulted probe period
/// does not); a ServiceAccount's not at all.
pub fn compared_part(kind: &str, shipped: &DynamicObject, live: &DynamicObject) -> Vec<String> {
    let mut found = Vec::new();
    match kind {
        "ServiceAccount" => {}
        "Deployment" => {
            // An image chosen at install of this version (`broker install --image`, the
            // chart's `image`) is named in an annotation only administrators write: no change
            // on the cluster. Installed from another version (its digest), it is that
            // version's image: a difference.
            let image = "/spec/template/spec/containers/0/image";
            let chosen = live.annotations().get(BROKER_IMAGE_ANNOTATION);
            let this_version = shipped
                .annotations()
                .iter()
                .all(|(key, value)| live.annotations().get(key) == Some(value));
            let mut shipped_spec = shipped.data["spec"].clone();
            if let Some(chosen) = chosen
                && this_version
                && live.data.pointer(image).and_then(Value::as_str) == Some(chosen)
            {
                shipped_spec["template"]["spec"]["containers"][0]["image"] = chosen.clone().into();
            }
            differ("", &shipped_spec, &live.data["spec"], false, &mut found)
        }
        "Namespace" => differ(
            "",
            &shipped.data["spec"],
            &live.data["spec"],
            false,
            &mut found,
        ),
        _ if shipped.data.get("spec").is_some() => differ(
            "",
            &shipped.data["spec"],
            &live.data["spec"],
            true,
            &mut found,
        ),
        // Kinds without a spec (RBAC objects): the object's own fields, metadata aside.
        _ => differ("", &shipped.data, &live.data, true, &mut found),
    }
    found
}

/// Fields the shipped manifests leave out that the API server fills in, with their defaults
/// (Kubernetes `pkg/apis/admissionregistration/v1/defaults.go`: `matchPolicy` of match
/// resources, `scope` of resource rules; empty selectors are empty values).
const SERVER_DEFAULTS: &[(&str, &str)] = &[("matchPolicy", "Equivalent"), ("scope", "*")];

/// Longest value a difference quotes; a longer one (an expression) is said to differ.
const QUOTED_CHARS: usize = 60;

/// How an object's `spec` on the cluster (`live`) differs from the shipped one, each
/// difference a phrase naming the field by its path: `validationActions is [Warn], this version
/// ships [Deny]`, `validations[1].expression differs from this version's`, `matchResources is
/// set, this version ships none`. A field the shipped spec leaves out counts unless the cluster
/// has it empty or at the API server's default ([`SERVER_DEFAULTS`]), so a binding narrowed by
/// hand (say, by a namespace selector) differs too. Empty when they match.
pub fn spec_differences(shipped: &Value, live: &Value) -> Vec<String> {
    let mut found = Vec::new();
    differ("", shipped, live, true, &mut found);
    found
}

/// Adds to `found` how `live` differs from `shipped` at `path`; fields the shipped value leaves
/// out count only when `strict`.
fn differ(path: &str, shipped: &Value, live: &Value, strict: bool, found: &mut Vec<String>) {
    let field = |key: &str| {
        if path.is_empty() {
            key.to_owned()
        } else {
            format!("{path}.{key}")
        }
    };
    match (shipped, live) {
        (Value::Null, _) if !strict => {}
        (Value::Object(ours), Value::Object(theirs)) => {
            for (key, value) in ours {
                differ(
                    &field(key),
                    value,
                    theirs.get(key).unwrap_or(&Value::Null),
                    strict,
                    found,
                );
            }
            for (key, value) in theirs {
                if strict && !ours.contains_key(key) && !defaulted(key, value) {
                    differ(&field(key), &Value::Null, value, strict, found);
                }
            }
        }
        (Value::Array(ours), Value::Array(theirs))
            if ours.len() == theirs.len() && !ours.iter().all(is_scalar) =>
        {
            for (i, (ours, theirs)) in ours.iter().zip(theirs).enumerate() {
                differ(&format!("{path}[{i}]"), ours, theirs, strict, found);
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
