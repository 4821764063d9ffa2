//! The broker's manifests (`broker/broker.yaml` and `broker/members-policy.yaml`), compiled
//! in: installed, compared and removed through [`crate::manifests`] as the guard's are, plus
//! what only the broker leaves behind (its per-claim grants, its leader Lease).

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams};
use kube::{Client, ResourceExt};

use super::FIELD_MANAGER;
use crate::error::{Error, Result, is_status};
use crate::manifests::{Comparison, Found, Manifest, Verdict};
use crate::names::{BROKER_IMAGE_ANNOTATION, BROKER_NAME, BROKER_NAMESPACE, MANAGED_BY_LABEL};

/// The broker's manifest, as shipped (`broker/broker.yaml`): its namespace, ServiceAccount,
/// ClusterRole `corral-vdi:broker` and binding, the status reader Role
/// ([`super::STATUS_ROLE`]) and the
/// Deployment of two replicas.
pub const MANIFEST: &str = include_str!("../../../../broker/broker.yaml");
/// The admission policy installed with the broker (`broker/members-policy.yaml`): with a broker
/// only it, administrators and KubeVirt change pool members' claim label and annotations.
pub const MEMBERS_POLICY: &str = include_str!("../../../../broker/members-policy.yaml");
/// Annotation carrying the digest of the manifests an object was installed from.
pub const DIGEST_ANNOTATION: &str = "corral.dev/broker-digest";
/// The value of [`MANAGED_BY_LABEL`] on everything the broker makes: its per-claim grants.
pub const MANAGED_BY: &str = BROKER_NAME;

/// API group of every right a per-claim grant gives.
pub const GRANT_API_GROUP: &str = "subresources.kubevirt.io";
/// The rights a per-claim grant (Role `corral-vdi-claim-<member>`) gives the holder, each
/// limited by `resourceNames: [<member>]`, as (resource, verb) of [`GRANT_API_GROUP`]:
/// KubeVirt's VMI stream subresources (`get`, the verb virt-api's websocket upgrades are
/// authorized as) and the power subresources (`update`, as virtctl's PUTs are; `softreboot` is
/// a VMI subresource). The broker's ClusterRole holds each of them, which RBAC's escalation
/// check demands of whoever creates such a Role.
pub const GRANTED_RIGHTS: &[(&str, &str)] = &[
    ("virtualmachineinstances/vnc", "get"),
    ("virtualmachineinstances/vnc/screenshot", "get"),
    ("virtualmachineinstances/portforward", "get"),
    ("virtualmachineinstances/usbredir", "get"),
    ("virtualmachineinstances/console", "get"),
    ("virtualmachines/start", "update"),
    ("virtualmachines/stop", "update"),
    ("virtualmachines/restart", "update"),
    ("virtualmachineinstances/softreboot", "update"),
];

/// The broker's manifests as a [`Manifest`].
const BROKER: Manifest = Manifest {
    what: "the Corral VDI broker",
    files: &[
        ("broker/desktoppool-crd.yaml", crate::policy::CRD),
        ("broker/broker.yaml", MANIFEST),
        ("broker/members-policy.yaml", MEMBERS_POLICY),
    ],
    digest_annotation: DIGEST_ANNOTATION,
    field_manager: FIELD_MANAGER,
    needs: "it creates a namespace, cluster-wide RBAC objects, a Deployment and an admission \
            policy",
    keeps: &["Namespace", "CustomResourceDefinition"],
};

/// First 16 hex digits of the SHA-256 of both manifests: which version an object came from.
pub fn manifest_digest() -> String {
    BROKER.digest()
}

/// The objects of both manifests, in install order, each annotated with [`manifest_digest`].
///
/// Errors: only if a shipped manifest does not parse, which a unit test rules out.
pub fn objects() -> Result<Vec<DynamicObject>> {
    BROKER.objects()
}

/// The image broker/broker.yaml's Deployment runs: `ghcr.io/corral-vdi/corral-vdi-broker:`
/// and this version.
///
/// Errors: only if the shipped manifest does not parse, which a unit test rules out.
pub fn default_image() -> Result<String> {
    let objects = objects()?;
    let deployment = objects
        .iter()
        .find(|o| o.types.as_ref().is_some_and(|t| t.kind == "Deployment"))
        .ok_or_else(|| Error::Config("broker/broker.yaml has no Deployment".to_owned()))?;
    Ok(
        deployment.data["spec"]["template"]["spec"]["containers"][0]["image"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
    )
}

/// Checks an image reference given at install (`--image`): a registry path with a tag or a
/// digest (`registry.example.com/vdi/corral-vdi-broker:0.1.0`, `…@sha256:<64 hex>`), 1 to 512
/// characters of lowercase letters, digits and `./:@_-`.
///
/// Errors: [`Error::Invalid`] naming the image and what is wrong; nothing is written.
pub fn check_image(image: &str) -> Result<()> {
    let allowed = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || "./:@_-".contains(c);
    let last = image.rsplit('/').next().unwrap_or_default();
    let why = if image.is_empty() || image.len() > 512 {
        "it must have 1 to 512 characters".to_owned()
    } else if let Some(bad) = image.chars().find(|c| !allowed(*c)) {
        format!(
            "it has the character {bad:?}; an image reference has lowercase letters, digits and ./:@_- only"
        )
    } else if let Some((_, digest)) = image.split_once('@') {
        let hex = digest.strip_prefix("sha256:").unwrap_or_default();
        if hex.len() == 64 && hex.chars().all(|c| c.is_ascii_hexdigit()) {
            return Ok(());
        }
        "its digest is not sha256: and 64 hex digits".to_owned()
    } else if !last.contains(':') {
        "it has no tag or digest: pin the version to run".to_owned()
    } else if !image.contains('/')
        && last
            .rsplit(':')
            .next()
            .is_some_and(|t| t.chars().all(|c| c.is_ascii_digit()))
    {
        "it names a registry (host:port) but no repository".to_owned()
    } else {
        return Ok(());
    };
    Err(Error::invalid(
        format!("image \"{image}\": {why}"),
        "name the image with its registry and a tag or digest: \
         registry.example.com/vdi/corral-vdi-broker:0.1.0 or …@sha256:<64 hex digits>",
    ))
}

/// Everything [`install`] writes, in order, as `corral-vdi broker install --print` prints it
/// and broker/chart renders it: the guard's objects ([`crate::guard::objects`]), the broker's
/// ([`objects`]) with its Deployment running `image` (default [`default_image`]; one chosen is
/// named in [`BROKER_IMAGE_ANNOTATION`]), and the RoleBinding that lets the broker act in each of
/// `namespaces` ([`super::namespaces::binding`]).
///
/// Errors: [`Error::Invalid`] for a bad image ([`check_image`]) or namespace.
pub fn install_objects(image: Option<&str>, namespaces: &[String]) -> Result<Vec<DynamicObject>> {
    let mut all = crate::guard::objects()?;
    all.extend(with_image(image)?);
    for ns in namespaces {
        crate::validate::namespace(ns)?;
        let binding = serde_json::to_value(super::namespaces::binding(ns))
            .and_then(|mut v| {
                v["apiVersion"] = "rbac.authorization.k8s.io/v1".into();
                v["kind"] = "RoleBinding".into();
                serde_json::from_value(v)
            })
            .map_err(|e| Error::Config(format!("the broker's RoleBinding in {ns}: {e}")))?;
        all.push(binding);
    }
    Ok(all)
}

/// The broker's own objects ([`objects`]), its Deployment running `image` when one is chosen
/// (and naming it in [`BROKER_IMAGE_ANNOTATION`]).
///
/// Errors: [`Error::Invalid`] for a bad image ([`check_image`]).
fn with_image(image: Option<&str>) -> Result<Vec<DynamicObject>> {
    let mut all = objects()?;
    if let Some(image) = image {
        check_image(image)?;
        for obj in &mut all {
            if obj.types.as_ref().is_some_and(|t| t.kind == "Deployment") {
                obj.data["spec"]["template"]["spec"]["containers"][0]["image"] = image.into();
                obj.annotations_mut()
                    .insert(BROKER_IMAGE_ANNOTATION.to_owned(), image.to_owned());
            }
        }
    }
    Ok(all)
}

/// Installs (or updates) the broker, after the guard ([`crate::guard::install`]: the broker
/// grants nothing on a cluster that does not enforce the claim rules): every object of
/// [`MANIFEST`] and [`MEMBERS_POLICY`] ([`install_objects`], the Deployment running `image`) is
/// created, or replaced whole so that edits made on the cluster go (labels and annotations
/// others added stay). Returns what was done, one phrase per object ("created Deployment
/// corral-vdi-broker in namespace "corral-vdi-system""), once the admission policies are
/// type-checked ([`crate::manifests::Manifest::install`]); the API server enforces them a moment
/// later. The Deployment's replicas then elect a leader ([`super::status`]).
///
/// Errors: [`Error::Rejected`] `Forbidden` for a caller who is not a cluster administrator,
/// naming the first object refused (nothing after it is written; nothing is written at all
/// when the first, the Namespace, is refused).
pub async fn install(client: &Client, image: Option<&str>) -> Result<Vec<String>> {
    // Checked before anything is written.
    let broker = with_image(image)?;
    // The guard first: the broker grants only where the claim rules are enforced
    // (broker `enforcement`), and they are the guard's.
    let guard = crate::guard::install(client).await?;
    let mut done = vec![format!(
        "installed the Corral VDI guard, whose claim rules the broker's grants rest on: {}",
        guard.summary
    )];
    done.extend(BROKER.install_objects(client, broker).await?);
    Ok(done)
}

/// Removes the broker: its RoleBindings in the namespaces it served
/// ([`super::namespaces::SERVE_BINDING`]), its policies, Deployment, RBAC objects and
/// ServiceAccount (the Namespace
/// `corral-vdi-system` stays: deleting one is asynchronous, and an install right after would
/// find it terminating; `kubectl delete namespace corral-vdi-system` removes it; the
/// DesktopPool CustomResourceDefinition stays too, since deleting it deletes every
/// DesktopPool, the administrators' policy), then every
/// Role and RoleBinding the broker made (labelled `app.kubernetes.io/managed-by=corral-vdi-broker`)
/// in every namespace, then its leader Lease, so that [`super::status`] says
/// [`super::BrokerState::Absent`]. Returns what was deleted, one phrase per object. The
/// members' claim labels and the broker's annotations stay: the client-side flow takes over.
///
/// Errors: [`Error::Rejected`] `Forbidden` for callers who may not delete them (a cluster
/// administrator's job: [`Error::for_cluster_admins`]).
pub async fn uninstall(client: &Client) -> Result<Vec<String>> {
    uninstalled(client)
        .await
        .map_err(|e| e.for_cluster_admins("remove the broker"))
}

/// [`uninstall`]'s steps.
async fn uninstalled(client: &Client) -> Result<Vec<String>> {
    // Its RoleBindings in desktop namespaces first: while it is there to see them.
    let mut deleted = super::namespaces::unserve_all(client).await?;
    deleted.extend(BROKER.uninstall(client).await?);
    deleted.extend(delete_grants::<Role>(client).await?);
    deleted.extend(delete_grants::<RoleBinding>(client).await?);
    let lease = Lease {
        metadata: kube::api::ObjectMeta {
            name: Some(BROKER_NAME.to_owned()),
            namespace: Some(BROKER_NAMESPACE.to_owned()),
            ..Default::default()
        },
        ..Default::default()
    };
    deleted.extend(delete_in_namespace(client, &lease).await?);
    Ok(deleted)
}

/// Deletes every `K` (Role or RoleBinding) the broker made, in all namespaces (labelled
/// [`MANAGED_BY_LABEL`]=[`MANAGED_BY`]); returns what was deleted.
async fn delete_grants<K>(client: &Client) -> Result<Vec<String>>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let managed = ListParams::default().labels(&format!("{MANAGED_BY_LABEL}={MANAGED_BY}"));
    let found = Api::<K>::all(client.clone())
        .list(&managed)
        .await
        .map_err(|e| {
            Error::kube(
                format!("list the broker's {}s in all namespaces", K::kind(&())),
                e,
            )
        })?;
    let mut deleted = Vec::new();
    for grant in &found {
        deleted.extend(delete_in_namespace(client, grant).await?);
    }
    Ok(deleted)
}

/// Deletes `obj` (a namespaced object of kind `K`); `None` when it was already gone, else
/// "`<kind>` `<name>` in namespace "`<ns>`"".
async fn delete_in_namespace<K>(client: &Client, obj: &K) -> Result<Option<String>>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let ns = obj.namespace().unwrap_or_default();
    let what = format!("{} {} in namespace \"{ns}\"", K::kind(&()), obj.name_any());
    match Api::<K>::namespaced(client.clone(), &ns)
        .delete(&obj.name_any(), &DeleteParams::default())
        .await
    {
        Ok(_) => Ok(Some(what)),
        Err(e) if is_status(&e, 404) => Ok(None),
        Err(e) => Err(Error::kube(format!("delete {what}"), e)),
    }
}

/// How the cluster's copy of the broker's manifests compares with this version's, for
/// administrators (`corral-vdi broker status`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManifestStatus {
    /// The verdict; `None` when the objects could not be read (ordinary users may not).
    pub verdict: Option<Verdict>,
    /// One sentence saying what that means and what to do.
    pub summary: String,
    /// Each object but the Namespace and the DesktopPool CRD, as found (empty when they could
    /// not be read).
    pub objects: Vec<Found>,
}

/// Reads each of the broker's objects (all but those uninstall leaves: its Namespace and the
/// DesktopPool CustomResourceDefinition, whose deletion would delete every pool's policy) and
/// compares it with this version's manifests field by field
/// ([`crate::manifests::compared_part`]): a ClusterRole with a rule added by hand, a binding
/// to someone else, a Deployment scaled to one replica or running another image, the policy
/// set to warn only.
///
/// Errors: only when the cluster cannot be reached; a 403 gives `verdict: None`.
pub async fn manifest_status(client: &Client) -> Result<ManifestStatus> {
    let shipped: Vec<DynamicObject> = objects()?
        .into_iter()
        .filter(|o| {
            o.types
                .as_ref()
                .is_none_or(|t| !BROKER.keeps.contains(&t.kind.as_str()))
        })
        .collect();
    let compared = match BROKER
        .compare(client, &shipped, |kind| kind.to_owned())
        .await?
    {
        Comparison::Read(compared) => compared,
        Comparison::Forbidden(why) => {
            return Ok(ManifestStatus {
                verdict: None,
                summary: format!(
                    "cannot compare the broker's objects with this version's ({why}): an \
                     administrator may"
                ),
                objects: Vec::new(),
            });
        }
    };
    let verdict = compared.verdict();
    let differences = compared.differences.join("; ");
    let summary = match verdict {
        Verdict::Absent => "the broker's manifests are not installed: an administrator runs \
                            `corral-vdi broker install`"
            .to_owned(),
        Verdict::Partial => format!(
            "the broker's manifests are incomplete (missing {}): run `corral-vdi broker install`",
            compared.missing().join(", ")
        ),
        Verdict::Installed => {
            "the broker's manifests are installed as this version ships them".to_owned()
        }
        Verdict::AnotherVersion => format!(
            "the broker's manifests are installed from another version ({differences}): run \
             `corral-vdi broker install` to bring them up to date"
        ),
        Verdict::Changed => format!(
            "the broker's manifests were changed on the cluster ({differences}): run \
             `corral-vdi broker install` to restore them"
        ),
    };
    Ok(ManifestStatus {
        verdict: Some(verdict),
        summary,
        objects: compared.objects,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifests::resource_of;
    use crate::names::BROKER_USER;
    use serde_json::Value;

    fn find(kind: &str, name: &str) -> DynamicObject {
        objects()
            .unwrap()
            .into_iter()
            .find(|o| o.types.as_ref().unwrap().kind == kind && o.name_any() == name)
            .unwrap_or_else(|| panic!("no {kind} {name} in the broker's manifests"))
    }

    /// The rules of a (Cluster)Role, each as (apiGroup, resource, verb, resourceNames).
    fn rights(role: &DynamicObject) -> Vec<(String, String, String, Value)> {
        let mut out = Vec::new();
        for rule in role.data["rules"].as_array().unwrap() {
            let strings = |key: &str| -> Vec<String> {
                rule[key]
                    .as_array()
                    .map(|a| a.iter().map(|v| v.as_str().unwrap().to_owned()).collect())
                    .unwrap_or_default()
            };
            for group in strings("apiGroups") {
                for resource in strings("resources") {
                    for verb in strings("verbs") {
                        out.push((
                            group.clone(),
                            resource.clone(),
                            verb,
                            rule["resourceNames"].clone(),
                        ));
                    }
                }
            }
        }
        out
    }

    #[test]
    fn every_object_parses_with_a_kind_and_the_digest() {
        let objects = objects().unwrap();
        assert!(objects.len() >= 10, "{} objects", objects.len());
        for obj in &objects {
            let resource = resource_of(obj).unwrap();
            assert_eq!(
                obj.annotations()[DIGEST_ANNOTATION],
                manifest_digest(),
                "{} {}",
                resource.kind,
                obj.name_any()
            );
            assert_eq!(
                obj.labels()
                    .get("app.kubernetes.io/part-of")
                    .map(String::as_str),
                Some("corral-vdi-broker"),
                "{} {}",
                resource.kind,
                obj.name_any()
            );
            // Namespaced kinds sit in the broker's namespace; the rest are cluster-wide.
            let namespaced = matches!(
                resource.kind.as_str(),
                "ServiceAccount" | "Role" | "RoleBinding" | "Deployment"
            );
            assert_eq!(
                obj.namespace().as_deref(),
                namespaced.then_some(BROKER_NAMESPACE),
                "{} {}",
                resource.kind,
                obj.name_any()
            );
        }
        // The policy the guard's helper writes comes with the broker.
        assert!(
            objects
                .iter()
                .any(|o| o.types.as_ref().unwrap().kind == "ValidatingAdmissionPolicy"),
            "broker/members-policy.yaml holds the members' policy"
        );
        assert!(MEMBERS_POLICY.contains(BROKER_USER));
    }

    #[test]
    fn the_members_policy_trusts_the_broker_by_the_names_the_product_uses() {
        for name in [
            crate::names::BROKER_USER,
            crate::names::ASSIGNED_TO_LABEL,
            crate::names::CLAIMED_AT_ANNOTATION,
        ] {
            assert!(
                MEMBERS_POLICY.contains(name),
                "broker/members-policy.yaml names {name}"
            );
        }
    }

    #[test]
    fn the_deployment_runs_two_unprivileged_replicas_of_this_version() {
        let deployment = find("Deployment", BROKER_NAME);
        let spec = &deployment.data["spec"];
        assert_eq!(spec["replicas"], 2);
        let pod = &spec["template"]["spec"];
        assert_eq!(pod["serviceAccountName"], BROKER_NAME);
        assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
        let container = &pod["containers"][0];
        assert_eq!(
            container["image"],
            format!(
                "ghcr.io/corral-vdi/corral-vdi-broker:{}",
                env!("CARGO_PKG_VERSION")
            ),
            "the image's tag is this version"
        );
        assert_eq!(
            container["args"],
            serde_json::json!([
                "--lease-seconds",
                "15",
                "--metrics-port",
                "8080",
                "--health-port",
                "8081"
            ])
        );
        // The probes ask the health port; the metrics port is named for a ServiceMonitor.
        for (probe, path) in [("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")] {
            assert_eq!(container[probe]["httpGet"]["path"], path);
            assert_eq!(container[probe]["httpGet"]["port"], "health");
        }
        assert_eq!(
            container["ports"],
            serde_json::json!([
                { "name": "metrics", "containerPort": 8080 },
                { "name": "health", "containerPort": 8081 }
            ])
        );
        assert_eq!(container["env"][0]["name"], "POD_NAME");
        assert_eq!(
            container["env"][0]["valueFrom"]["fieldRef"]["fieldPath"],
            "metadata.name"
        );
        let security = &container["securityContext"];
        assert_eq!(security["readOnlyRootFilesystem"], true);
        assert_eq!(security["allowPrivilegeEscalation"], false);
        for key in ["requests", "limits"] {
            assert!(
                container["resources"][key]["memory"].is_string(),
                "resources.{key}"
            );
        }
    }

    /// Whether a (Cluster)Role's right writes something or opens a VMI.
    fn writes_or_opens(group: &str, verb: &str) -> bool {
        !["get", "list", "watch"].contains(&verb) || group == GRANT_API_GROUP
    }

    #[test]
    fn what_is_bound_cluster_wide_only_reads() {
        use super::super::namespaces::DESKTOPS_ROLE;
        let bound: Vec<String> = objects()
            .unwrap()
            .iter()
            .filter(|o| o.types.as_ref().unwrap().kind == "ClusterRoleBinding")
            .map(|b| b.data["roleRef"]["name"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(bound, ["corral-vdi:broker"]);
        assert!(!bound.iter().any(|r| r == DESKTOPS_ROLE));
        for role in objects()
            .unwrap()
            .iter()
            .filter(|o| o.types.as_ref().unwrap().kind == "ClusterRole")
            .filter(|o| bound.contains(&o.name_any()))
        {
            for (g, r, v, _) in rights(role) {
                // Its DesktopPools' status is the one write: it says there when it may not act.
                let status = g == "corral.dev" && r == "desktoppools/status";
                // A SubjectAccessReview is a question (whether a holder is entitled), no write.
                let question = g == "authorization.k8s.io" && r == "subjectaccessreviews";
                assert!(
                    status || question || !writes_or_opens(&g, &v),
                    "ClusterRole {} is bound cluster-wide and gives {g} {r} {v}",
                    role.name_any()
                );
            }
        }
    }

    #[test]
    fn the_broker_holds_every_right_a_grant_gives_where_it_acts_only() {
        use super::super::namespaces::DESKTOPS_ROLE;
        let role = find("ClusterRole", DESKTOPS_ROLE);
        let held = rights(&role);
        for (resource, verb) in GRANTED_RIGHTS {
            assert!(
                held.iter().any(|(g, r, v, names)| g == GRANT_API_GROUP
                    && r == resource
                    && v == verb
                    && names.is_null()),
                "the broker must hold {GRANT_API_GROUP} {resource} {verb} where it acts to \
                 grant it"
            );
        }
        // No wildcard, no escalate or bind: it grants only what it holds.
        for role in objects()
            .unwrap()
            .iter()
            .filter(|o| ["ClusterRole", "Role"].contains(&o.types.as_ref().unwrap().kind.as_str()))
        {
            for (group, resource, verb, _) in rights(role) {
                assert!(
                    group != "*" && resource != "*" && verb != "*",
                    "a wildcard: {group} {resource} {verb}"
                );
                assert!(
                    !["escalate", "bind", "impersonate"].contains(&verb.as_str()),
                    "{verb}"
                );
            }
        }
        for name in ["corral-vdi:broker", "corral-vdi:broker-leader"] {
            let kind = if name.ends_with("leader") {
                "RoleBinding"
            } else {
                "ClusterRoleBinding"
            };
            assert_eq!(
                find(kind, name).data["subjects"],
                serde_json::json!([{ "kind": "ServiceAccount", "name": BROKER_NAME,
                                     "namespace": BROKER_NAMESPACE }])
            );
        }
        // In its own namespace it writes its leader Lease by name (a create cannot be named:
        // the policy corral-vdi-broker-writes limits that one).
        for (g, r, v, names) in rights(&find("Role", "corral-vdi:broker-leader")) {
            assert_eq!((g.as_str(), r.as_str()), ("coordination.k8s.io", "leases"));
            assert!(
                v == "create" || names == serde_json::json!([BROKER_NAME]),
                "{v} {names}"
            );
        }
        assert!(MEMBERS_POLICY.contains("name: corral-vdi-broker-writes"));
        // Everyone signed in reads the leader Lease, by name only.
        let reader = find("Role", super::super::STATUS_ROLE);
        assert_eq!(
            rights(&reader),
            ["get", "list", "watch"].map(|v| (
                "coordination.k8s.io".to_owned(),
                "leases".to_owned(),
                v.to_owned(),
                serde_json::json!([BROKER_NAME])
            ))
        );
        let reading = find("RoleBinding", super::super::STATUS_ROLE);
        assert_eq!(reading.data["subjects"][0]["name"], "system:authenticated");
        assert_eq!(reading.data["roleRef"]["name"], super::super::STATUS_ROLE);
    }

    #[test]
    fn an_image_chosen_at_install_is_checked_named_and_no_change() {
        for good in [
            "registry.example.com/vdi/corral-vdi-broker:0.1.0",
            "localhost:5000/broker@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
        ] {
            check_image(good).unwrap();
        }
        for (bad, why) in [
            ("", "1 to 512"),
            ("Registry/broker:1", "character 'R'"),
            ("registry.example.com:5000/broker", "no tag or digest"),
            ("broker:1 --privileged", "character ' '"),
            ("localhost:5000", "no repository"),
            ("registry.example.com/broker@foo", "64 hex digits"),
            ("registry.example.com/broker@sha256:abc", "64 hex digits"),
        ] {
            let refused = check_image(bad).unwrap_err().to_string();
            assert!(refused.contains(why), "{bad}: {refused}");
        }
        let image = "registry.example.com/vdi/corral-vdi-broker:0.1.0";
        let all = install_objects(Some(image), &["team-a".to_owned()]).unwrap();
        let live = all
            .iter()
            .find(|o| o.types.as_ref().unwrap().kind == "Deployment")
            .unwrap();
        assert_eq!(
            live.data["spec"]["template"]["spec"]["containers"][0]["image"],
            image
        );
        assert_eq!(live.annotations()[BROKER_IMAGE_ANNOTATION], image);
        let binding = all.last().unwrap();
        assert_eq!(
            (binding.namespace().as_deref(), binding.name_any().as_str()),
            (Some("team-a"), super::super::namespaces::SERVE_BINDING)
        );
        // Named in the annotation: no difference; changed by hand beside it: one.
        let shipped = find("Deployment", BROKER_NAME);
        assert_eq!(
            crate::manifests::compared_part("Deployment", &shipped, live),
            Vec::<String>::new()
        );
        let mut edited = live.clone();
        edited.data["spec"]["template"]["spec"]["containers"][0]["image"] = "other:1".into();
        assert_eq!(
            crate::manifests::compared_part("Deployment", &shipped, &edited).len(),
            1
        );
        // Installed by another version (its digest): the image named is that version's, a
        // difference.
        let mut older = live.clone();
        older
            .annotations_mut()
            .insert(DIGEST_ANNOTATION.to_owned(), "0123456789abcdef".to_owned());
        assert_eq!(
            crate::manifests::compared_part("Deployment", &shipped, &older).len(),
            1
        );
        // No image chosen: nothing named.
        let plain = install_objects(None, &[]).unwrap();
        assert!(
            plain
                .iter()
                .all(|o| !o.annotations().contains_key(BROKER_IMAGE_ANNOTATION))
        );
        assert!(install_objects(Some("Bad"), &[]).is_err());
        assert!(install_objects(None, &["Not A Namespace".to_owned()]).is_err());
    }

    #[test]
    fn a_deployment_compares_only_in_the_fields_shipped() {
        let shipped = find("Deployment", BROKER_NAME);
        let mut live = shipped.clone();
        // What the API server fills in does not count.
        live.data["spec"]["revisionHistoryLimit"] = 10.into();
        live.data["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"] =
            "IfNotPresent".into();
        live.data["spec"]["template"]["spec"]["containers"][0]["env"][0]["valueFrom"]["fieldRef"]
            ["apiVersion"] = "v1".into();
        assert_eq!(
            crate::manifests::compared_part("Deployment", &shipped, &live),
            Vec::<String>::new()
        );
        live.data["spec"]["replicas"] = 1.into();
        assert_eq!(
            crate::manifests::compared_part("Deployment", &shipped, &live),
            ["replicas is 1, this version ships 2"]
        );
        // A ClusterRole is compared strictly: a rule added by hand counts.
        let shipped = find("ClusterRole", "corral-vdi:broker");
        let mut live = shipped.clone();
        live.data["rules"]
            .as_array_mut()
            .unwrap()
            .push(serde_json::json!({
            "apiGroups": ["subresources.kubevirt.io"], "resources": ["virtualmachineinstances/vnc"],
            "verbs": ["get"] }));
        assert_eq!(
            crate::manifests::compared_part("ClusterRole", &shipped, &live),
            ["rules has 13 entries, this version ships 12"]
        );
    }
}
