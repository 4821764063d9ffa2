//! Who may claim from which pool (SPEC "Entitlements"): the RBAC verb [`VERB`] on
//! `desktoppools` of group `corral.dev`, with `resourceNames: [<pool>]` (or no names: every pool
//! of the namespace), bound by ordinary Roles and RoleBindings to users, groups or service
//! accounts, so the identity provider's groups (OIDC, LDAP, through the cluster's authenticator)
//! work as they are. RBAC names need no object: label-only pools, which have no DesktopPool,
//! are entitled the same way.
//!
//! The guard checks the right where a claim is made (its Lease policy asks the API server's
//! authorizer for the requesting user, with their own groups: `guard/guard.yaml`); the broker
//! checks an administrator's assignment to someone else with a SubjectAccessReview for them
//! ([`is_entitled`]). What this module writes: per pool the Role [`role_name`] with that one
//! rule, and per subject a RoleBinding ([`binding_name`]) carrying who granted it
//! ([`GRANTED_BY_ANNOTATION`]). "Open to everyone who may claim in the namespace" is a grant
//! to the group `system:authenticated` ([`Who::Everyone`]): a claim also needs the Lease rights
//! of the namespace's claimant role, so that is everyone allowed there. It is a grant of the
//! pool's name, never a namespace-wide one, since RBAC only adds rights: a pool entitled to one
//! group stays closed to others beside it.
//!
//! Losing the right ends no claim: the next claim is refused.

use std::collections::BTreeSet;
use std::fmt;

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
    SelfSubjectRulesReview, SelfSubjectRulesReviewSpec, SubjectAccessReview,
    SubjectAccessReviewSpec,
};
use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::broker::claimants::Claimant;
use crate::error::{Error, Result, is_status};
use crate::validate;

/// The RBAC verb that entitles: "may claim from this pool".
pub const VERB: &str = "claim";
/// The API group of [`RESOURCE`].
pub const GROUP: &str = "corral.dev";
/// The resource the verb is on; its `resourceNames` are pool names.
pub const RESOURCE: &str = "desktoppools";
/// The group every signed-in identity is in: a grant to it opens a pool to everyone who may
/// claim in the namespace.
pub const EVERYONE_GROUP: &str = "system:authenticated";
/// RoleBinding annotation: the full identity of who wrote the grant.
pub const GRANTED_BY_ANNOTATION: &str = "corral.dev/vdi-granted-by";
/// Label on the Role and RoleBindings this module writes: the pool they entitle.
pub const POOL_LABEL: &str = "corral.dev/vdi-entitles";
/// The words of the guard's refusal of a claim its claimant is not entitled to
/// (`guard/guard.yaml`, the Lease policy): how the client tells it from the guard's other
/// refusals.
pub const GUARD_REFUSAL: &str = "may not claim from pool";
/// Field manager of the Role's writes.
pub const FIELD_MANAGER: &str = "corral-vdi-entitlement";

/// Whom a pool is for.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Who {
    /// Everyone who may claim in the namespace (the group [`EVERYONE_GROUP`]).
    Everyone,
    /// A user, group or service account.
    Claimant(Claimant),
}

impl fmt::Display for Who {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Who::Everyone => f.write_str("everyone who may claim in the namespace"),
            Who::Claimant(c) => c.fmt(f),
        }
    }
}

impl Who {
    /// The RBAC subject.
    pub fn subject(&self) -> Subject {
        match self {
            Who::Everyone => Subject {
                api_group: Some("rbac.authorization.k8s.io".into()),
                kind: "Group".into(),
                name: EVERYONE_GROUP.into(),
                namespace: None,
            },
            Who::Claimant(c) => c.subject(),
        }
    }

    /// Whom an RBAC subject names; `None` for another kind.
    pub fn of_subject(subject: &Subject) -> Option<Self> {
        if subject.kind == "Group" && subject.name == EVERYONE_GROUP {
            return Some(Who::Everyone);
        }
        Claimant::of_subject(subject).map(Who::Claimant)
    }
}

/// Whom a pool is for, as a front end names it (the CLI's `--user`, `--group`, `--everyone`;
/// the app's "Who may use this pool"), before it is checked ([`WhoInput::parse`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "bindings", derive(specta::Type))]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum WhoInput {
    /// A user as the cluster names them; `system:serviceaccount:<namespace>:<name>` names a
    /// service account.
    User {
        /// The name.
        name: String,
    },
    /// A group as the cluster's authenticator reports it.
    Group {
        /// The name.
        name: String,
    },
    /// Everyone who may claim in the namespace.
    Everyone,
}

impl WhoInput {
    /// Whom it names, checked ([`Claimant::user`], [`Claimant::group`]).
    ///
    /// Errors: [`Error::Invalid`] naming a bad user or group.
    pub fn parse(&self) -> Result<Who> {
        Ok(match self {
            WhoInput::User { name } => Who::Claimant(Claimant::user(name)?),
            WhoInput::Group { name } => Who::Claimant(Claimant::group(name)?),
            WhoInput::Everyone => Who::Everyone,
        })
    }
}

impl Who {
    /// How a front end names it again ([`WhoInput::parse`] gives it back).
    pub fn input(&self) -> WhoInput {
        match self {
            Who::Everyone => WhoInput::Everyone,
            Who::Claimant(Claimant::Group(name)) => WhoInput::Group { name: name.clone() },
            Who::Claimant(Claimant::User(name)) => WhoInput::User { name: name.clone() },
            Who::Claimant(Claimant::ServiceAccount { namespace, name }) => WhoInput::User {
                name: format!("system:serviceaccount:{namespace}:{name}"),
            },
        }
    }
}

/// Name of the Role that entitles to `pool`: `corral-vdi:pool:<pool>`.
pub fn role_name(pool: &str) -> String {
    format!("corral-vdi:pool:{pool}")
}

/// Name of the RoleBinding that entitles `who` to `pool`: the Role's name, then the first 12
/// hex digits of the SHA-256 of the subject (kind, namespace, name), so that any identity (an
/// e-mail address, a name with `/`) makes a valid name.
pub fn binding_name(pool: &str, who: &Who) -> String {
    let s = who.subject();
    let digest = Sha256::digest(format!(
        "{}\0{}\0{}",
        s.kind,
        s.namespace.unwrap_or_default(),
        s.name
    ));
    let hex: String = digest.iter().take(6).map(|b| format!("{b:02x}")).collect();
    format!("{}:{hex}", role_name(pool))
}

fn labels(pool: &str) -> std::collections::BTreeMap<String, String> {
    [
        (POOL_LABEL.to_owned(), pool.to_owned()),
        (
            "app.kubernetes.io/part-of".to_owned(),
            "corral-vdi".to_owned(),
        ),
    ]
    .into()
}

/// The rule that entitles to `pool`.
pub fn rule(pool: &str) -> PolicyRule {
    PolicyRule {
        api_groups: Some(vec![GROUP.into()]),
        resources: Some(vec![RESOURCE.into()]),
        resource_names: Some(vec![pool.into()]),
        verbs: vec![VERB.into()],
        non_resource_urls: None,
    }
}

/// The Role that entitles to `pool` in `namespace`.
pub fn role(namespace: &str, pool: &str) -> Role {
    Role {
        metadata: ObjectMeta {
            name: Some(role_name(pool)),
            namespace: Some(namespace.to_owned()),
            labels: Some(labels(pool)),
            ..Default::default()
        },
        rules: Some(vec![rule(pool)]),
    }
}

fn check(namespace: &str, pool: &str, who: &[Who]) -> Result<()> {
    validate::namespace(namespace)?;
    validate::pool_name(pool)?;
    if who.is_empty() {
        return Err(Error::invalid(
            "nobody named: no user, group or service account given",
            "pass --user NAME, --group NAME (each may be repeated) or --everyone",
        ));
    }
    Ok(())
}

/// Entitles `who` to claim from `pool` in `namespace`: writes the pool's Role (server-side
/// apply) and one RoleBinding per subject, annotated with `by` (the caller's identity), and
/// returns once the API server's authorizer holds them (10 s at most).
/// Returns a sentence per subject ("group engineering may claim from pool "dev"", "pool "dev" is
/// open to everyone who may claim in namespace "ns"", or "… already …").
///
/// Errors: [`Error::Invalid`] for a bad namespace or pool name or an empty list (no request);
/// 403 for a caller who may not write Roles and RoleBindings there (RBAC also refuses anyone who
/// does not hold the right themselves, or `bind`).
pub async fn entitle(
    client: &Client,
    namespace: &str,
    pool: &str,
    who: &[Who],
    by: &str,
) -> Result<Vec<String>> {
    check(namespace, pool, who)?;
    let roles: Api<Role> = Api::namespaced(client.clone(), namespace);
    let name = role_name(pool);
    roles
        .patch(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&role(namespace, pool)),
        )
        .await
        .map_err(|e| Error::kube(format!("write Role {name} in namespace \"{namespace}\""), e))?;
    let bindings: Api<RoleBinding> = Api::namespaced(client.clone(), namespace);
    let mut said = Vec::new();
    for w in who {
        let binding_name = binding_name(pool, w);
        let mut labels = labels(pool);
        labels.insert("corral.dev/vdi-entitlement".into(), "true".into());
        let binding = RoleBinding {
            metadata: ObjectMeta {
                name: Some(binding_name.clone()),
                namespace: Some(namespace.to_owned()),
                labels: Some(labels),
                annotations: Some([(GRANTED_BY_ANNOTATION.to_owned(), by.to_owned())].into()),
                ..Default::default()
            },
            role_ref: RoleRef {
                api_group: "rbac.authorization.k8s.io".into(),
                kind: "Role".into(),
                name: name.clone(),
            },
            subjects: Some(vec![w.subject()]),
        };
        let already = match bindings.create(&PostParams::default(), &binding).await {
            Ok(_) => false,
            Err(e) if is_status(&e, 409) => true,
            Err(e) => {
                return Err(Error::kube(
                    format!("write RoleBinding {binding_name} in namespace \"{namespace}\""),
                    e,
                ));
            }
        };
        let already = if already { " already" } else { "" };
        said.push(match w {
            Who::Everyone => format!(
                "pool \"{pool}\" is{already} open to everyone who may claim in namespace \
                 \"{namespace}\""
            ),
            Who::Claimant(c) => format!("{c} may{already} claim from pool \"{pool}\""),
        });
    }
    settled(client, namespace, pool, who).await;
    Ok(said)
}

/// Waits (10 s at most) until the API server's authorizer, which reads RBAC through a cache,
/// entitles each of `who` to `pool`: so that a claim right after [`entitle`] is not refused.
/// Asked with SubjectAccessReviews, as [`is_entitled`] does; gives up silently (the grant is
/// written and holds a moment later).
async fn settled(client: &Client, namespace: &str, pool: &str, who: &[Who]) {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    for w in who {
        let (user, groups) = match w {
            Who::Everyone => (
                "corral-vdi:anyone".to_owned(),
                vec![EVERYONE_GROUP.to_owned()],
            ),
            Who::Claimant(Claimant::Group(g)) => ("corral-vdi:anyone".to_owned(), vec![g.clone()]),
            Who::Claimant(Claimant::User(u)) => (u.clone(), known_groups(u)),
            Who::Claimant(Claimant::ServiceAccount { namespace, name }) => {
                let id = format!("system:serviceaccount:{namespace}:{name}");
                let groups = known_groups(&id);
                (id, groups)
            }
        };
        while tokio::time::Instant::now() < deadline {
            match review(client, namespace, pool, &user, groups.clone()).await {
                Ok(true) | Err(_) => break,
                Ok(false) => tokio::time::sleep(std::time::Duration::from_millis(100)).await,
            }
        }
    }
}

/// Takes back the grants [`entitle`] wrote for `who` on `pool`. Claims running go on; the next
/// claim is refused (unless another grant, which [`list`] shows, entitles them too). Returns a
/// sentence per subject.
///
/// Errors: as [`entitle`].
pub async fn unentitle(
    client: &Client,
    namespace: &str,
    pool: &str,
    who: &[Who],
) -> Result<Vec<String>> {
    check(namespace, pool, who)?;
    let bindings: Api<RoleBinding> = Api::namespaced(client.clone(), namespace);
    let mut said = Vec::new();
    for w in who {
        let name = binding_name(pool, w);
        match bindings.delete(&name, &DeleteParams::default()).await {
            Ok(_) => said.push(format!(
                "{w} may no longer claim from pool \"{pool}\" (claims running go on)"
            )),
            Err(e) if is_status(&e, 404) => said.push(format!(
                "{w} had no grant of pool \"{pool}\" from corral-vdi pool entitle"
            )),
            Err(e) => {
                return Err(Error::kube(
                    format!("delete RoleBinding {name} in namespace \"{namespace}\""),
                    e,
                ));
            }
        }
    }
    Ok(said)
}

/// Removes the Role and RoleBindings [`entitle`] wrote for `pool` (pool delete). Returns how
/// many objects went.
///
/// Errors: [`Error::Kube`] for a refused list or delete.
pub async fn forget_pool(client: &Client, namespace: &str, pool: &str) -> Result<usize> {
    let selector = ListParams::default().labels(&format!("{POOL_LABEL}={pool}"));
    let mut gone = 0;
    let bindings: Api<RoleBinding> = Api::namespaced(client.clone(), namespace);
    let roles: Api<Role> = Api::namespaced(client.clone(), namespace);
    let what = format!("the entitlements of pool \"{pool}\" in namespace \"{namespace}\"");
    for b in bindings
        .list(&selector)
        .await
        .map_err(|e| Error::kube(format!("list {what}"), e))?
    {
        match bindings
            .delete(&b.name_any(), &DeleteParams::default())
            .await
        {
            Ok(_) => gone += 1,
            Err(e) if is_status(&e, 404) => {}
            Err(e) => return Err(Error::kube(format!("delete {what}"), e)),
        }
    }
    for r in roles
        .list(&selector)
        .await
        .map_err(|e| Error::kube(format!("list {what}"), e))?
    {
        match roles.delete(&r.name_any(), &DeleteParams::default()).await {
            Ok(_) => gone += 1,
            Err(e) if is_status(&e, 404) => {}
            Err(e) => return Err(Error::kube(format!("delete {what}"), e)),
        }
    }
    Ok(gone)
}

/// How far a grant reaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[cfg_attr(feature = "bindings", derive(specta::Type))]
#[serde(rename_all = "camelCase")]
pub enum Reach {
    /// This pool, by name.
    Pool,
    /// Every pool of the namespace (a rule without names, bound in the namespace).
    Namespace,
    /// Every pool of the cluster (a ClusterRoleBinding).
    Cluster,
}

/// One grant of the right to claim from a pool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "bindings", derive(specta::Type))]
#[serde(rename_all = "camelCase")]
pub struct Entitlement {
    /// Whom: "user alice", "group engineering", "service account kiosks/dave", "everyone who
    /// may claim in the namespace".
    pub who: String,
    /// The subject's kind as RBAC names it: `User`, `Group` or `ServiceAccount`.
    pub kind: String,
    /// The subject's name (for a service account, `<namespace>/<name>`).
    pub name: String,
    /// How far it reaches.
    pub reach: Reach,
    /// The binding that grants it: "RoleBinding corral-vdi:pool:dev:…" or "ClusterRoleBinding
    /// cluster-admin".
    pub via: String,
    /// Who wrote it, where [`entitle`] did ([`GRANTED_BY_ANNOTATION`]).
    pub granted_by: Option<String>,
    /// Whom to name to take it back with [`unentitle`]: present only for a grant of this pool
    /// that [`entitle`] wrote (its RoleBinding [`binding_name`]); others are RBAC's own, changed
    /// where they were made.
    pub revoke: Option<WhoInput>,
}

/// Whether a rule gives the verb [`VERB`] on `desktoppools` of `corral.dev` for `pool`:
/// `Some(true)` by name, `Some(false)` for every pool (no names), `None` not at all. Wildcards
/// count as RBAC counts them.
pub fn rule_entitles(rule: &PolicyRule, pool: &str) -> Option<bool> {
    let has = |list: Option<&Vec<String>>, want: &str| {
        list.into_iter().flatten().any(|v| v == want || v == "*")
    };
    let fits = has(rule.api_groups.as_ref(), GROUP)
        && has(rule.resources.as_ref(), RESOURCE)
        && rule.verbs.iter().any(|v| v == VERB || v == "*");
    if !fits {
        return None;
    }
    match rule.resource_names.as_deref() {
        None | Some([]) => Some(false),
        Some(names) if names.iter().any(|n| n == pool) => Some(true),
        Some(_) => None,
    }
}

fn best(rules: Option<&Vec<PolicyRule>>, pool: &str) -> Option<bool> {
    rules
        .into_iter()
        .flatten()
        .filter_map(|r| rule_entitles(r, pool))
        .max()
}

/// The entitlements a binding grants. `binding`: the RoleBinding's name where [`entitle`] may
/// have written it (a grant of the pool by name), so that one it did write can be taken back.
fn entries<'a>(
    subjects: Option<&'a Vec<Subject>>,
    reach: Reach,
    via: String,
    granted_by: Option<&String>,
    binding: Option<(&'a str, &'a str)>,
) -> impl Iterator<Item = Entitlement> + 'a {
    let granted_by = granted_by.cloned();
    subjects.into_iter().flatten().map(move |s| {
        let whom = Who::of_subject(s);
        let revoke = whom
            .as_ref()
            .zip(binding)
            .and_then(|(w, (pool, name))| (binding_name(pool, w) == name).then(|| w.input()));
        let who = whom.map_or_else(|| format!("{} {}", s.kind, s.name), |w| w.to_string());
        let name = match &s.namespace {
            Some(ns) if s.kind == "ServiceAccount" => format!("{ns}/{}", s.name),
            _ => s.name.clone(),
        };
        Entitlement {
            who,
            kind: s.kind.clone(),
            name,
            reach,
            via: via.clone(),
            granted_by: granted_by.clone(),
            revoke,
        }
    })
}

/// Who may claim from `pool` in `namespace`, by every RoleBinding of the namespace whose Role
/// or ClusterRole gives the right, and (when the caller may read them) every
/// ClusterRoleBinding that does. The second value says whether the cluster-wide bindings could
/// be read. Ordered by reach, then whom.
///
/// Errors: [`Error::Invalid`] for a bad namespace or pool name; [`Error::Kube`] when the
/// namespace's Roles or RoleBindings cannot be read (403 for those who may not: an
/// administrator's list).
pub async fn list(
    client: &Client,
    namespace: &str,
    pool: &str,
) -> Result<(Vec<Entitlement>, bool)> {
    validate::namespace(namespace)?;
    validate::pool_name(pool)?;
    let what = format!("the Roles and RoleBindings of namespace \"{namespace}\"");
    let lp = ListParams::default();
    let bindings = Api::<RoleBinding>::namespaced(client.clone(), namespace)
        .list(&lp)
        .await
        .map_err(|e| Error::kube(format!("list {what}"), e))?;
    let roles = Api::<Role>::namespaced(client.clone(), namespace)
        .list(&lp)
        .await
        .map_err(|e| Error::kube(format!("list {what}"), e))?;
    let cluster_roles = Api::<ClusterRole>::all(client.clone()).list(&lp).await.ok();
    let cluster_bindings = Api::<ClusterRoleBinding>::all(client.clone())
        .list(&lp)
        .await
        .ok();
    let cluster_rule = |name: &str| {
        cluster_roles
            .as_ref()
            .and_then(|l| l.items.iter().find(|r| r.name_any() == name))
            .and_then(|r| best(r.rules.as_ref(), pool))
    };
    let mut found = Vec::new();
    for b in &bindings {
        let by_name = match b.role_ref.kind.as_str() {
            "Role" => roles
                .items
                .iter()
                .find(|r| r.name_any() == b.role_ref.name)
                .and_then(|r| best(r.rules.as_ref(), pool)),
            _ => cluster_rule(&b.role_ref.name),
        };
        if let Some(by_name) = by_name {
            let reach = if by_name {
                Reach::Pool
            } else {
                Reach::Namespace
            };
            let name = b.metadata.name.as_deref().unwrap_or_default();
            found.extend(entries(
                b.subjects.as_ref(),
                reach,
                format!("RoleBinding {name}"),
                b.annotations().get(GRANTED_BY_ANNOTATION),
                (reach == Reach::Pool).then_some((pool, name)),
            ));
        }
    }
    let complete = cluster_roles.is_some() && cluster_bindings.is_some();
    for b in cluster_bindings.iter().flatten() {
        if cluster_rule(&b.role_ref.name).is_some() {
            found.extend(entries(
                b.subjects.as_ref(),
                Reach::Cluster,
                format!("ClusterRoleBinding {}", b.name_any()),
                None,
                None,
            ));
        }
    }
    found.sort_by(|a, b| (a.reach, &a.who, &a.via).cmp(&(b.reach, &b.who, &b.via)));
    Ok((found, complete))
}

/// Whether the caller may claim from `pool` in `namespace` (a SelfSubjectAccessReview with the
/// pool's name: the caller's own groups count).
///
/// Errors: [`Error::Kube`] when the review cannot be made.
pub async fn may_claim(client: &Client, namespace: &str, pool: &str) -> Result<bool> {
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(attributes(namespace, pool)),
            ..Default::default()
        },
        ..Default::default()
    };
    let api: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    let answer = api
        .create(&PostParams::default(), &review)
        .await
        .map_err(|e| Error::kube(format!("ask whether you may claim from pool \"{pool}\""), e))?;
    Ok(answer.status.is_some_and(|s| s.allowed))
}

fn attributes(namespace: &str, pool: &str) -> ResourceAttributes {
    ResourceAttributes {
        group: Some(GROUP.into()),
        resource: Some(RESOURCE.into()),
        verb: Some(VERB.into()),
        namespace: Some(namespace.into()),
        name: Some(pool.into()),
        ..Default::default()
    }
}

/// The groups every request of `identity` carries whatever its authenticator: `system:authenticated`
/// and, for a service account, `system:serviceaccounts` and `system:serviceaccounts:<namespace>`
/// (Kubernetes "Authenticating": service account tokens). Other groups come from the identity
/// provider at sign-in, and nobody but the API server sees them.
pub fn known_groups(identity: &str) -> Vec<String> {
    let mut groups = vec![EVERYONE_GROUP.to_owned()];
    if let Some((ns, _)) = identity
        .strip_prefix("system:serviceaccount:")
        .and_then(|rest| rest.split_once(':'))
    {
        groups.push("system:serviceaccounts".into());
        groups.push(format!("system:serviceaccounts:{ns}"));
    }
    groups
}

/// Whether `identity` may claim from `pool` in `namespace`, as far as the cluster can tell
/// without them: a SubjectAccessReview with the groups every request of theirs carries
/// ([`known_groups`]). A grant to another group of theirs is not seen (nobody but the API server
/// knows a user's groups, and only while they make a request): such an assignment needs force.
/// Asked by administrators (assign to someone else) and by the broker.
///
/// Errors: [`Error::Kube`] when the review cannot be made (403 without `create` on
/// `subjectaccessreviews`).
pub async fn is_entitled(
    client: &Client,
    namespace: &str,
    pool: &str,
    identity: &str,
) -> Result<bool> {
    review(client, namespace, pool, identity, known_groups(identity)).await
}

/// A SubjectAccessReview of [`VERB`] on `pool` for `user` in `groups`.
async fn review(
    client: &Client,
    namespace: &str,
    pool: &str,
    user: &str,
    groups: Vec<String>,
) -> Result<bool> {
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            resource_attributes: Some(attributes(namespace, pool)),
            user: Some(user.to_owned()),
            groups: Some(groups),
            ..Default::default()
        },
        ..Default::default()
    };
    let api: Api<SubjectAccessReview> = Api::all(client.clone());
    let answer = api
        .create(&PostParams::default(), &review)
        .await
        .map_err(|e| {
            Error::kube(
                format!("ask whether {user} may claim from pool \"{pool}\""),
                e,
            )
        })?;
    Ok(answer.status.is_some_and(|s| s.allowed))
}

/// Which pools of a namespace the caller may claim from, as RBAC's rules for them say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entitled {
    /// Every pool of the namespace.
    Every,
    /// These pools by name (maybe none).
    Named(BTreeSet<String>),
}

impl Entitled {
    /// Whether `pool` is among them.
    pub fn includes(&self, pool: &str) -> bool {
        match self {
            Entitled::Every => true,
            Entitled::Named(names) => names.contains(pool),
        }
    }
}

/// The pools of `namespace` the caller may claim from, in one request (a
/// SelfSubjectRulesReview: RBAC's rules for the caller there, their groups included). `None`
/// when the cluster says its answer is incomplete (an authorizer other than RBAC decides too):
/// then ask [`may_claim`] per pool.
///
/// Errors: [`Error::Kube`] when the review cannot be made.
pub async fn entitled_pools(client: &Client, namespace: &str) -> Result<Option<Entitled>> {
    let review = SelfSubjectRulesReview {
        spec: SelfSubjectRulesReviewSpec {
            namespace: Some(namespace.to_owned()),
        },
        ..Default::default()
    };
    let api: Api<SelfSubjectRulesReview> = Api::all(client.clone());
    let answer = api
        .create(&PostParams::default(), &review)
        .await
        .map_err(|e| {
            Error::kube(
                format!("ask which pools of namespace \"{namespace}\" you may claim from"),
                e,
            )
        })?;
    let Some(status) = answer.status else {
        return Ok(None);
    };
    if status.incomplete {
        return Ok(None);
    }
    let mut names = BTreeSet::new();
    for r in &status.resource_rules {
        let rule = PolicyRule {
            api_groups: r.api_groups.clone(),
            resources: r.resources.clone(),
            resource_names: r.resource_names.clone(),
            verbs: r.verbs.clone(),
            non_resource_urls: None,
        };
        let named = r.resource_names.clone().unwrap_or_default();
        if named.is_empty() {
            if rule_entitles(&rule, "").is_some() {
                return Ok(Some(Entitled::Every));
            }
        } else {
            names.extend(
                named
                    .into_iter()
                    .filter(|n| rule_entitles(&rule, n).is_some()),
            );
        }
    }
    Ok(Some(Entitled::Named(names)))
}

/// Which pools of one namespace the caller may claim from: what the app's "Get a desktop"
/// offers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "bindings", derive(specta::Type))]
#[serde(rename_all = "camelCase")]
pub struct NamespaceEntitlements {
    /// The namespace.
    pub namespace: String,
    /// Every pool there: a grant without names, or RBAC could not say (the guard judges each
    /// claim).
    pub every: bool,
    /// Else these pools, by name (maybe none).
    pub pools: Vec<String>,
}

/// [`entitled_pools`] for each of `namespaces` (one request each). A namespace whose answer
/// cannot be had, or is incomplete, counts as every pool: the guard still judges each claim,
/// and its refusal names the missing right.
pub async fn entitlements_in(client: &Client, namespaces: &[String]) -> Vec<NamespaceEntitlements> {
    let mut found = Vec::new();
    for namespace in namespaces {
        let answer = entitled_pools(client, namespace).await.ok().flatten();
        found.push(match answer {
            Some(Entitled::Named(pools)) => NamespaceEntitlements {
                namespace: namespace.clone(),
                every: false,
                pools: pools.into_iter().collect(),
            },
            Some(Entitled::Every) | None => NamespaceEntitlements {
                namespace: namespace.clone(),
                every: true,
                pools: Vec::new(),
            },
        });
    }
    found
}

/// The right `identity` lacks for `pool` in `namespace`, as someone who may grant it reads it
/// (an assignment or a label the broker did not follow): "whom pool "P" is not for: RBAC gives
/// alice no claim on desktoppools.corral.dev "P" by name; entitle them (corral-vdi pool entitle P
/// --user alice -n NS)". The broker's reasons and the client's refusal of an assignment say it
/// alike.
pub fn missing_right(identity: &str, namespace: &str, pool: &str) -> String {
    format!(
        "whom pool \"{pool}\" is not for: RBAC gives {identity} no {VERB} on \
         {RESOURCE}.{GROUP} \"{pool}\" by name; entitle them (corral-vdi pool entitle {pool} \
         --user {identity} -n {namespace})"
    )
}

/// The refusal of a claim from `pool` in `namespace` by `identity`, who has no right to it:
/// the missing right and whom to ask.
pub fn not_entitled(identity: &str, namespace: &str, pool: &str) -> Error {
    Error::Refused {
        message: format!(
            "{identity} may not claim from pool \"{pool}\" in namespace \"{namespace}\": RBAC \
             gives them no {VERB} on {RESOURCE}.{GROUP} \"{pool}\" (the pool's entitlement)"
        ),
        suggestion: Some(format!(
            "ask an administrator to entitle you: corral-vdi pool entitle {pool} --user \
             {identity} -n {namespace} (or --group for one of your groups); `corral-vdi pool \
             entitlements {pool} -n {namespace}` lists who may"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(
        groups: &[&str],
        resources: &[&str],
        names: Option<&[&str]>,
        verbs: &[&str],
    ) -> PolicyRule {
        let v = |l: &[&str]| l.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        PolicyRule {
            api_groups: Some(v(groups)),
            resources: Some(v(resources)),
            resource_names: names.map(v),
            verbs: v(verbs),
            non_resource_urls: None,
        }
    }

    #[test]
    fn a_rule_entitles_by_name_by_namespace_or_not_at_all() {
        let named = r(
            &["corral.dev"],
            &["desktoppools"],
            Some(&["dev"]),
            &["claim"],
        );
        assert_eq!(rule_entitles(&named, "dev"), Some(true));
        assert_eq!(rule_entitles(&named, "qa"), None);
        let every = r(&["corral.dev"], &["desktoppools"], None, &["claim"]);
        assert_eq!(rule_entitles(&every, "qa"), Some(false));
        let wild = r(&["*"], &["*"], Some(&[]), &["*"]);
        assert_eq!(rule_entitles(&wild, "qa"), Some(false));
        // Reading a pool is no right to claim from it, nor is another group's resource.
        assert_eq!(
            rule_entitles(
                &r(&["corral.dev"], &["desktoppools"], None, &["get"]),
                "dev"
            ),
            None
        );
        assert_eq!(
            rule_entitles(
                &r(&["kubevirt.io"], &["desktoppools"], None, &["claim"]),
                "dev"
            ),
            None
        );
        assert_eq!(rule_entitles(&rule("dev"), "dev"), Some(true));
    }

    #[test]
    fn a_binding_name_is_valid_for_any_identity_and_differs_per_subject() {
        let odd = Who::Claimant(Claimant::User("o'neil/admin@example.com".into()));
        let name = binding_name("dev", &odd);
        assert!(name.starts_with("corral-vdi:pool:dev:"));
        assert!(!name.contains('/'));
        let group = Who::Claimant(Claimant::Group("o'neil/admin@example.com".into()));
        assert_ne!(binding_name("dev", &group), name);
        assert_ne!(binding_name("qa", &odd), name);
    }

    #[test]
    fn everyone_is_the_authenticated_group_both_ways() {
        let s = Who::Everyone.subject();
        assert_eq!(
            (s.kind.as_str(), s.name.as_str()),
            ("Group", EVERYONE_GROUP)
        );
        assert_eq!(Who::of_subject(&s), Some(Who::Everyone));
        let g = Who::Claimant(Claimant::Group("engineering".into()));
        assert_eq!(Who::of_subject(&g.subject()), Some(g));
    }

    #[test]
    fn known_groups_are_those_every_request_carries() {
        assert_eq!(known_groups("alice"), vec![EVERYONE_GROUP.to_owned()]);
        assert_eq!(
            known_groups("system:serviceaccount:kiosks:dave"),
            vec![
                EVERYONE_GROUP.to_owned(),
                "system:serviceaccounts".to_owned(),
                "system:serviceaccounts:kiosks".to_owned()
            ]
        );
    }
}
