//! Pool create as both front ends (CLI `pool create`, the app's New pool dialog) run it: one
//! rule for what a new pool is. On a cluster whose broker does the cluster's half of claims
//! ([`ClaimSide::Broker`]) a new pool is managed: its members, then its DesktopPool with the
//! policy asked for, and the broker's right to act in the namespace. Without a broker it is a
//! label-only pool, and a policy (which only a broker acts on) is refused before anything is
//! created.

use kube::Client;
use serde::{Deserialize, Serialize};

use super::change::{PolicyChanges, base_spec};
use super::ops;
use crate::entitlement::Who;
use crate::error::{Error, ErrorKind, Result};
use crate::policy::PolicyField;
use crate::policy::{DesktopPool, DesktopPoolSpec};
use crate::pool::{
    CreateInput, CreateOptions, CreatePool, CreateProgress, PoolCreated, create_pool,
    create_problems,
};
use crate::state::ClaimSide;

/// What the app's "New pool" dialog asks for: the pool and, on a cluster with a broker, its
/// policy.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[cfg_attr(feature = "bindings", derive(specta::Type))]
#[serde(rename_all = "camelCase")]
pub struct NewPool {
    /// Namespace of the golden VM and of the pool.
    pub namespace: String,
    /// Pool name (a DNS-1123 label).
    pub name: String,
    /// The golden VM.
    pub golden: String,
    /// Number of members.
    pub size: u32,
    /// Clone a golden VM that is not stopped (crash-consistent disks).
    pub allow_running: bool,
    /// Per-member clone timeout, in seconds.
    pub timeout_seconds: u32,
    /// The policy beyond golden VM and size (warm, durations, on release); empty for the
    /// defaults, and on a cluster without a broker.
    pub policy: PolicyChanges,
}

impl NewPool {
    /// The create request and the policy.
    pub fn split(self) -> (CreatePool, PolicyChanges) {
        let request = CreatePool {
            namespace: self.namespace,
            name: self.name,
            golden: self.golden,
            size: self.size,
            options: CreateOptions {
                timeout: std::time::Duration::from_secs(u64::from(self.timeout_seconds)),
                allow_running: self.allow_running,
                ..Default::default()
            },
        };
        (request, self.policy)
    }
}

/// Checks a create without a request, as [`create`] does first: the first of [`judge`]'s
/// problems is the refusal; else the member names the pool would get and its DesktopPool's spec.
///
/// Errors: those of [`crate::pool::validate_create`], [`crate::pool::check_managed_name`] and
/// [`super::change::spec_for`];
/// [`Error::Rejected`] `Invalid` for a policy where `side` is [`ClaimSide::Client`].
fn checked(
    request: &CreatePool,
    policy: &PolicyChanges,
    side: ClaimSide,
) -> Result<(Vec<String>, DesktopPoolSpec)> {
    if let Some(first) = problems(request, policy, side).into_iter().next() {
        return Err(first.error);
    }
    let members = crate::pool::member_names(&request.name, request.size);
    Ok((
        members,
        policy.apply(&base_spec(&request.golden, request.size)),
    ))
}

/// A field of the New pool dialog (and the `pool create` flag it stands for).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "bindings", derive(specta::Type))]
#[serde(rename_all = "camelCase")]
pub enum NewPoolField {
    /// The pool name.
    Name,
    /// The namespace (the dialog's own: a problem here is the view's namespace).
    Namespace,
    /// The golden VM.
    Golden,
    /// The number of members.
    Size,
    /// The per-member clone timeout.
    Timeout,
    /// The warm members.
    Warm,
    /// The disconnect grace.
    DisconnectGrace,
    /// The longest claim.
    MaxSession,
    /// The idle timeout.
    IdleTimeout,
    /// What a release does (with the assignment).
    OnRelease,
    /// A policy on a cluster without a broker.
    Policy,
}

impl From<CreateInput> for NewPoolField {
    fn from(input: CreateInput) -> Self {
        match input {
            CreateInput::Name => NewPoolField::Name,
            CreateInput::Namespace => NewPoolField::Namespace,
            CreateInput::Golden => NewPoolField::Golden,
            CreateInput::Size => NewPoolField::Size,
            CreateInput::Timeout => NewPoolField::Timeout,
        }
    }
}

impl From<PolicyField> for NewPoolField {
    fn from(field: PolicyField) -> Self {
        match field {
            PolicyField::Golden => NewPoolField::Golden,
            PolicyField::Size => NewPoolField::Size,
            PolicyField::Warm => NewPoolField::Warm,
            PolicyField::DisconnectGrace => NewPoolField::DisconnectGrace,
            PolicyField::MaxSession => NewPoolField::MaxSession,
            PolicyField::IdleTimeout => NewPoolField::IdleTimeout,
            PolicyField::OnRelease => NewPoolField::OnRelease,
        }
    }
}

/// One problem of a New pool request, for the field it marks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "bindings", derive(specta::Type))]
#[serde(rename_all = "camelCase")]
pub struct NewPoolProblem {
    /// The field at fault.
    pub field: NewPoolField,
    /// The rule's sentence, in words for the form beside the field ("5 is out of range (0 to
    /// the size, 1)", with no `spec.warm`).
    pub message: String,
}

/// What the New pool dialog shows under its fields: the members the pool would get, and every
/// problem of the input at once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "bindings", derive(specta::Type))]
#[serde(rename_all = "camelCase")]
pub struct NewPoolCheck {
    /// `<name>-1` … `<name>-<size>`; empty while the name or size has a problem.
    pub members: Vec<String>,
    /// Every problem, in the order [`create`] meets them (its first is [`create`]'s refusal).
    pub problems: Vec<NewPoolProblem>,
}

/// [`create`]'s first check for a form: every problem with its field, not only the first, and
/// the members when name and size allow them. No request.
pub fn judge(request: &CreatePool, policy: &PolicyChanges, side: ClaimSide) -> NewPoolCheck {
    let problems: Vec<NewPoolProblem> = problems(request, policy, side)
        .into_iter()
        .map(|p| NewPoolProblem {
            field: p.field,
            message: p.words,
        })
        .collect();
    let members = if problems
        .iter()
        .any(|p| matches!(p.field, NewPoolField::Name | NewPoolField::Size))
    {
        Vec::new()
    } else {
        crate::pool::member_names(&request.name, request.size)
    };
    NewPoolCheck { members, problems }
}

/// One problem: its field, its words for a form, and the error a command refuses with.
struct Problem {
    field: NewPoolField,
    words: String,
    error: Error,
}

/// Every problem of a create, in the order [`create`] refuses them: the input ([`create_problems`]); with a
/// broker, a name too long for a DesktopPool; the policy's fields
/// ([`DesktopPoolSpec::problems`]); a policy where no broker runs one.
fn problems(request: &CreatePool, policy: &PolicyChanges, side: ClaimSide) -> Vec<Problem> {
    let mut found: Vec<Problem> = create_problems(request)
        .into_iter()
        .map(|(input, error)| Problem {
            field: input.into(),
            words: error.to_string(),
            error,
        })
        .collect();
    if side == ClaimSide::Broker
        && let Err(error) = crate::pool::check_managed_name(&request.name)
    {
        found.push(Problem {
            field: NewPoolField::Name,
            words: error.to_string(),
            error,
        });
    }
    found.extend(
        policy
            .apply(&base_spec(&request.golden, request.size))
            .problems()
            .into_iter()
            // Golden and size are the create's own, judged above in the create's words.
            .filter(|e| !matches!(e.field, PolicyField::Golden | PolicyField::Size))
            .map(|e| Problem {
                field: e.field.into(),
                words: e.reason().to_owned(),
                error: policy.refusal(&e),
            }),
    );
    if side == ClaimSide::Client && !policy.is_empty() {
        let error = Error::rejected(
            ErrorKind::Invalid,
            "warm members, disconnect grace, max session, idle timeout and on release are the \
             pool's policy, which the broker runs, and this cluster has no broker; nothing was \
             created",
            "install the broker (corral-vdi broker install), or create the pool without them",
        );
        found.push(Problem {
            field: NewPoolField::Policy,
            words: error.to_string(),
            error,
        });
    }
    found
}

/// A pool made by [`create`]: its members, and its DesktopPool when the cluster has a broker.
#[derive(Debug)]
pub struct Created {
    /// The members, and what deserves a look ([`PoolCreated::warnings`]).
    pub pool: PoolCreated,
    /// The DesktopPool written (a managed pool), `None` on a cluster without a broker.
    pub policy: Option<DesktopPool>,
}

/// Creates the pool `request` asks for ([`create_pool`], reporting each step to `progress`),
/// entitles `who` to claim from it ([`crate::entitlement::entitle`]; nobody named: everyone who
/// may claim in the namespace, [`Who::Everyone`]; a warning naming the command when it cannot)
/// and, where `side` is [`ClaimSide::Broker`] (the open link knows it: no read here), its
/// DesktopPool with `golden`, `size` and `policy` applied, then lets the broker act in the
/// namespace ([`crate::broker::namespaces::serve`]; a warning naming the command when it
/// cannot).
///
/// Errors, before anything is created: [`judge`]'s first problem. Then those of [`create_pool`]; and
/// [`Error::Partial`] when the members exist but the DesktopPool could not be written (the fix
/// names `pool adopt`).
pub async fn create<P>(
    client: &Client,
    request: &CreatePool,
    policy: &PolicyChanges,
    who: &[Who],
    side: ClaimSide,
    progress: P,
) -> Result<Created>
where
    P: Fn(CreateProgress) + Send + Sync,
{
    let (_, spec) = checked(request, policy, side)?;
    let mut pool = create_pool(client, request, progress).await?;
    entitle(client, &mut pool, who).await;
    if side == ClaimSide::Client {
        return Ok(Created { pool, policy: None });
    }
    let (ns, name) = (&pool.namespace, &pool.name);
    let written = ops::create(client, ns, name, spec)
        .await
        .map_err(|e| Error::Partial {
            message: format!(
                "pool \"{name}\" was created ({} members), but its DesktopPool was not",
                pool.members.len()
            ),
            suggestion: format!(
                "adopt it: corral-vdi pool adopt {name} -n {ns} --from {}, then pool set",
                pool.golden
            ),
            source: Box::new(e),
        })?;
    pool.warnings
        .extend(crate::broker::namespaces::serve_or_warn(client, ns).await);
    Ok(Created {
        pool,
        policy: Some(written),
    })
}

/// Entitles `who` (nobody named: [`Who::Everyone`]) to the new pool, as its creator; what it
/// could not write is a warning on the pool naming the command that does.
async fn entitle(client: &Client, pool: &mut PoolCreated, who: &[Who]) {
    let who = if who.is_empty() {
        vec![Who::Everyone]
    } else {
        who.to_vec()
    };
    let (ns, name) = (pool.namespace.clone(), pool.name.clone());
    let written = match crate::identity::whoami(client).await {
        Ok(me) => crate::entitlement::entitle(client, &ns, &name, &who, &me.username).await,
        Err(e) => Err(e),
    };
    match written {
        Ok(said) => pool.entitled = said,
        Err(e) => pool.warnings.push(format!(
            "nobody may claim from pool \"{name}\" yet: its entitlement was not written ({e}); \
             corral-vdi pool entitle {name} --everyone -n {ns} (or --user, --group) writes it"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(name: &str, size: u32, timeout_seconds: u64) -> CreatePool {
        CreatePool {
            namespace: "corral-vms".into(),
            name: name.into(),
            golden: "golden-desktop".into(),
            size,
            options: CreateOptions {
                timeout: std::time::Duration::from_secs(timeout_seconds),
                ..Default::default()
            },
        }
    }

    #[test]
    fn a_form_gets_every_problem_on_its_field_and_a_command_the_first() {
        let policy = PolicyChanges {
            warm: Some(5),
            max_session: Some("8x".into()),
            ..Default::default()
        };
        let bad = request("Dev_Pool", 2, 0);
        let judged = judge(&bad, &policy, ClaimSide::Broker);
        let fields: Vec<NewPoolField> = judged.problems.iter().map(|p| p.field).collect();
        assert_eq!(
            fields,
            [
                NewPoolField::Name,
                NewPoolField::Timeout,
                NewPoolField::Warm,
                NewPoolField::MaxSession
            ]
        );
        assert!(judged.members.is_empty(), "no members for a bad name");
        assert_eq!(
            judged.problems[2].message,
            "5 is out of range (0 to the size, 2)"
        );
        let first = checked(&bad, &policy, ClaimSide::Broker)
            .unwrap_err()
            .to_string();
        assert_eq!(
            first, judged.problems[0].message,
            "the command's refusal is the first"
        );

        let good = request("dev", 2, 120);
        let fine = judge(&good, &PolicyChanges::default(), ClaimSide::Broker);
        assert!(fine.problems.is_empty(), "{:?}", fine.problems);
        assert_eq!(fine.members, ["dev-1", "dev-2"]);
        assert_eq!(
            checked(&good, &PolicyChanges::default(), ClaimSide::Broker)
                .unwrap()
                .0,
            fine.members
        );
    }

    #[test]
    fn a_policy_without_a_broker_and_a_name_too_long_for_a_desktoppool_are_named() {
        let warm = PolicyChanges {
            warm: Some(1),
            ..Default::default()
        };
        let judged = judge(&request("dev", 2, 120), &warm, ClaimSide::Client);
        assert_eq!(judged.problems.len(), 1);
        assert_eq!(judged.problems[0].field, NewPoolField::Policy);
        let long = "p".repeat(crate::pool::MAX_MANAGED_NAME + 1);
        let managed = judge(
            &request(&long, 2, 120),
            &PolicyChanges::default(),
            ClaimSide::Broker,
        );
        assert_eq!(
            managed.problems.iter().map(|p| p.field).collect::<Vec<_>>(),
            [NewPoolField::Name]
        );
        let plain = judge(
            &request(&long, 2, 120),
            &PolicyChanges::default(),
            ClaimSide::Client,
        );
        assert!(plain.problems.is_empty(), "{:?}", plain.problems);
    }
}
