//! Claims: handing a pool member to an identity through its Lease, and releasing it
//! (SPEC "Assign", "Unassign").
//!
//! The Lease `corral-vdi-<member>` is the ownership record. It is created first-writer-wins
//! (a 409 `AlreadyExists` means another claimant won), and a stale one is taken over only by
//! an update carrying the resourceVersion that was read (a 409 `Conflict` means another
//! claimant won) — never delete-then-create, never an unconditional patch. Only the Lease
//! holder then writes the VM's presentation label and annotation, with the VM's
//! resourceVersion as a precondition, so the label can never name someone who lost the Lease.
//! However many claimants race, each member ends with at most one holder.
//!
//! Expiry is judged with the API server's clock ([`ServerClock`]), and Lease times are written
//! in it, so a workstation whose clock is off neither steals a live claim nor keeps a dead one.

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{
    Api, DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams, Preconditions,
};
use kube::runtime::wait::await_condition;
use kube::{Client, ResourceExt};
use serde::Serialize;
use serde_json::json;
use ts_rs::TS;

use crate::cluster::ServerClock;
use crate::error::{Error, Result, is_status};
use crate::labels::{
    ASSIGNED_TO_LABEL, CLAIMED_AT_ANNOTATION, DEFAULT_LEASE_SECONDS, MEMBER_LABEL, POOL_LABEL,
    encode_identity, is_dns1123_label, lease_name,
};
use crate::model::{MemberState, MemberView};
use crate::resources::VirtualMachine;
use crate::state::{group_pools, member_view};

/// How a claim is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClaimOptions {
    /// `spec.leaseDurationSeconds` of a new or taken-over Lease, in seconds (default 3600).
    pub lease_seconds: i32,
}

impl Default for ClaimOptions {
    fn default() -> Self {
        ClaimOptions {
            lease_seconds: DEFAULT_LEASE_SECONDS,
        }
    }
}

/// What happened to the VM's power.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, TS)]
#[serde(rename_all = "camelCase", tag = "kind", content = "reason")]
#[ts(export)]
pub enum PowerAction {
    /// The start subresource accepted a start.
    Started,
    /// It runs already, or its run strategy keeps it running; the reason says which.
    AlreadyRunning(String),
    /// The stop subresource accepted a stop.
    Stopped,
    /// It was not running.
    AlreadyStopped,
}

/// A successful claim.
#[derive(Debug, Clone, PartialEq, Serialize, TS)]
#[serde(rename_all = "camelCase")]
#[ts(export)]
pub struct Claimed {
    /// Namespace of the pool.
    pub namespace: String,
    /// Pool name.
    pub pool: String,
    /// The member now held.
    pub member: String,
    /// The holder (`spec.holderIdentity`).
    pub identity: String,
    /// `true` when the identity already held this member (an idempotent retry).
    pub resumed: bool,
    /// Races lost to other claimants before this member was won.
    pub races_lost: u32,
    /// When the Lease expires (API server time).
    pub lease_expires_at: Timestamp,
    /// What was done to the VM's power.
    pub power: PowerAction,
}

/// A successful release.
#[derive(Debug, Clone, PartialEq, Serialize, TS)]
#[serde(rename_all = "camelCase")]
#[ts(export)]
pub struct Released {
    /// Namespace of the member.
    pub namespace: String,
    /// The member released.
    pub member: String,
    /// Who held it (Lease holder or label), if anyone.
    pub previous_holder: Option<String>,
    /// Whether a Lease was deleted.
    pub lease_released: bool,
    /// Whether the assigned-to label and claimed-at annotation were removed.
    pub label_removed: bool,
    /// What was done to the VM's power.
    pub power: PowerAction,
}

/// An order of the candidates that differs per identity, so that many claimants spread over
/// the free members instead of all fighting for the first one.
fn spread<'a>(mut candidates: Vec<&'a MemberView>, identity: &str) -> Vec<&'a MemberView> {
    if candidates.is_empty() {
        return candidates;
    }
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    identity.hash(&mut hasher);
    let start = (hasher.finish() % candidates.len() as u64) as usize;
    candidates.rotate_left(start);
    candidates
}

/// One claim in progress: who claims what, where, judged by which clock.
struct Claim<'a> {
    client: &'a Client,
    namespace: &'a str,
    pool: &'a str,
    identity: &'a str,
    clock: &'a ServerClock,
}

/// The Lease `identity` holds on `member` from `now`; a takeover of `previous` keeps its
/// resourceVersion (the precondition) and counts one more transition.
fn lease_object(
    claim: &Claim<'_>,
    member: &str,
    now: Timestamp,
    options: &ClaimOptions,
    previous: Option<&Lease>,
) -> Lease {
    let (namespace, pool, identity) = (claim.namespace, claim.pool, claim.identity);
    let transitions = previous
        .and_then(|l| l.spec.as_ref())
        .map_or(0, |s| s.lease_transitions.unwrap_or(0) + 1);
    let resource_version = previous.and_then(|l| l.resource_version());
    Lease {
        metadata: ObjectMeta {
            name: Some(lease_name(member)),
            namespace: Some(namespace.to_owned()),
            resource_version,
            labels: Some(BTreeMap::from([
                (POOL_LABEL.to_owned(), pool.to_owned()),
                (MEMBER_LABEL.to_owned(), member.to_owned()),
            ])),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(identity.to_owned()),
            acquire_time: Some(MicroTime(now)),
            renew_time: Some(MicroTime(now)),
            lease_duration_seconds: Some(options.lease_seconds),
            lease_transitions: Some(transitions),
            ..Default::default()
        }),
    }
}

/// Claims a member of `pool` in `namespace` for `identity` (SPEC "Assign").
///
/// 1. Lists the pool's VMs and Leases (two requests). If `identity` already holds an active
///    Lease on a member, continues with it (`resumed`).
/// 2. Otherwise tries the claimable members in an order spread by identity: a free member's
///    Lease is created; a stale Lease is replaced by an update carrying its resourceVersion.
///    A 409 means another claimant won: the next member is tried.
/// 3. With the Lease held: sets the assigned-to label and claimed-at annotation (one merge
///    patch with the VM's resourceVersion), then starts the VM through the start subresource
///    unless it runs. An uncontended claim makes four requests before the start.
///
/// Errors: [`Error::Invalid`] for a bad pool name or a pool with no members;
/// [`Error::Refused`] "pool has no free members" with the counts; [`Error::Partial`] when the
/// label or the start failed after the Lease was won — the Lease is kept so nobody else gets a
/// half-configured desktop, and the holder can retry (a start failure leaves the label on).
pub async fn assign(
    client: &Client,
    namespace: &str,
    pool: &str,
    identity: &str,
    clock: &ServerClock,
    options: &ClaimOptions,
) -> Result<Claimed> {
    if identity.trim().is_empty() {
        return Err(Error::invalid(
            "no user to assign to",
            "name the user (the identity the cluster knows them by)",
        ));
    }
    if !is_dns1123_label(pool) {
        return Err(Error::invalid(
            format!("\"{pool}\" is not a valid pool name"),
            "pool names are DNS-1123 labels: lower-case letters, digits and '-'",
        ));
    }
    let vms_api: Api<VirtualMachine> = Api::namespaced(client.clone(), namespace);
    let leases_api: Api<Lease> = Api::namespaced(client.clone(), namespace);
    let selector = ListParams::default().labels(&format!("{POOL_LABEL}={pool}"));
    let vms = vms_api
        .list(&selector)
        .await
        .map_err(|e| {
            Error::kube(
                format!("list the members of pool \"{pool}\" in namespace \"{namespace}\""),
                e,
            )
        })?
        .items;
    if vms.is_empty() {
        return Err(Error::invalid(
            format!("pool \"{pool}\" has no members in namespace \"{namespace}\""),
            format!(
                "check the pool name and the namespace (-n); `corral-vdi pool list -n {namespace}` lists the pools"
            ),
        ));
    }
    let leases = leases_api
        .list(&selector)
        .await
        .map_err(|e| {
            Error::kube(
                format!("list the Leases of pool \"{pool}\" in namespace \"{namespace}\""),
                e,
            )
        })?
        .items;
    let now = clock.now();
    let pools = group_pools(&vms, &leases, now);
    let members = pools
        .first()
        .map(|p| p.members.as_slice())
        .unwrap_or_default();
    let vm_named = |name: &str| vms.iter().find(|vm| vm.name_any() == name);
    let claim = Claim {
        client,
        namespace,
        pool,
        identity,
        clock,
    };

    let mine = members.iter().find(|m| {
        m.lease
            .as_ref()
            .is_some_and(|l| l.active && l.holder.as_deref() == Some(identity))
    });
    if let Some(m) = mine {
        let expires = m.lease.as_ref().and_then(|l| l.expires_at).unwrap_or(now);
        let vm = vm_named(&m.name).ok_or_else(|| Error::Config("member vanished".into()))?;
        return finish(&claim, vm, expires, true, 0).await;
    }

    let candidates = spread(members.iter().filter(|m| m.claimable).collect(), identity);
    let mut lost = 0;
    for m in candidates {
        let Some(vm) = vm_named(&m.name) else {
            continue;
        };
        let now = clock.now();
        let attempt = match (
            m.state,
            leases.iter().find(|l| l.name_any() == lease_name(&m.name)),
        ) {
            (MemberState::FreeStaleLease, Some(old)) => {
                let lease = lease_object(&claim, &m.name, now, options, Some(old));
                leases_api
                    .replace(&old.name_any(), &PostParams::default(), &lease)
                    .await
            }
            _ => {
                let lease = lease_object(&claim, &m.name, now, options, None);
                leases_api.create(&PostParams::default(), &lease).await
            }
        };
        match attempt {
            Ok(_) => {
                tracing::info!(%namespace, %pool, member = %m.name, %identity, races_lost = lost, "Lease won");
                let expires = now + SignedDuration::from_secs(i64::from(options.lease_seconds));
                return finish(&claim, vm, expires, false, lost).await;
            }
            Err(e) if is_status(&e, 409) => {
                tracing::debug!(member = %m.name, "lost the Lease race; trying the next member");
                lost += 1;
            }
            Err(e) => {
                return Err(Error::kube(
                    format!("claim {} (Lease {})", m.name, lease_name(&m.name)),
                    e,
                ));
            }
        }
    }
    Err(no_free_members(pool, namespace, members, lost))
}

fn no_free_members(pool: &str, namespace: &str, members: &[MemberView], lost: u32) -> Error {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for m in members {
        *counts.entry(m.state.label()).or_default() += 1;
    }
    let breakdown: Vec<String> = counts
        .iter()
        .map(|(state, n)| format!("{n} {state}"))
        .collect();
    let races = if lost > 0 {
        format!("; lost {lost} race(s) to other claimants")
    } else {
        String::new()
    };
    Error::Refused {
        message: format!(
            "pool has no free members: pool \"{pool}\" in namespace \"{namespace}\" has {} members ({}){races}",
            members.len(),
            breakdown.join(", ")
        ),
        suggestion: Some(
            "unassign a member (corral-vdi unassign <member>) or create a bigger pool".into(),
        ),
    }
}

/// With the Lease held: the presentation label and annotation, then the start.
async fn finish(
    claim: &Claim<'_>,
    vm: &VirtualMachine,
    lease_expires_at: Timestamp,
    resumed: bool,
    races_lost: u32,
) -> Result<Claimed> {
    let (client, namespace, identity, clock) =
        (claim.client, claim.namespace, claim.identity, claim.clock);
    let member = vm.name_any();
    let label = encode_identity(identity);
    let labelled = vm.labels().get(ASSIGNED_TO_LABEL) == Some(&label)
        && vm.annotations().contains_key(CLAIMED_AT_ANNOTATION);
    let vm = if labelled {
        vm.clone()
    } else {
        label_member(client, namespace, vm, identity, &label, clock)
            .await
            .map_err(|e| Error::Partial {
                message: format!("{identity} holds the Lease on {member}, but labelling the VM failed; the Lease is kept so nobody else gets a half-configured desktop"),
                suggestion: format!("fix the cause and run the same assign again (it resumes with {member}), or `corral-vdi unassign {member}` to back out"),
                source: Box::new(e),
            })?
    };
    let power = start(client, namespace, &vm).await.map_err(|e| Error::Partial {
        message: format!("{member} is assigned to {identity} (Lease and label), but starting the VM failed"),
        suggestion: format!("fix the cause and run the same assign again, or `corral-vdi unassign {member}` to back out"),
        source: Box::new(e),
    })?;
    Ok(Claimed {
        namespace: namespace.to_owned(),
        pool: claim.pool.to_owned(),
        member,
        identity: identity.to_owned(),
        resumed,
        races_lost,
        lease_expires_at,
        power,
    })
}

/// Sets the assigned-to label and claimed-at annotation with the VM's resourceVersion as a
/// precondition; on a conflict, checks that the Lease is still ours before trying again.
async fn label_member(
    client: &Client,
    namespace: &str,
    vm: &VirtualMachine,
    identity: &str,
    label: &str,
    clock: &ServerClock,
) -> Result<VirtualMachine> {
    let member = vm.name_any();
    let vms: Api<VirtualMachine> = Api::namespaced(client.clone(), namespace);
    let leases: Api<Lease> = Api::namespaced(client.clone(), namespace);
    let mut resource_version = vm.resource_version();
    for _ in 0..5 {
        let claimed_at = clock.now().round(jiff::Unit::Second).unwrap_or(clock.now());
        let patch = json!({ "metadata": {
            "resourceVersion": resource_version,
            "labels": { ASSIGNED_TO_LABEL: label },
            "annotations": { CLAIMED_AT_ANNOTATION: claimed_at.to_string() },
        } });
        match vms
            .patch(&member, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(vm) => return Ok(vm),
            Err(e) if is_status(&e, 409) => {
                let lease = leases.get(&lease_name(&member)).await.map_err(|e| {
                    Error::kube(format!("re-read Lease {}", lease_name(&member)), e)
                })?;
                let held = crate::state::lease_view(&lease, clock.now());
                if !(held.active && held.holder.as_deref() == Some(identity)) {
                    return Err(Error::Refused {
                        message: format!(
                            "{identity} lost the claim on {member} while labelling it"
                        ),
                        suggestion: Some("run assign again to get another member".into()),
                    });
                }
                resource_version = vms
                    .get(&member)
                    .await
                    .map_err(|e| Error::kube(format!("re-read VirtualMachine {member}"), e))?
                    .resource_version();
            }
            Err(e) => {
                return Err(Error::kube(
                    format!("label VirtualMachine {member} as assigned to {identity}"),
                    e,
                ));
            }
        }
    }
    Err(Error::Refused {
        message: format!("{member} kept changing while it was being labelled"),
        suggestion: Some("run assign again".into()),
    })
}

/// Calls a KubeVirt power subresource (`start` or `stop`) of a VM; the API server routes it to
/// virt-api. Returns the API's error (409 with KubeVirt's reason) unchanged.
async fn power_call(client: &Client, namespace: &str, vm: &str, action: &str) -> kube::Result<()> {
    let url = format!(
        "/apis/subresources.kubevirt.io/v1/namespaces/{namespace}/virtualmachines/{vm}/{action}"
    );
    let request = http::Request::put(url)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(b"{}".to_vec())
        .map_err(kube::Error::HttpError)?;
    client.request_text(request).await.map(|_| ())
}

/// How long a claim waits for a VM that is still stopping (from an earlier release) before
/// starting it, in seconds.
pub const STOPPING_WAIT_SECONDS: u64 = 90;

/// Starts a VM unless it runs. KubeVirt's 409s are explained: "VM is already running" and a
/// run strategy that keeps it running (`Always`, `Once`) are fine for a claim; any other is an
/// error. A VM still stopping (its VMI not yet gone) is waited for first, since KubeVirt
/// refuses to start it until then and it would end up stopped.
async fn start(client: &Client, namespace: &str, vm: &VirtualMachine) -> Result<PowerAction> {
    let name = vm.name_any();
    let mut status = vm.printable_status().to_owned();
    if matches!(status.as_str(), "Stopping" | "Terminating") {
        status = wait_until_stopped(client, namespace, &name).await?;
    }
    if matches!(
        status.as_str(),
        "Running" | "Starting" | "Provisioning" | "Migrating"
    ) {
        return Ok(PowerAction::AlreadyRunning(format!(
            "printableStatus is {status}"
        )));
    }
    match power_call(client, namespace, &name, "start").await {
        Ok(()) => Ok(PowerAction::Started),
        Err(kube::Error::Api(s)) if s.code == 409 && s.message.contains("already running") => Ok(
            PowerAction::AlreadyRunning("KubeVirt: VM is already running".into()),
        ),
        Err(kube::Error::Api(s))
            if s.code == 409 && s.message.contains("does not support manual start") =>
        {
            Ok(PowerAction::AlreadyRunning(format!(
                "its run strategy keeps it running (KubeVirt: {})",
                s.message
            )))
        }
        Err(e) => Err(Error::kube(
            format!("start VirtualMachine {name} (subresources.kubevirt.io start)"),
            e,
        )),
    }
}

/// Waits (watching the VM, at most [`STOPPING_WAIT_SECONDS`]) until a stopping VM has
/// stopped; returns its printableStatus then.
async fn wait_until_stopped(client: &Client, namespace: &str, name: &str) -> Result<String> {
    let vms: Api<VirtualMachine> = Api::namespaced(client.clone(), namespace);
    let settled = |vm: Option<&VirtualMachine>| {
        vm.is_none_or(|vm| !matches!(vm.printable_status(), "Stopping" | "Terminating"))
    };
    let wait = await_condition(vms, name, settled);
    match tokio::time::timeout(std::time::Duration::from_secs(STOPPING_WAIT_SECONDS), wait).await {
        Ok(Ok(vm)) => Ok(vm.map_or_else(
            || "Unknown".to_owned(),
            |vm| vm.printable_status().to_owned(),
        )),
        Ok(Err(e)) => Err(Error::Config(format!("watch VirtualMachine {name}: {e}"))),
        Err(_) => Err(Error::invalid(
            format!(
                "VirtualMachine {name} is still stopping after {STOPPING_WAIT_SECONDS} s, so it cannot be started yet"
            ),
            format!("check it with `kubectl get vmi -n {namespace} {name}`"),
        )),
    }
}

async fn stop(client: &Client, namespace: &str, vm: &VirtualMachine) -> Result<PowerAction> {
    let name = vm.name_any();
    if vm.printable_status() == "Stopped" {
        return Ok(PowerAction::AlreadyStopped);
    }
    match power_call(client, namespace, &name, "stop").await {
        Ok(()) => Ok(PowerAction::Stopped),
        Err(kube::Error::Api(s)) if s.code == 409 && s.message.contains("not running") => {
            Ok(PowerAction::AlreadyStopped)
        }
        Err(e) => Err(Error::kube(
            format!("stop VirtualMachine {name} (subresources.kubevirt.io stop)"),
            e,
        )),
    }
}

/// Releases `member` on behalf of `caller` (SPEC "Unassign").
///
/// An active Lease may be released only by its holder: anyone else is refused with the holder
/// and the expiry. A stale Lease, or a label-only (Phase 1) member, may be released by whoever
/// RBAC allows. In order: the assigned-to label and claimed-at annotation are removed (not
/// blanked), the VM is stopped (unclaimed desktops never stay running), and the Lease is
/// deleted with its resourceVersion as a precondition. If a step fails, the Lease is kept and
/// running the same unassign again finishes the job.
///
/// Errors: [`Error::Invalid`] for a VM that does not exist or is no pool member;
/// [`Error::Refused`] for someone else's active Lease or a Lease that changed meanwhile;
/// [`Error::Partial`] when the label was removed but stopping failed.
pub async fn unassign(
    client: &Client,
    namespace: &str,
    member: &str,
    caller: &str,
    clock: &ServerClock,
) -> Result<Released> {
    let vms: Api<VirtualMachine> = Api::namespaced(client.clone(), namespace);
    let leases: Api<Lease> = Api::namespaced(client.clone(), namespace);
    let vm = vms
        .get_opt(member)
        .await
        .map_err(|e| {
            Error::kube(
                format!("read VirtualMachine {member} in namespace \"{namespace}\""),
                e,
            )
        })?
        .ok_or_else(|| {
            Error::invalid(
                format!("VirtualMachine \"{member}\" not found in namespace \"{namespace}\""),
                "check the member name and the namespace (-n)",
            )
        })?;
    if !vm.labels().contains_key(POOL_LABEL) {
        return Err(Error::invalid(
            format!(
                "VirtualMachine \"{member}\" is not a pool member (it has no {POOL_LABEL} label)"
            ),
            "unassign works on pool members only",
        ));
    }
    let lease = leases
        .get_opt(&lease_name(member))
        .await
        .map_err(|e| Error::kube(format!("read Lease {}", lease_name(member)), e))?;
    let view = member_view(&vm, lease.as_ref(), clock.now());
    if let Some(l) = view.lease.as_ref().filter(|l| l.active)
        && l.holder.as_deref() != Some(caller)
    {
        let holder = l.holder.clone().unwrap_or_default();
        let until = l
            .expires_at
            .map(|t| t.to_string())
            .unwrap_or_else(|| "(no expiry)".into());
        return Err(Error::Refused {
            message: format!(
                "{member} is claimed by {holder} until {until}; only {holder} can release it"
            ),
            suggestion: Some(format!(
                "ask {holder} to release it, or wait until the Lease expires at {until}; then anyone RBAC allows can recover it"
            )),
        });
    }

    let has_presentation = vm.labels().contains_key(ASSIGNED_TO_LABEL)
        || vm.annotations().contains_key(CLAIMED_AT_ANNOTATION);
    if has_presentation {
        let patch = json!({ "metadata": {
            "labels": { ASSIGNED_TO_LABEL: null },
            "annotations": { CLAIMED_AT_ANNOTATION: null },
        } });
        vms.patch(member, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|e| Error::kube(format!("remove the assignment label of {member}"), e))?;
    }
    let power = stop(client, namespace, &vm)
        .await
        .map_err(|e| Error::Partial {
            message: format!(
                "removed the assignment of {member}{}, but stopping the VM failed",
                if lease.is_some() {
                    " (its Lease is kept)"
                } else {
                    ""
                }
            ),
            suggestion: format!("fix the cause and run `corral-vdi unassign {member}` again"),
            source: Box::new(e),
        })?;
    if let Some(lease) = &lease {
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                resource_version: lease.resource_version(),
                uid: lease.uid(),
            }),
            ..Default::default()
        };
        match leases.delete(&lease.name_any(), &params).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) if is_status(&e, 409) => {
                return Err(Error::Refused {
                    message: format!(
                        "the Lease of {member} changed while it was being released (someone claimed it meanwhile)"
                    ),
                    suggestion: Some("list the pool again to see who holds it".into()),
                });
            }
            Err(e) => {
                return Err(Error::kube(
                    format!("release Lease {}", lease.name_any()),
                    e,
                ));
            }
        }
    }
    tracing::info!(%namespace, %member, %caller, previous = ?view.holder, "member released");
    Ok(Released {
        namespace: namespace.to_owned(),
        member: member.to_owned(),
        previous_holder: view.holder,
        lease_released: lease.is_some(),
        label_removed: has_presentation,
        power,
    })
}
