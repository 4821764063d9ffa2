//! Who acts: the identity the cluster reports for a client (SelfSubjectReview), never a name
//! typed into a box, and what that identity may do (SelfSubjectAccessReview).
//!
//! Every action that depends on who acts takes an [`Actor`], which can only be made by asking
//! the API server. Acting as someone else goes through the cluster's own impersonation
//! (`--as`, `cluster::Impersonation` on a workstation), which RBAC checks.

use futures::future::join_all;
use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use kube::Client;
use kube::api::{Api, PostParams};
use serde::Serialize;

use crate::clock::ServerClock;
use crate::error::{Error, ErrorKind, Result};
use crate::names::ADMIN_GROUP;
use crate::state::ClaimSide;

/// The authenticated user of a kubeconfig context, as the API server reports it
/// (SelfSubjectReview, authentication.k8s.io/v1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "bindings", derive(specta::Type))]
#[serde(rename_all = "camelCase")]
pub struct Identity {
    /// `status.userInfo.username`.
    pub username: String,
    /// `status.userInfo.groups`.
    pub groups: Vec<String>,
}

impl Identity {
    /// Whether the identity is a Corral VDI administrator (member of [`ADMIN_GROUP`]).
    pub fn is_admin(&self) -> bool {
        self.groups.iter().any(|g| g == ADMIN_GROUP)
    }
}

/// Who the API server says the client is: a SelfSubjectReview (authentication.k8s.io/v1,
/// GA in Kubernetes 1.28), allowed to every authenticated user by the default RBAC.
///
/// Errors: 401 when the credentials are refused; 403 naming the impersonated user when the
/// cluster refuses `--as`; unreachable when there is no server.
pub async fn whoami(client: &Client) -> Result<Identity> {
    let api: Api<SelfSubjectReview> = Api::all(client.clone());
    let review = api
        .create(&PostParams::default(), &SelfSubjectReview::default())
        .await
        .map_err(|e| match &e {
            kube::Error::Api(status)
                if status.code == 403 && status.message.contains("impersonate") =>
            {
                Error::Rejected {
                    kind: ErrorKind::Forbidden,
                    message: format!(
                        "the cluster refused to let you act as someone else (--as): {}",
                        status.message
                    ),
                    suggestion: "impersonation needs RBAC's `impersonate` verb on that user \
                                 (kubectl auth can-i impersonate users/<name>); leave out --as to \
                                 act as yourself"
                        .into(),
                }
            }
            _ => Error::kube("ask the API server who you are (SelfSubjectReview)", e),
        })?;
    let user = review.status.and_then(|s| s.user_info).unwrap_or_default();
    Ok(Identity {
        username: user.username.unwrap_or_default(),
        groups: user.groups.unwrap_or_default(),
    })
}

/// A client together with who it acts as (from the cluster) and the API server's clock.
/// The only way to make one is to ask the API server, so an action's caller can never be a
/// name somebody typed.
#[derive(Clone)]
pub struct Actor {
    client: Client,
    identity: Identity,
    clock: ServerClock,
}

impl Actor {
    /// Asks the API server who `client` is (SelfSubjectReview) and reads its clock, at once.
    ///
    /// Errors: those of [`whoami`] and [`ServerClock::measure`].
    pub async fn connect(client: Client) -> Result<Self> {
        let (identity, clock) = tokio::join!(whoami(&client), ServerClock::measure(&client));
        Ok(Actor {
            identity: identity?,
            clock: clock?,
            client,
        })
    }

    /// Like [`Actor::connect`], judging time with `clock` (e.g. one measured on a skewed
    /// workstation, [`ServerClock::measure_skewed`]).
    ///
    /// Errors: those of [`whoami`].
    pub async fn with_clock(client: Client, clock: ServerClock) -> Result<Self> {
        let identity = whoami(&client).await?;
        Ok(Actor {
            client,
            identity,
            clock,
        })
    }

    /// The client that acts.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Who acts, as the cluster says.
    pub fn identity(&self) -> &Identity {
        &self.identity
    }

    /// The acting user's name.
    pub fn username(&self) -> &str {
        &self.identity.username
    }

    /// The API server's clock.
    pub fn clock(&self) -> &ServerClock {
        &self.clock
    }

    /// Checks a user name given on the command line (`--user`, kept from the seed's command
    /// line) against the identity from the cluster: it is an assertion, never a way to act as
    /// someone else.
    ///
    /// Errors: [`Error::Rejected`] (`Forbidden`) "you are bob, not alice" when they differ.
    pub fn confirm_user(&self, asserted: Option<&str>) -> Result<()> {
        match asserted {
            Some(user) if user != self.username() => Err(Error::Rejected {
                kind: ErrorKind::Forbidden,
                message: format!(
                    "you are {}, not {user}: --user must name the identity the cluster reports for \
                     your credentials",
                    self.username()
                ),
                suggestion: format!(
                    "leave out --user (it defaults to you), or act as {user} through the cluster's \
                     impersonation with --as {user} if RBAC allows you to"
                ),
            }),
            _ => Ok(()),
        }
    }
}

/// Whether something is allowed, and if not, why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "bindings", derive(specta::Type))]
#[serde(rename_all = "camelCase")]
pub struct Allowed {
    /// Whether the cluster allows it (the server stays the judge when it is tried).
    pub allowed: bool,
    /// Why not, naming the missing permission; `null` when allowed.
    pub reason: Option<String>,
}

impl Allowed {
    fn yes() -> Self {
        Allowed {
            allowed: true,
            reason: None,
        }
    }

    fn no(reason: impl Into<String>) -> Self {
        Allowed {
            allowed: false,
            reason: Some(reason.into()),
        }
    }
}

/// One permission to ask the API server about: verb on group/resource[/subresource].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Permission {
    /// API verb: `get`, `create`, `patch`, `delete`, `update`, ….
    pub verb: &'static str,
    /// API group (`""` for the core group).
    pub group: &'static str,
    /// Resource, plural.
    pub resource: &'static str,
    /// Subresource, if any (`vnc`, `start`, …).
    pub subresource: Option<&'static str>,
}

impl Permission {
    /// `verb resource[/subresource]` in group, as kubectl auth can-i would name it.
    pub fn describe(&self) -> String {
        let resource = match self.subresource {
            Some(sub) => format!("{}/{sub}", self.resource),
            None => self.resource.to_owned(),
        };
        if self.group.is_empty() {
            format!("{} {resource}", self.verb)
        } else {
            format!("{} {resource}.{}", self.verb, self.group)
        }
    }
}

/// Asks the API server (one SelfSubjectAccessReview, authorization.k8s.io/v1) whether the
/// client may do `permission` in `namespace`, on the object `name` when given (RBAC rules
/// limited by `resourceNames`, such as the broker's per-claim grants, answer only then).
///
/// Errors: the review itself failed (unreachable server, a cluster that refuses reviews).
async fn review(
    api: &Api<SelfSubjectAccessReview>,
    namespace: &str,
    name: Option<&str>,
    permission: &Permission,
) -> kube::Result<bool> {
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                namespace: Some(namespace.to_owned()),
                verb: Some(permission.verb.to_owned()),
                group: Some(permission.group.to_owned()),
                resource: Some(permission.resource.to_owned()),
                subresource: permission.subresource.map(str::to_owned),
                name: name.map(str::to_owned),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let answer = api.create(&PostParams::default(), &review).await?;
    Ok(answer.status.as_ref().is_some_and(|s| s.allowed))
}

/// Why RBAC refuses `permission` in `namespace` (on `name`, when given), as a sentence.
fn not_allowed(permission: &Permission, namespace: &str, name: Option<&str>) -> String {
    let on = name.map(|n| format!(" on \"{n}\"")).unwrap_or_default();
    format!(
        "RBAC does not let you {}{on} in namespace \"{namespace}\"",
        permission.describe()
    )
}

/// Asks the API server (SelfSubjectAccessReview, authorization.k8s.io/v1) whether the client
/// may do each of `permissions` in `namespace`, namespace-wide; all at once. A review that
/// fails counts as "not allowed", with the failure as the reason.
pub async fn can_i(client: &Client, namespace: &str, permissions: &[Permission]) -> Vec<Allowed> {
    can_i_on(client, namespace, None, permissions).await
}

/// [`can_i`] on one object: `name` in `namespace` (`None`: namespace-wide). Ask this way for
/// a member's subresources: with a broker, a holder's rights are a Role limited to their member
/// by `resourceNames`, which a namespace-wide review does not see.
pub async fn can_i_on(
    client: &Client,
    namespace: &str,
    name: Option<&str>,
    permissions: &[Permission],
) -> Vec<Allowed> {
    let api: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    join_all(permissions.iter().map(|p| {
        let api = api.clone();
        async move {
            match review(&api, namespace, name, p).await {
                Ok(true) => Allowed::yes(),
                Ok(false) => Allowed::no(not_allowed(p, namespace, name)),
                Err(e) => Allowed::no(format!(
                    "could not ask whether you may {} in namespace \"{namespace}\": {}",
                    p.describe(),
                    crate::error::describe(&e)
                )),
            }
        }
    }))
    .await
}

/// Refuses `act` up front, before anything is changed, when RBAC answers no to any of
/// `permissions` in `namespace` (SelfSubjectAccessReviews, all at once): an act that would
/// fail part-way with a 403 is not begun. A review that cannot be made refuses nothing (the
/// API server still judges each request).
///
/// `act` names what was asked, for the message: `delete pool "dev"`.
///
/// Errors: [`Error::Rejected`] (`Forbidden`) naming the first missing permission.
pub async fn require(
    client: &Client,
    namespace: &str,
    permissions: &[Permission],
    act: &str,
) -> Result<()> {
    let api: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    let answers = join_all(permissions.iter().map(|p| review(&api, namespace, None, p))).await;
    match permissions
        .iter()
        .zip(answers)
        .find(|(_, answer)| matches!(answer, Ok(false)))
    {
        Some((p, _)) => Err(Error::rejected(
            ErrorKind::Forbidden,
            format!(
                "cannot {act}: {}; nothing was changed",
                not_allowed(p, namespace, None)
            ),
            "ask a cluster administrator for that RBAC access, or pick a namespace you may use",
        )),
        None => Ok(()),
    }
}

/// What the acting identity may do in one namespace, for the app to show actions it may not
/// take as disabled with the reason. The API server stays the judge when an action runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "bindings", derive(specta::Type))]
#[serde(rename_all = "camelCase")]
pub struct Permissions {
    /// The namespace these answers are for.
    pub namespace: String,
    /// Whether the identity is a Corral VDI administrator ([`ADMIN_GROUP`]).
    pub admin: bool,
    /// Whether the cluster's guard enforces the claim rules (then only the person a label
    /// names, or an administrator, may release a label-only member).
    pub guarded: bool,
    /// Claim a desktop for yourself ("Get a desktop").
    pub claim: Allowed,
    /// Assign a desktop to someone else ("Assign…").
    pub assign: Allowed,
    /// Create a pool ("New pool…").
    pub create_pool: Allowed,
    /// Delete a pool ("Delete…").
    pub delete_pool: Allowed,
    /// Release someone else's active claim ("Force release").
    pub force_release: Allowed,
    /// Read a member's or a pool's history (list Events: [`crate::audit::list`]).
    pub history: Allowed,
}

const CREATE_LEASES: Permission = Permission {
    verb: "create",
    group: "coordination.k8s.io",
    resource: "leases",
    subresource: None,
};
pub(crate) const DELETE_LEASES: Permission = Permission {
    verb: "delete",
    group: "coordination.k8s.io",
    resource: "leases",
    subresource: None,
};
const PATCH_VMS: Permission = Permission {
    verb: "patch",
    group: "kubevirt.io",
    resource: "virtualmachines",
    subresource: None,
};
pub(crate) const DELETE_VMS: Permission = Permission {
    verb: "delete",
    group: "kubevirt.io",
    resource: "virtualmachines",
    subresource: None,
};
const START_VMS: Permission = Permission {
    verb: "update",
    group: "subresources.kubevirt.io",
    resource: "virtualmachines",
    subresource: Some("start"),
};
/// List Events (the audit trail a history shows, [`crate::audit::list`]).
const LIST_EVENTS: Permission = Permission {
    verb: "list",
    group: "events.k8s.io",
    resource: "events",
    subresource: None,
};
/// Create VirtualMachineClone objects (what a pool create needs first).
pub const CREATE_CLONES: Permission = Permission {
    verb: "create",
    group: "clone.kubevirt.io",
    resource: "virtualmachineclones",
    subresource: None,
};

/// The first refusal among `answers`, else allowed.
fn all_of(answers: &[&Allowed]) -> Allowed {
    answers
        .iter()
        .find(|a| !a.allowed)
        .map_or_else(Allowed::yes, |a| (*a).clone())
}

/// Reviews what `actor` may do in `namespace` (seven SelfSubjectAccessReviews at once), with
/// the guard's rules on top when `guard_installed`: then only administrators assign desktops
/// to others and force releases, and only they create and delete pools (the guard lets only
/// them add a VM to a pool or delete a member; RBAC's refusal, when it refuses, is said first).
/// For the client-side flow; [`permissions_on`] judges the claims as the cluster's side does them.
pub async fn permissions(actor: &Actor, namespace: &str, guard_installed: bool) -> Permissions {
    permissions_on(actor, namespace, guard_installed, ClaimSide::Client).await
}

/// [`permissions`], with claims judged as `side` does them. On [`ClaimSide::Client`] a claim
/// needs Lease create, VM patch (the assigned-to label) and the VM `start` subresource, and a
/// force release Lease delete and VM patch. With a broker (SPEC "Broker") a claim is the Lease
/// alone and a release deletes it (the broker labels, grants, starts and stops): claiming and
/// assigning need Lease create, a force release Lease delete; the claimant role shipped for
/// ordinary users (`corral-vdi:desktop-user`) has no VM patch or power right.
pub async fn permissions_on(
    actor: &Actor,
    namespace: &str,
    guard_installed: bool,
    side: ClaimSide,
) -> Permissions {
    let answers = can_i(
        actor.client(),
        namespace,
        &[
            CREATE_LEASES,
            PATCH_VMS,
            START_VMS,
            CREATE_CLONES,
            DELETE_VMS,
            DELETE_LEASES,
            LIST_EVENTS,
        ],
    )
    .await;
    let [
        leases,
        patch,
        start,
        clones,
        delete_vms,
        delete_leases,
        events,
    ] = &answers[..]
    else {
        unreachable!("one answer per permission asked")
    };
    let admin = actor.identity().is_admin();
    let (claim, release_others) = match side {
        ClaimSide::Client => (
            all_of(&[leases, patch, start]),
            all_of(&[delete_leases, patch]),
        ),
        ClaimSide::Broker => ((*leases).clone(), (*delete_leases).clone()),
    };
    let admin_only = |what: &str| {
        Allowed::no(format!(
            "only members of {ADMIN_GROUP} may {what}; the cluster's Corral VDI guard enforces it"
        ))
    };
    let (assign, force_release) = if guard_installed && !admin {
        (
            admin_only("assign desktops to others"),
            admin_only("release someone else's desktop"),
        )
    } else {
        (claim.clone(), release_others)
    };
    let members = |rbac: Allowed, what: &str| {
        if guard_installed && !admin && rbac.allowed {
            admin_only(what)
        } else {
            rbac
        }
    };
    Permissions {
        namespace: namespace.to_owned(),
        admin,
        guarded: guard_installed,
        claim,
        assign,
        create_pool: members(all_of(&[clones, patch]), "create pools"),
        delete_pool: members(all_of(&[delete_vms, delete_leases]), "delete pools"),
        force_release,
        history: if events.allowed {
            Allowed::yes()
        } else {
            Allowed::no(format!(
                "the history (the cluster's Events) is not yours to read in namespace \
                 \"{namespace}\": ask an administrator to show it, or to let you list events"
            ))
        },
    }
}
