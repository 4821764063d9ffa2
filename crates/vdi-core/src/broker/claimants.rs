//! Who may claim desktops in a namespace on a cluster with a broker (SPEC "Broker": a
//! claimant's rights exist only in the namespaces that hold desktops, never cluster-wide).
//!
//! The claimant role ([`CLAIMANT_ROLE`], shipped as `broker/claimant-role.yaml`) is a Role
//! written into each such namespace, with the RoleBinding of the same name listing who may
//! claim there: users, groups (the identity provider's, as the cluster's authenticator reports
//! them) and service accounts, as RBAC names them ([`Claimant`]). Its Lease rights reach every
//! Lease of its namespace, so it is never a ClusterRole: bound cluster-wide, they would reach
//! `kube-system`'s leader elections and the broker's own. [`cluster_wide_lease_writers`] finds
//! the ClusterRoleBindings that give ordinary users Lease writes anyway, for `corral-vdi
//! broker status`.

use std::fmt;

use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding, Subject};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};

use super::{FIELD_MANAGER, PART_OF};
use crate::error::{Error, Result, is_status};
use crate::validate;

/// Name of the claimant Role and of its RoleBinding in each namespace that holds desktops.
pub const CLAIMANT_ROLE: &str = "corral-vdi:desktop-user";
/// The claimant Role, as shipped (`broker/claimant-role.yaml`; no namespace: written into each).
pub const CLAIMANT_ROLE_MANIFEST: &str = include_str!("../../../../broker/claimant-role.yaml");

/// One who may claim: an RBAC subject.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Claimant {
    /// A user, by the name the cluster's authenticator gives (`alice`, `alice@example.com`).
    User(String),
    /// A group of users, as the authenticator reports it (an identity provider's group).
    Group(String),
    /// A service account (a kiosk, a robot): `system:serviceaccount:<namespace>:<name>`.
    ServiceAccount {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
    },
}

impl fmt::Display for Claimant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Claimant::User(u) => write!(f, "user {u}"),
            Claimant::Group(g) => write!(f, "group {g}"),
            Claimant::ServiceAccount { namespace, name } => {
                write!(f, "service account {namespace}/{name}")
            }
        }
    }
}

impl Claimant {
    /// A user (or, for `system:serviceaccount:<namespace>:<name>`, a service account), checked
    /// as [`validate::identity`] checks a claimant.
    ///
    /// Errors: [`Error::Invalid`] naming the value.
    pub fn user(name: &str) -> Result<Self> {
        validate::identity(name)?;
        let service_account = name
            .strip_prefix("system:serviceaccount:")
            .and_then(|rest| rest.split_once(':'));
        Ok(match service_account {
            Some((namespace, sa)) => {
                validate::namespace(namespace)?;
                Claimant::ServiceAccount {
                    namespace: namespace.to_owned(),
                    name: sa.to_owned(),
                }
            }
            None => Claimant::User(name.to_owned()),
        })
    }

    /// A group: not empty, no control characters, and none of Kubernetes' own `system:`
    /// groups (`system:authenticated` would let everyone claim; say so with a user list).
    ///
    /// Errors: [`Error::Invalid`] naming the value.
    pub fn group(name: &str) -> Result<Self> {
        let fix = "name a group as the cluster's authenticator reports it (kubectl auth whoami \
                   shows yours)";
        if name.trim().is_empty() || name.trim() != name || name.chars().any(char::is_control) {
            return Err(Error::invalid(
                format!("\"{}\" is not a group name", name.escape_debug()),
                fix,
            ));
        }
        if name.starts_with("system:") {
            return Err(Error::invalid(
                format!(
                    "group {name} is one of Kubernetes' own groups, not a set of people: it \
                     would let every identity of its kind claim desktops"
                ),
                fix,
            ));
        }
        Ok(Claimant::Group(name.to_owned()))
    }

    /// The RBAC subject.
    pub fn subject(&self) -> Subject {
        match self {
            Claimant::User(name) => Subject {
                api_group: Some("rbac.authorization.k8s.io".into()),
                kind: "User".into(),
                name: name.clone(),
                namespace: None,
            },
            Claimant::Group(name) => Subject {
                api_group: Some("rbac.authorization.k8s.io".into()),
                kind: "Group".into(),
                name: name.clone(),
                namespace: None,
            },
            Claimant::ServiceAccount { namespace, name } => Subject {
                api_group: None,
                kind: "ServiceAccount".into(),
                name: name.clone(),
                namespace: Some(namespace.clone()),
            },
        }
    }

    /// The claimant an RBAC subject names; `None` for another kind.
    pub fn of_subject(subject: &Subject) -> Option<Self> {
        Some(match subject.kind.as_str() {
            "User" => Claimant::User(subject.name.clone()),
            "Group" => Claimant::Group(subject.name.clone()),
            "ServiceAccount" => Claimant::ServiceAccount {
                namespace: subject.namespace.clone()?,
                name: subject.name.clone(),
            },
            _ => return None,
        })
    }
}

/// The claimant Role for `namespace`, from [`CLAIMANT_ROLE_MANIFEST`].
///
/// Errors: only if the shipped file does not parse, which a unit test rules out.
pub fn claimant_role(namespace: &str) -> Result<Role> {
    let mut role: Role = serde_yaml::from_str(CLAIMANT_ROLE_MANIFEST).map_err(|e| {
        Error::invalid(
            format!("broker/claimant-role.yaml does not parse: {e}"),
            "report this as a bug",
        )
    })?;
    role.metadata.namespace = Some(namespace.to_owned());
    Ok(role)
}

/// Lets `claimants` claim desktops in `namespace`: writes the claimant Role there (server-side
/// apply, field manager [`FIELD_MANAGER`]) and adds them to its RoleBinding (created when
/// missing; updated with the resourceVersion read, so a concurrent change is not lost).
/// Then lets the broker act there ([`super::namespaces::serve`]). Returns a phrase per claimant
/// ("user alice may claim in namespace "corral-vms"", or "… may already …"), then the broker's.
///
/// Errors: [`Error::Invalid`] for a bad namespace or an empty list (no request); 403 for a
/// caller who may not write Roles there (an administrator's job; RBAC also refuses anyone who
/// does not hold the Role's rights themselves).
pub async fn allow(
    client: &Client,
    namespace: &str,
    claimants: &[Claimant],
) -> Result<Vec<String>> {
    check(namespace, claimants)?;
    let roles: Api<Role> = Api::namespaced(client.clone(), namespace);
    let role = claimant_role(namespace)?;
    roles
        .patch(
            CLAIMANT_ROLE,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&role),
        )
        .await
        .map_err(|e| {
            Error::kube(
                format!("write Role {CLAIMANT_ROLE} in namespace \"{namespace}\""),
                e,
            )
        })?;
    let mut said = edit_binding(client, namespace, |subjects| {
        claimants
            .iter()
            .map(|c| {
                if subjects.contains(&c.subject()) {
                    format!("{c} may already claim desktops in namespace \"{namespace}\"")
                } else {
                    subjects.push(c.subject());
                    format!("{c} may claim desktops in namespace \"{namespace}\"")
                }
            })
            .collect()
    })
    .await?;
    // A namespace where people claim holds desktops: the broker acts there.
    said.push(super::namespaces::serve(client, namespace).await?);
    Ok(said)
}

/// Takes `claimants` off the claimant RoleBinding of `namespace` (deleted once it lists no
/// one; the Role stays). Claims they hold go on until released: only new claims are refused.
/// Returns a phrase per claimant.
///
/// Errors: as [`allow`].
pub async fn disallow(
    client: &Client,
    namespace: &str,
    claimants: &[Claimant],
) -> Result<Vec<String>> {
    check(namespace, claimants)?;
    edit_binding(client, namespace, |subjects| {
        claimants
            .iter()
            .map(|c| {
                let before = subjects.len();
                subjects.retain(|s| *s != c.subject());
                if subjects.len() < before {
                    format!("{c} may no longer claim desktops in namespace \"{namespace}\"")
                } else {
                    format!("{c} was not allowed to claim in namespace \"{namespace}\"")
                }
            })
            .collect()
    })
    .await
}

/// Who may claim in `namespace` by its claimant RoleBinding (empty when there is none).
///
/// Errors: [`Error::Kube`] when it cannot be read (403 for those who may not read RoleBindings).
pub async fn list(client: &Client, namespace: &str) -> Result<Vec<Claimant>> {
    validate::namespace(namespace)?;
    let bindings: Api<RoleBinding> = Api::namespaced(client.clone(), namespace);
    let binding = bindings.get_opt(CLAIMANT_ROLE).await.map_err(|e| {
        Error::kube(
            format!("read RoleBinding {CLAIMANT_ROLE} in namespace \"{namespace}\""),
            e,
        )
    })?;
    let mut found: Vec<Claimant> = binding
        .and_then(|b| b.subjects)
        .unwrap_or_default()
        .iter()
        .filter_map(Claimant::of_subject)
        .collect();
    found.sort();
    Ok(found)
}

fn check(namespace: &str, claimants: &[Claimant]) -> Result<()> {
    validate::namespace(namespace)?;
    if claimants.is_empty() {
        return Err(Error::invalid(
            "nobody named: no user, group or service account given",
            "pass --user NAME, --group NAME or both (each may be repeated)",
        ));
    }
    Ok(())
}

/// Reads the claimant RoleBinding of `namespace`, lets `edit` change its subjects, and writes
/// it back (created, replaced under its resourceVersion, or deleted when it lists no one);
/// on a 409 it reads it again, three times at most.
async fn edit_binding(
    client: &Client,
    namespace: &str,
    edit: impl Fn(&mut Vec<Subject>) -> Vec<String>,
) -> Result<Vec<String>> {
    let bindings: Api<RoleBinding> = Api::namespaced(client.clone(), namespace);
    let what = format!("RoleBinding {CLAIMANT_ROLE} in namespace \"{namespace}\"");
    for _ in 0..3 {
        let found = bindings
            .get_opt(CLAIMANT_ROLE)
            .await
            .map_err(|e| Error::kube(format!("read {what}"), e))?;
        let mut binding = found.clone().unwrap_or_else(|| RoleBinding {
            metadata: kube::api::ObjectMeta {
                name: Some(CLAIMANT_ROLE.to_owned()),
                namespace: Some(namespace.to_owned()),
                labels: Some([(PART_OF.0.to_owned(), PART_OF.1.to_owned())].into()),
                ..Default::default()
            },
            role_ref: k8s_openapi::api::rbac::v1::RoleRef {
                api_group: "rbac.authorization.k8s.io".into(),
                kind: "Role".into(),
                name: CLAIMANT_ROLE.into(),
            },
            subjects: None,
        });
        let mut subjects = binding.subjects.take().unwrap_or_default();
        let said = edit(&mut subjects);
        let result = match (&found, subjects.is_empty()) {
            (None, true) => return Ok(said),
            (Some(_), true) => bindings
                .delete(CLAIMANT_ROLE, &DeleteParams::default())
                .await
                .map(|_| ()),
            (None, false) => {
                binding.subjects = Some(subjects);
                bindings
                    .create(&PostParams::default(), &binding)
                    .await
                    .map(|_| ())
            }
            (Some(_), false) => {
                binding.subjects = Some(subjects);
                bindings
                    .replace(CLAIMANT_ROLE, &PostParams::default(), &binding)
                    .await
                    .map(|_| ())
            }
        };
        match result {
            Ok(()) => return Ok(said),
            Err(e) if is_status(&e, 409) || is_status(&e, 404) => continue,
            Err(e) => return Err(Error::kube(format!("write {what}"), e)),
        }
    }
    Err(Error::Refused {
        message: format!("{what} kept changing while it was being written"),
        suggestion: Some("try again".into()),
    })
}

/// Whether a ClusterRole's rules let their holder write Leases (create, update, patch, delete,
/// deletecollection or `*` on `leases` of `coordination.k8s.io`, or `*` resources there).
fn writes_leases(role: &ClusterRole) -> bool {
    role.rules.iter().flatten().any(|rule| {
        let any = |list: &Option<Vec<String>>, want: &[&str]| {
            list.iter().flatten().any(|v| want.contains(&v.as_str()))
        };
        any(&rule.api_groups, &["coordination.k8s.io", "*"])
            && any(&rule.resources, &["leases", "*"])
            && rule.verbs.iter().any(|v| {
                [
                    "create",
                    "update",
                    "patch",
                    "delete",
                    "deletecollection",
                    "*",
                ]
                .contains(&v.as_str())
            })
            && rule.resource_names.as_ref().is_none_or(Vec::is_empty)
    })
}

/// The ClusterRoleBindings that give people (users and groups other than Kubernetes' own
/// `system:` ones) Lease writes in every namespace, each as a sentence naming the binding, its
/// ClusterRole and whom it binds: such a binding lets them write kube-system's leader elections
/// and the broker's own Lease, not just claims. `None` when the caller may not list
/// ClusterRoleBindings and ClusterRoles (only administrators may).
///
/// Errors: [`Error::Kube`] when a list fails otherwise.
pub async fn cluster_wide_lease_writers(client: &Client) -> Result<Option<Vec<String>>> {
    let roles = match Api::<ClusterRole>::all(client.clone())
        .list(&ListParams::default())
        .await
    {
        Ok(roles) => roles,
        Err(e) if is_status(&e, 403) => return Ok(None),
        Err(e) => return Err(Error::kube("list ClusterRoles", e)),
    };
    let bindings = match Api::<ClusterRoleBinding>::all(client.clone())
        .list(&ListParams::default())
        .await
    {
        Ok(bindings) => bindings,
        Err(e) if is_status(&e, 403) => return Ok(None),
        Err(e) => return Err(Error::kube("list ClusterRoleBindings", e)),
    };
    let writers: Vec<String> = roles
        .iter()
        .filter(|r| writes_leases(r))
        .map(ResourceExt::name_any)
        .collect();
    let mut found = Vec::new();
    for binding in &bindings {
        if binding.role_ref.kind != "ClusterRole" || !writers.contains(&binding.role_ref.name) {
            continue;
        }
        let people: Vec<String> = binding
            .subjects
            .iter()
            .flatten()
            .filter(|s| matches!(s.kind.as_str(), "User" | "Group"))
            .filter(|s| !s.name.starts_with("system:"))
            .filter_map(Claimant::of_subject)
            .map(|c| c.to_string())
            .collect();
        if !people.is_empty() {
            found.push(format!(
                "ClusterRoleBinding {} gives {} Lease writes in every namespace (ClusterRole {}): \
                 they may write kube-system's leader elections and the broker's own Lease, not \
                 only claims; bind the claimant role per namespace instead (`corral-vdi broker \
                 allow -n NAMESPACE --user NAME`) and delete it (`kubectl delete \
                 clusterrolebinding {}`)",
                binding.name_any(),
                people.join(", "),
                binding.role_ref.name,
                binding.name_any()
            ));
        }
    }
    Ok(Some(found))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_claimant_role_lets_claim_and_read_with_no_stream_power_or_vm_write_right() {
        let role = claimant_role("ns").unwrap();
        assert_eq!(role.name_any(), CLAIMANT_ROLE);
        assert_eq!(role.metadata.namespace.as_deref(), Some("ns"));
        let mut held = Vec::new();
        for rule in role.rules.unwrap() {
            for group in rule.api_groups.unwrap_or_default() {
                for resource in rule.resources.clone().unwrap_or_default() {
                    for verb in &rule.verbs {
                        held.push((group.clone(), resource.clone(), verb.clone()));
                    }
                }
            }
        }
        for (group, resource, verb) in &held {
            assert!(
                !resource.contains('/') && group != super::super::GRANT_API_GROUP,
                "a subresource: {group} {resource} {verb}"
            );
            assert!(
                !(group == "kubevirt.io"
                    && ["patch", "update", "create", "delete"].contains(&verb.as_str())),
                "a VM write: {group} {resource} {verb}"
            );
        }
        let has =
            |g: &str, r: &str, v: &str| held.iter().any(|h| h == &(g.into(), r.into(), v.into()));
        for verb in ["get", "list", "watch", "create", "update", "delete"] {
            assert!(has("coordination.k8s.io", "leases", verb), "Leases {verb}");
        }
        for (group, resource) in [
            ("kubevirt.io", "virtualmachines"),
            ("kubevirt.io", "virtualmachineinstances"),
            ("clone.kubevirt.io", "virtualmachineclones"),
            ("corral.dev", "desktoppools"),
        ] {
            assert!(has(group, resource, "list"), "read {group} {resource}");
        }
    }

    #[test]
    fn claimants_are_checked_and_named_as_rbac_names_them() {
        assert_eq!(
            Claimant::user("alice").unwrap(),
            Claimant::User("alice".into())
        );
        assert_eq!(
            Claimant::user("system:serviceaccount:kiosks:dave").unwrap(),
            Claimant::ServiceAccount {
                namespace: "kiosks".into(),
                name: "dave".into()
            }
        );
        assert!(Claimant::user("system:anonymous").is_err());
        assert!(Claimant::user("").is_err());
        assert!(Claimant::group("system:authenticated").is_err());
        assert!(Claimant::group(" engineering").is_err());
        let g = Claimant::group("engineering").unwrap();
        assert_eq!(Claimant::of_subject(&g.subject()), Some(g.clone()));
        assert_eq!(g.to_string(), "group engineering");
        let sa = Claimant::user("system:serviceaccount:kiosks:dave").unwrap();
        assert_eq!(sa.subject().kind, "ServiceAccount");
        assert_eq!(Claimant::of_subject(&sa.subject()), Some(sa));
    }

    #[test]
    fn lease_writers_are_rules_that_write_any_lease() {
        let role = |rules: serde_json::Value| -> ClusterRole {
            serde_json::from_value(json!({ "metadata": { "name": "r" }, "rules": rules })).unwrap()
        };
        assert!(writes_leases(&role(
            json!([{ "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"], "verbs": ["update"] }])
        )));
        assert!(writes_leases(&role(json!([{ "apiGroups": ["*"],
            "resources": ["*"], "verbs": ["*"] }]))));
        assert!(!writes_leases(&role(
            json!([{ "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"], "verbs": ["get", "list", "watch"] }])
        )));
        assert!(
            !writes_leases(&role(json!([{ "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"], "resourceNames": ["corral-vdi-broker"],
            "verbs": ["update"] }]))),
            "limited to named Leases"
        );
    }
}
