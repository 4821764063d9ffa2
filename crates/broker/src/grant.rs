//! The per-claim grant: a Role and a RoleBinding named `corral-vdi-claim-<member>` in the
//! member's namespace (`vdi_core::names::grant_name`), as the broker writes them, and whether
//! the ones on the cluster are exactly that.
//!
//! KubeVirt authorizes its subresources by RBAC alone (virt-api runs a SubjectAccessReview per
//! request, kubevirt pkg/virt-api/rest/authorizer.go), so the Role lists each one by name with
//! `resourceNames: [<member>]`: the holder may open their own member's console, forwards and
//! USB redirection and change its power, and nothing else.

use std::collections::BTreeMap;

use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use vdi_core::broker::{GRANT_API_GROUP, GRANTED_RIGHTS};
use vdi_core::names::{BROKER_NAME, MANAGED_BY_LABEL, MEMBER_LABEL, POOL_LABEL, grant_name};

/// The claim Lease a grant belongs to (its ownerReference; garbage collection removes the grant
/// with the Lease on a real cluster).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Owner<'a> {
    /// The Lease's name (`corral-vdi-<member>`).
    pub name: &'a str,
    /// The Lease's uid.
    pub uid: &'a str,
}

/// The member a grant is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Target<'a> {
    /// The member's namespace.
    pub namespace: &'a str,
    /// The member (VM and VMI name).
    pub member: &'a str,
    /// Its pool.
    pub pool: &'a str,
}

fn meta(target: Target<'_>, owner: Owner<'_>) -> ObjectMeta {
    ObjectMeta {
        name: Some(grant_name(target.member)),
        namespace: Some(target.namespace.to_owned()),
        labels: Some(BTreeMap::from([
            (MEMBER_LABEL.to_owned(), target.member.to_owned()),
            (POOL_LABEL.to_owned(), target.pool.to_owned()),
            (MANAGED_BY_LABEL.to_owned(), BROKER_NAME.to_owned()),
        ])),
        owner_references: Some(vec![OwnerReference {
            api_version: "coordination.k8s.io/v1".into(),
            kind: "Lease".into(),
            name: owner.name.to_owned(),
            uid: owner.uid.to_owned(),
            controller: None,
            block_owner_deletion: None,
        }]),
        ..ObjectMeta::default()
    }
}

/// The Role `corral-vdi-claim-<member>`: the rights of [`GRANTED_RIGHTS`] (the stream
/// subresources with `get`, the power ones with `update`), one rule per verb in the order the
/// list first names it, all limited to the member by `resourceNames`.
pub fn role(target: Target<'_>, owner: Owner<'_>) -> Role {
    let mut rules: Vec<PolicyRule> = Vec::new();
    for (resource, verb) in GRANTED_RIGHTS {
        match rules.iter_mut().find(|r| r.verbs == [*verb]) {
            Some(rule) => rule
                .resources
                .get_or_insert_default()
                .push((*resource).to_owned()),
            None => rules.push(PolicyRule {
                api_groups: Some(vec![GRANT_API_GROUP.to_owned()]),
                resources: Some(vec![(*resource).to_owned()]),
                resource_names: Some(vec![target.member.to_owned()]),
                verbs: vec![(*verb).to_owned()],
                non_resource_urls: None,
            }),
        }
    }
    Role {
        metadata: meta(target, owner),
        rules: Some(rules),
    }
}

/// The RBAC subject for `identity`: the ServiceAccount `<n>` in `<ns>` for
/// `system:serviceaccount:<ns>:<n>` (Kubernetes' service-account user names), else the User.
pub fn subject(identity: &str) -> Subject {
    let service_account = identity
        .strip_prefix("system:serviceaccount:")
        .and_then(|rest| rest.split_once(':'))
        .filter(|(ns, name)| !ns.is_empty() && !name.is_empty() && !name.contains(':'));
    match service_account {
        Some((namespace, name)) => Subject {
            kind: "ServiceAccount".into(),
            name: name.to_owned(),
            namespace: Some(namespace.to_owned()),
            api_group: None,
        },
        None => Subject {
            kind: "User".into(),
            name: identity.to_owned(),
            namespace: None,
            api_group: Some("rbac.authorization.k8s.io".into()),
        },
    }
}

/// The identity a subject names (the inverse of [`subject`]), `None` for other kinds.
pub fn identity_of(subject: &Subject) -> Option<String> {
    match subject.kind.as_str() {
        "User" => Some(subject.name.clone()),
        "ServiceAccount" => Some(format!(
            "system:serviceaccount:{}:{}",
            subject.namespace.as_deref().unwrap_or_default(),
            subject.name
        )),
        _ => None,
    }
}

/// The RoleBinding `corral-vdi-claim-<member>`: the Role of the same name, bound to `holder`
/// alone.
pub fn binding(target: Target<'_>, owner: Owner<'_>, holder: &str) -> RoleBinding {
    RoleBinding {
        metadata: meta(target, owner),
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".into(),
            kind: "Role".into(),
            name: grant_name(target.member),
        },
        subjects: Some(vec![subject(holder)]),
    }
}

/// The identity a RoleBinding binds, when it binds exactly one that [`identity_of`] reads.
pub fn bound(binding: &RoleBinding) -> Option<String> {
    match binding.subjects.as_deref() {
        Some([one]) => identity_of(one),
        _ => None,
    }
}

/// Whether `actual` carries what `desired` sets: the labels (others may be added), the owner
/// references.
fn meta_matches(actual: &ObjectMeta, desired: &ObjectMeta) -> bool {
    let labels = actual.labels.clone().unwrap_or_default();
    desired
        .labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v))
        && actual.owner_references == desired.owner_references
}

/// Whether the Role is exactly what [`role`] writes.
pub fn role_matches(actual: &Role, desired: &Role) -> bool {
    meta_matches(&actual.metadata, &desired.metadata) && actual.rules == desired.rules
}

/// Whether the RoleBinding is exactly what [`binding`] writes.
pub fn binding_matches(actual: &RoleBinding, desired: &RoleBinding) -> bool {
    meta_matches(&actual.metadata, &desired.metadata)
        && actual.role_ref == desired.role_ref
        && actual.subjects == desired.subjects
}

#[cfg(test)]
mod tests {
    use super::*;

    const TARGET: Target<'static> = Target {
        namespace: "corral-vms",
        member: "dev-1",
        pool: "dev",
    };
    const OWNER: Owner<'static> = Owner {
        name: "corral-vdi-dev-1",
        uid: "u-1",
    };

    #[test]
    fn the_role_names_the_member_in_every_rule() {
        let r = role(TARGET, OWNER);
        assert_eq!(r.metadata.name.as_deref(), Some("corral-vdi-claim-dev-1"));
        let rules = r.rules.clone().unwrap();
        assert_eq!(rules.len(), 2);
        for rule in &rules {
            assert_eq!(
                rule.resource_names.as_deref(),
                Some(&["dev-1".to_owned()][..])
            );
            assert_eq!(
                rule.api_groups.as_deref(),
                Some(&[GRANT_API_GROUP.to_owned()][..])
            );
        }
        assert_eq!(rules[0].verbs, ["get"]);
        assert!(
            rules[0]
                .resources
                .as_ref()
                .unwrap()
                .contains(&"virtualmachineinstances/usbredir".into())
        );
        assert_eq!(rules[1].verbs, ["update"]);
        assert!(
            rules[1]
                .resources
                .as_ref()
                .unwrap()
                .contains(&"virtualmachineinstances/softreboot".into())
        );
        let labels = r.metadata.labels.clone().unwrap();
        assert_eq!(labels[MANAGED_BY_LABEL], "corral-vdi-broker");
        assert_eq!(labels[POOL_LABEL], "dev");
        assert_eq!(labels[MEMBER_LABEL], "dev-1");
        let owner = &r.metadata.owner_references.clone().unwrap()[0];
        assert_eq!((owner.kind.as_str(), owner.uid.as_str()), ("Lease", "u-1"));
        assert_eq!(owner.block_owner_deletion, None);
        assert!(role_matches(&r, &role(TARGET, OWNER)));
        let other = Owner {
            uid: "u-2",
            ..OWNER
        };
        assert!(
            !role_matches(&r, &role(TARGET, other)),
            "a new Lease is a new owner"
        );
    }

    #[test]
    fn subjects_are_users_or_service_accounts_and_read_back() {
        let u = subject("alice@example.com");
        assert_eq!(
            (u.kind.as_str(), u.api_group.as_deref()),
            ("User", Some("rbac.authorization.k8s.io"))
        );
        let sa = subject("system:serviceaccount:ci:runner");
        assert_eq!(
            (sa.kind.as_str(), sa.name.as_str(), sa.namespace.as_deref()),
            ("ServiceAccount", "runner", Some("ci"))
        );
        for id in [
            "alice@example.com",
            "system:serviceaccount:ci:runner",
            "system:serviceaccount:odd",
        ] {
            assert_eq!(identity_of(&subject(id)).as_deref(), Some(id));
        }
        let b = binding(TARGET, OWNER, "bob");
        assert_eq!(bound(&b).as_deref(), Some("bob"));
        assert!(binding_matches(&b, &binding(TARGET, OWNER, "bob")));
        assert!(!binding_matches(&b, &binding(TARGET, OWNER, "alice")));
    }
}
