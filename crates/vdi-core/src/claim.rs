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
//!
//! Who acts is always the identity from the cluster ([`Actor`]). A label and a Lease that name
//! different people (another tool wrote one of them) are a conflict: never claimed, never
//! resumed over, resolved by an administrator. With the server-side guard installed
//! ([`crate::guard`]), a stale Lease held by someone else is an administrator's to recover: an
//! ordinary claimant skips it and says how many it skipped.

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};

use crate::lease::ClaimLease;
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{Event as KubeEvent, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, Time};
use kube::api::{
    Api, DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams, Preconditions,
};
use kube::runtime::wait::await_condition;
use kube::{Client, ResourceExt};
use serde::Serialize;
use serde_json::json;
use ts_rs::TS;

use crate::error::{Error, Result, is_status};
use crate::identity::Actor;
use crate::labels::ADMIN_GROUP;
use crate::labels::{
    ASSIGNED_TO_LABEL, CLAIMED_AT_ANNOTATION, DEFAULT_LEASE_SECONDS, MEMBER_LABEL, POOL_LABEL,
    encode_identity, lease_name,
};
use crate::model::{ErrorKind, MemberState, MemberView, Scope};
use crate::resources::VirtualMachine;
use crate::state::{group_pools, label_holder, member_view};
use crate::validate;

/// How a claim is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClaimOptions {
    /// `spec.leaseDurationSeconds` of a new or taken-over Lease, in seconds (default 3600;
    /// [`validate::MIN_LEASE_SECONDS`] ..= [`validate::MAX_LEASE_SECONDS`]).
    pub lease_seconds: i64,
    /// Hand out another member even when the user already holds one in this pool (by default
    /// they get that one back).
    pub another: bool,
}

impl Default for ClaimOptions {
    fn default() -> Self {
        ClaimOptions {
            lease_seconds: i64::from(DEFAULT_LEASE_SECONDS),
            another: false,
        }
    }
}

/// How a release is made.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UnassignOptions {
    /// Release an active claim held by someone else (an administrator's act, or whoever RBAC
    /// lets delete the Lease when the guard is not installed); recorded as a Kubernetes Event
    /// on the VM.
    pub force: bool,
}

/// What happened to the VM's power.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, TS, specta::Type)]
#[serde(rename_all = "camelCase", tag = "kind", content = "reason")]
#[ts(export)]
pub enum PowerAction {
    /// The start subresource accepted a start.
    Started,
    /// No start was needed: it runs or starts already, or its run strategy keeps it running;
    /// the reason says which ("printableStatus is already Starting").
    AlreadyRunning(String),
    /// The stop subresource accepted a stop.
    Stopped,
    /// It was not running.
    AlreadyStopped,
    /// A stop was already under way (printableStatus `Stopping`, or KubeVirt refused a second
    /// stop of a `Halted` VM whose VMI is still going away).
    AlreadyStopping,
}

/// A successful claim.
#[derive(Debug, Clone, PartialEq, Serialize, TS, specta::Type)]
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
#[derive(Debug, Clone, PartialEq, Serialize, TS, specta::Type)]
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
    /// Whether someone else's active claim was released (`force`); an Event on the VM
    /// records it.
    pub forced: bool,
}

/// An order of the candidates that differs per identity, so that many claimants spread over
/// the free members instead of all fighting for the first one: each identity gets its own
/// permutation (members sorted by a hash of identity and member name). A rotation would not
/// do: claimants whose starting points collide, or who lose a race, would all move on to the
/// same next member. Deterministic, so a retry by the same person tries the same order; which
/// member wins is still decided only by the API server (create of the Lease, or replace with
/// the resourceVersion precondition).
fn spread<'a>(mut candidates: Vec<&'a MemberView>, identity: &str) -> Vec<&'a MemberView> {
    candidates.sort_by_cached_key(|m| {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        identity.hash(&mut hasher);
        m.name.hash(&mut hasher);
        hasher.finish()
    });
    candidates
}

/// One claim in progress: who claims what for whom, where.
struct Claim<'a> {
    actor: &'a Actor,
    namespace: &'a str,
    pool: &'a str,
    /// Whom the member is for (the Lease's holder).
    assignee: &'a str,
}

/// The Lease `assignee` holds on `member` from `now`; a takeover of `previous` keeps its
/// resourceVersion (the precondition) and counts one more transition.
fn lease_object(
    claim: &Claim<'_>,
    member: &str,
    now: Timestamp,
    lease_seconds: i32,
    previous: Option<&ClaimLease>,
) -> Lease {
    let transitions = previous.map_or(0, |l| l.transitions().saturating_add(1));
    let resource_version = previous.and_then(|l| l.resource_version());
    Lease {
        metadata: ObjectMeta {
            name: Some(lease_name(member)),
            namespace: Some(claim.namespace.to_owned()),
            resource_version,
            labels: Some(BTreeMap::from([
                (POOL_LABEL.to_owned(), claim.pool.to_owned()),
                (MEMBER_LABEL.to_owned(), member.to_owned()),
            ])),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(claim.assignee.to_owned()),
            acquire_time: Some(MicroTime(now)),
            renew_time: Some(MicroTime(now)),
            lease_duration_seconds: Some(lease_seconds),
            lease_transitions: Some(transitions),
            ..Default::default()
        }),
    }
}

/// The refusal for a member whose label and Lease name different people.
fn conflict_error(member: &MemberView) -> Error {
    let lease = member.holder.as_deref().unwrap_or("nobody");
    let label = member.label_holder.as_deref().unwrap_or("nobody");
    Error::rejected(
        ErrorKind::Conflict,
        format!(
            "{} is in conflict: its assigned-to label names {label} but its Lease is held by \
             {lease} (another tool, such as the label-only `corral vdi` CLI, wrote one of them); \
             it is not handed out or resumed until that is resolved",
            member.name
        ),
        format!(
            "an administrator ({ADMIN_GROUP}) resolves it with `corral-vdi unassign {} -n {}`, \
             then it can be claimed again",
            member.name, member.namespace
        ),
    )
}

/// Claims a member of `pool` in `namespace` for `assignee` (SPEC "Assign"), acting as
/// `actor`: `assignee` is whom the desktop is handed to (the actor itself for "Get a desktop";
/// someone else when an administrator assigns).
///
/// 1. Checks the input (no request on bad input), then lists the pool's VMs and Leases (two
///    requests). If `assignee` already holds a member of the pool — an active Lease, or the
///    label alone (a Phase 1 claim, which then gets its Lease) — continues with it
///    (`resumed`), unless [`ClaimOptions::another`]. A member whose label and Lease disagree
///    is never resumed over.
/// 2. Otherwise tries the claimable members in an order spread by identity: a free member's
///    Lease is created; a stale Lease is replaced by an update carrying its resourceVersion.
///    A 409 means another claimant won: the next member is tried. With the guard installed,
///    an ordinary user skips stale Leases held by others (an administrator recovers those).
/// 3. With the Lease held: sets the assigned-to label and claimed-at annotation (one merge
///    patch with the VM's resourceVersion; a label someone else wrote meanwhile is reported as
///    a conflict, not overwritten), then starts the VM through the start subresource unless
///    it runs. An uncontended claim makes four requests before the start.
///
/// Before a Lease is written for a member that would have to be started and asks for GPUs or
/// host devices, the member's devices are checked against the cluster's free ones
/// ([`crate::capacity`]; one read of the cluster per claim, none for members without
/// devices): when no schedulable node can hold them all now, that member is not claimed (a
/// member that runs already may still be). A member the assignee already holds is resumed
/// without the check. The check is not a reservation.
///
/// Errors: [`Error::Invalid`] for a bad namespace, pool name, user or Lease duration, or a
/// pool with no members; [`Error::Refused`] "pool has no free members" with the counts, or
/// "no node has a free <resource> for <member>: <node> 0 of 4 free, …" when no claimable
/// member can be started now for want of devices (nothing written);
/// [`Error::Rejected`] (`Forbidden`) when the guard is installed and a non-administrator
/// assigns to someone else (refused before the pool is read, as the guard would refuse the
/// Lease); [`Error::Rejected`] (`Conflict`) for a member in conflict; [`Error::Partial`] when the label
/// or the start failed after the Lease was won — the Lease is kept so nobody else gets a
/// half-configured desktop, and the holder can retry (a start failure leaves the label on).
pub async fn assign(
    actor: &Actor,
    namespace: &str,
    pool: &str,
    assignee: &str,
    options: &ClaimOptions,
) -> Result<Claimed> {
    let lease_seconds = check_assign(namespace, pool, assignee, options)?;
    let client = actor.client();
    let clock = actor.clock();
    let for_another = assignee != actor.username();
    let guarded = !actor.identity().is_admin()
        && (for_another || !crate::labels::guard_can_check(assignee))
        && crate::guard::status(client)
            .await
            .is_ok_and(|s| s.enforced());
    if guarded && for_another {
        // The guard would refuse the Lease; say so before anything, also when the assignee
        // already holds a member (which would otherwise read as a successful hand-over).
        return Err(Error::rejected(
            ErrorKind::Forbidden,
            format!(
                "{} may not assign desktops to {assignee}: with the cluster's Corral VDI guard \
                 only administrators ({ADMIN_GROUP}) assign desktops to others",
                actor.username()
            ),
            format!(
                "ask an administrator to run `corral-vdi assign {pool} {assignee} -n \
                 {namespace}`, or {assignee} runs `corral-vdi assign {pool} {assignee}` themselves"
            ),
        ));
    }
    if guarded {
        return Err(Error::rejected(
            ErrorKind::Forbidden,
            format!(
                "the cluster's Corral VDI guard cannot check a label for the identity \"{assignee}\" \
                 (longer than {} characters or not printable ASCII), so it lets only \
                 administrators assign desktops to it",
                crate::labels::GUARD_B32_MAX_CHARS
            ),
            format!(
                "ask an administrator ({ADMIN_GROUP}) to run `corral-vdi assign {pool} \
                 {assignee} -n {namespace}`"
            ),
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
    // Every claim Lease of the namespace, joined to members by name (crate::lease): one
    // without labels still holds its member.
    let leases = crate::lease::list(client, &Scope::Namespace(namespace.to_owned())).await?;
    let now = clock.now();
    let pools = group_pools(&vms, &leases, now);
    let members = pools
        .first()
        .map(|p| p.members.as_slice())
        .unwrap_or_default();
    let vm_named = |name: &str| vms.iter().find(|vm| vm.name_any() == name);
    let lease_named = |member: &str| leases.iter().find(|l| l.name_any() == lease_name(member));
    let claim = Claim {
        actor,
        namespace,
        pool,
        assignee,
    };
    let mut devices = StartCheck {
        client,
        devices: None,
    };

    if !options.another {
        let holds = |m: &&MemberView| {
            m.lease
                .as_ref()
                .is_some_and(|l| l.active && l.holder.as_deref() == Some(assignee))
        };
        if let Some(m) = members.iter().find(holds) {
            if m.state == MemberState::Conflict {
                return Err(conflict_error(m));
            }
            let expires = m.lease.as_ref().and_then(|l| l.expires_at).unwrap_or(now);
            let vm = vm_named(&m.name).ok_or_else(|| Error::Config("member vanished".into()))?;
            return finish(&claim, vm, expires, true, 0).await;
        }
        // A member labelled for the assignee without a live Lease of anyone else's (a Phase 1
        // claim, or the assignee's own expired one): it is theirs; give it its Lease.
        let labelled_for = |m: &&MemberView| {
            matches!(
                m.state,
                MemberState::AssignedLegacy | MemberState::AssignedLeaseExpired
            ) && vm_named(&m.name).is_some_and(|vm| {
                vm.labels().get(ASSIGNED_TO_LABEL) == Some(&encode_identity(assignee))
            }) && m
                .lease
                .as_ref()
                .is_none_or(|l| l.holder.as_deref().is_none_or(|h| h == assignee))
        };
        if let Some(m) = members.iter().find(labelled_for) {
            let vm = vm_named(&m.name).ok_or_else(|| Error::Config("member vanished".into()))?;
            if let Some(refusal) = devices.refusal(vm).await? {
                return Err(refusal);
            }
            let now = clock.now();
            let old = lease_named(&m.name);
            let lease = lease_object(&claim, &m.name, now, lease_seconds, old);
            let written = match old {
                Some(old) => {
                    leases_api
                        .replace(&old.name_any(), &PostParams::default(), &lease)
                        .await
                }
                None => leases_api.create(&PostParams::default(), &lease).await,
            };
            return match written {
                Ok(_) => {
                    let expires = lease_end(now, lease_seconds);
                    finish(&claim, vm, expires, true, 0).await
                }
                Err(e) if is_status(&e, 409) => Err(Error::Refused {
                    message: format!(
                        "{} is labelled for {assignee}, but someone else wrote its Lease \
                         meanwhile",
                        m.name
                    ),
                    suggestion: Some("list the pool again to see who holds it".into()),
                }),
                Err(e) => Err(Error::kube(
                    format!("claim {} (Lease {})", m.name, lease_name(&m.name)),
                    e,
                )),
            };
        }
    }

    let candidates = spread(members.iter().filter(|m| m.claimable).collect(), assignee);
    let mut no_room = None;
    let mut lost = 0;
    let mut expired_skipped = 0;
    // Whether the guard stops this actor from taking over others' stale Leases; asked once,
    // and only when such a Lease is in the way.
    let mut guarded: Option<bool> = None;
    for m in candidates {
        let Some(vm) = vm_named(&m.name) else {
            continue;
        };
        let old = lease_named(&m.name);
        let others_stale = m.state == MemberState::FreeStaleLease
            && m.lease
                .as_ref()
                .and_then(|l| l.holder.as_deref())
                .is_some_and(|h| h != actor.username());
        if others_stale && !actor.identity().is_admin() {
            let enforced = match guarded {
                Some(known) => known,
                None => {
                    let known = crate::guard::status(client)
                        .await
                        .is_ok_and(|s| s.enforced());
                    guarded = Some(known);
                    known
                }
            };
            if enforced {
                expired_skipped += 1;
                continue;
            }
        }
        if let Some(refusal) = devices.refusal(vm).await? {
            // Another member may run already (no start needed); else this is the answer.
            no_room.get_or_insert(refusal);
            continue;
        }
        let now = clock.now();
        let attempt = match (m.state, old) {
            (MemberState::FreeStaleLease, Some(old)) => {
                let lease = lease_object(&claim, &m.name, now, lease_seconds, Some(old));
                leases_api
                    .replace(&old.name_any(), &PostParams::default(), &lease)
                    .await
            }
            _ => {
                let lease = lease_object(&claim, &m.name, now, lease_seconds, None);
                leases_api.create(&PostParams::default(), &lease).await
            }
        };
        match attempt {
            Ok(_) => {
                tracing::info!(%namespace, %pool, member = %m.name, %assignee, actor = %actor.username(), races_lost = lost, "Lease won");
                let expires = lease_end(now, lease_seconds);
                return finish(&claim, vm, expires, false, lost).await;
            }
            Err(e) if is_status(&e, 409) => {
                tracing::debug!(member = %m.name, "lost the Lease race; trying the next member");
                lost += 1;
            }
            Err(e) if others_stale && crate::error::is_guard_denial(&e) => {
                expired_skipped += 1;
            }
            Err(e) => {
                return Err(Error::kube(
                    format!("claim {} (Lease {})", m.name, lease_name(&m.name)),
                    e,
                ));
            }
        }
    }
    if let Some(refusal) = no_room {
        return Err(refusal);
    }
    Err(no_free_members(
        pool,
        namespace,
        members,
        lost,
        expired_skipped,
        actor.identity().is_admin(),
    ))
}

/// The capacity check of a claim (SPEC "GPU and host-device capacity admission": assign
/// applies the same check to the member it would start, and refuses before writing the
/// Lease). A member that asks for no device, or that runs already, passes without a request
/// (decided from the VM already listed); otherwise the cluster's devices are read once per
/// claim ([`crate::capacity::read_devices`]) and the member passes if one schedulable node can
/// hold all of its devices now. A member still stopping is judged without the devices it
/// holds itself. An identity that may not read nodes and launcher pods is not refused: the
/// check is skipped (logged) and the scheduler decides, as it always has the last word.
struct StartCheck<'a> {
    client: &'a Client,
    /// `None` until read; `Some(None)` when RBAC hides the devices from this identity.
    devices: Option<Option<crate::capacity::ClusterDevices>>,
}

impl StartCheck<'_> {
    /// The refusal for starting `vm` now, or `None` when it may be claimed.
    ///
    /// Errors: a read of the cluster's devices that fails for another reason than RBAC.
    async fn refusal(&mut self, vm: &VirtualMachine) -> Result<Option<Error>> {
        use crate::capacity::{Demand, plan, read_devices, start_refusal};
        let power = vm.printable_status();
        if matches!(
            power,
            "Running" | "Paused" | "Starting" | "Provisioning" | "Migrating"
        ) {
            return Ok(None);
        }
        let mut demand = Demand::of_vm(vm);
        if !demand.asks_for_devices() {
            return Ok(None);
        }
        demand.ignore_own = matches!(power, "Stopping" | "Terminating");
        if self.devices.is_none() {
            self.devices = Some(match read_devices(self.client).await {
                Ok(devices) => Some(devices),
                Err(e) if e.kind() == ErrorKind::Forbidden => {
                    tracing::warn!(member = %vm.name_any(), error = %e, "capacity check skipped: the cluster's devices are not readable by this identity");
                    None
                }
                Err(e) => return Err(e),
            });
        }
        let Some(Some(devices)) = &self.devices else {
            return Ok(None);
        };
        let planned = plan(devices, &demand, 1);
        Ok((!planned.fits_one).then(|| start_refusal(&planned, &vm.name_any())))
    }
}

/// Checks an assign's input without a request (what [`assign`] does first): the namespace,
/// pool name, user and Lease duration. Returns the duration as the API's `int32`.
///
/// Errors: [`Error::Invalid`] naming the value.
pub fn check_assign(
    namespace: &str,
    pool: &str,
    assignee: &str,
    options: &ClaimOptions,
) -> Result<i32> {
    validate::namespace(namespace)?;
    validate::pool_name(pool)?;
    validate::identity(assignee)?;
    validate::lease_seconds(options.lease_seconds)
}

/// Checks an unassign's input without a request (what [`unassign`] does first).
///
/// Errors: [`Error::Invalid`] naming the value.
pub fn check_unassign(namespace: &str, member: &str) -> Result<()> {
    validate::namespace(namespace)?;
    validate::member_name(member)
}

fn no_free_members(
    pool: &str,
    namespace: &str,
    members: &[MemberView],
    lost: u32,
    expired_skipped: u32,
    admin: bool,
) -> Error {
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
    let expired = match expired_skipped {
        0 => String::new(),
        1 => "; 1 member's claim expired: an administrator can recover it".to_owned(),
        n => format!("; {n} members' claims expired: an administrator can recover them"),
    };
    let suggestion = match (admin, expired_skipped > 0) {
        (true, _) => format!(
            "unassign a member (corral-vdi unassign <member> -n {namespace}, --force for an \
             active claim) or create a bigger pool"
        ),
        (false, true) => format!(
            "ask an administrator ({ADMIN_GROUP}) to recover the expired claims, or to create a \
             bigger pool"
        ),
        (false, false) => format!(
            "try another pool, ask a holder to release their member, or ask an administrator \
             ({ADMIN_GROUP}) for a bigger pool"
        ),
    };
    let all = match members.len() {
        1 => "its 1 member is".to_owned(),
        n => format!("all {n} members are"),
    };
    Error::Refused {
        message: format!(
            "pool has no free members: {all} taken in \"{pool}\" (namespace \"{namespace}\"): {}{races}{expired}",
            breakdown.join(", ")
        ),
        suggestion: Some(suggestion),
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
    let (client, namespace, assignee) = (claim.actor.client(), claim.namespace, claim.assignee);
    let member = vm.name_any();
    let label = encode_identity(assignee);
    let labelled = vm.labels().get(ASSIGNED_TO_LABEL) == Some(&label)
        && vm.annotations().contains_key(CLAIMED_AT_ANNOTATION);
    let vm = if labelled {
        vm.clone()
    } else {
        match label_member(claim, vm, &label).await {
            Ok(vm) => vm,
            Err(e @ Error::Rejected { .. }) => return Err(e),
            Err(e) => {
                // The patch may have landed even though its answer was lost (an API server
                // restart): look before reporting a failure.
                let vms: Api<VirtualMachine> = Api::namespaced(client.clone(), namespace);
                match vms.get(&member).await {
                    Ok(now) if now.labels().get(ASSIGNED_TO_LABEL) == Some(&label) => now,
                    _ => {
                        return Err(Error::Partial {
                            message: format!(
                                "{assignee} holds the Lease on {member}, but labelling the VM failed; the Lease is kept so nobody else gets a half-configured desktop"
                            ),
                            suggestion: format!(
                                "fix the cause and run the same assign again (it resumes with {member}), or `corral-vdi unassign {member}` to back out"
                            ),
                            source: Box::new(e),
                        });
                    }
                }
            }
        }
    };
    let power = start(client, namespace, &vm).await.map_err(|e| Error::Partial {
        message: format!("{member} is assigned to {assignee} (Lease and label), but starting the VM failed"),
        suggestion: format!("fix the cause and run the same assign again, or `corral-vdi unassign {member}` to back out"),
        source: Box::new(e),
    })?;
    Ok(Claimed {
        namespace: namespace.to_owned(),
        pool: claim.pool.to_owned(),
        member,
        identity: assignee.to_owned(),
        resumed,
        races_lost,
        lease_expires_at,
        power,
    })
}

/// Sets the assigned-to label and claimed-at annotation with the VM's resourceVersion as a
/// precondition. On a conflict it reads the VM again: a label someone else wrote meanwhile is
/// reported as a conflict (never overwritten; the Lease is kept, so the member shows as
/// "conflict"), otherwise it checks that the Lease is still the assignee's and tries again.
async fn label_member(
    claim: &Claim<'_>,
    vm: &VirtualMachine,
    label: &str,
) -> Result<VirtualMachine> {
    let (client, namespace, assignee, clock) = (
        claim.actor.client(),
        claim.namespace,
        claim.assignee,
        claim.actor.clock(),
    );
    let member = vm.name_any();
    let vms: Api<VirtualMachine> = Api::namespaced(client.clone(), namespace);
    let mut current = vm.clone();
    for _ in 0..5 {
        if let Some(foreign) = current
            .labels()
            .get(ASSIGNED_TO_LABEL)
            .filter(|l| !l.is_empty() && l.as_str() != label)
        {
            return Err(Error::rejected(
                ErrorKind::Conflict,
                format!(
                    "conflict on {member}: while {assignee} was claiming it, its assigned-to label \
                     was set to {} by another tool; {assignee} holds the Lease, so {member} shows \
                     as \"conflict\" and is not handed out",
                    label_holder(foreign)
                ),
                format!(
                    "an administrator ({ADMIN_GROUP}) resolves it with `corral-vdi unassign \
                     {member} -n {namespace}`; then claim again"
                ),
            ));
        }
        let claimed_at = clock.now().round(jiff::Unit::Second).unwrap_or(clock.now());
        let patch = json!({ "metadata": {
            "resourceVersion": current.resource_version(),
            "labels": { ASSIGNED_TO_LABEL: label },
            "annotations": { CLAIMED_AT_ANNOTATION: claimed_at.to_string() },
        } });
        match vms
            .patch(&member, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(vm) => return Ok(vm),
            Err(e) if is_status(&e, 409) => {
                current = vms
                    .get(&member)
                    .await
                    .map_err(|e| Error::kube(format!("re-read VirtualMachine {member}"), e))?;
                let lease = crate::lease::get(client, namespace, &lease_name(&member)).await?;
                let held = lease.map(|l| crate::lease::lease_view(&l, clock.now()));
                if !held.is_some_and(|h| h.active && h.holder.as_deref() == Some(assignee)) {
                    return Err(Error::Refused {
                        message: format!(
                            "{assignee} lost the claim on {member} while labelling it"
                        ),
                        suggestion: Some("run assign again to get another member".into()),
                    });
                }
            }
            Err(e) => {
                return Err(Error::kube(
                    format!("label VirtualMachine {member} as assigned to {assignee}"),
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
            "printableStatus is already {status}"
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
    // The run strategy says where the VM is going, printableStatus only where it is: a VM
    // started a moment ago still reads Stopped while its run strategy is Always, and would run
    // on, unclaimed, if that were taken for stopped.
    let halted = match vm.spec.run_strategy.as_deref() {
        Some(strategy) => strategy == "Halted",
        None => vm.spec.running == Some(false),
    };
    match vm.printable_status() {
        "Stopped" if halted => return Ok(PowerAction::AlreadyStopped),
        "Stopping" | "Terminating" if halted => return Ok(PowerAction::AlreadyStopping),
        _ => {}
    }
    match power_call(client, namespace, &name, "stop").await {
        Ok(()) => Ok(PowerAction::Stopped),
        Err(kube::Error::Api(s)) if s.code == 409 && s.message.contains("not running") => {
            Ok(PowerAction::AlreadyStopped)
        }
        // KubeVirt (pkg/virt-api/rest/lifecycle.go): a second stop of a VM whose run strategy
        // is already Halted, while its VMI is still going away.
        Err(kube::Error::Api(s))
            if s.code == 409 && s.message.contains("Halted only supports manual stop") =>
        {
            Ok(PowerAction::AlreadyStopping)
        }
        Err(e) => Err(Error::kube(
            format!("stop VirtualMachine {name} (subresources.kubevirt.io stop)"),
            e,
        )),
    }
}

/// Releases `member` as `actor` (SPEC "Unassign").
///
/// An active Lease may be released only by its holder; anyone else is refused with the holder
/// and the expiry, unless [`UnassignOptions::force`] (an administrator's act; the API server
/// judges it, and with the guard installed only administrators pass), which is recorded as an
/// Event on the VM naming who released it from whom. A member in conflict (label and Lease
/// disagree) is resolved only by an administrator. A stale Lease, or a label-only (Phase 1)
/// member, may be released by whoever RBAC (and the guard) allows. In order: the assigned-to
/// label and claimed-at annotation are removed (not blanked), the VM is stopped (unclaimed
/// desktops never stay running), and the Lease is deleted with its resourceVersion as a
/// precondition. If a step fails, the Lease is kept and running the same unassign again
/// finishes the job.
///
/// Errors: [`Error::Invalid`] for a bad namespace or member name (no request sent), a VM that
/// does not exist or is no pool member; [`Error::Refused`] for someone else's active Lease or a
/// Lease that changed meanwhile; [`Error::Rejected`] (`Conflict`) for a conflict and a caller
/// who is no administrator; [`Error::Rejected`] (`Forbidden`, nothing changed) for a force by
/// someone who is no administrator while the guard is enforced; [`Error::Partial`] when the label was removed but stopping failed.
pub async fn unassign(
    actor: &Actor,
    namespace: &str,
    member: &str,
    options: &UnassignOptions,
) -> Result<Released> {
    check_unassign(namespace, member)?;
    let client = actor.client();
    let caller = actor.username();
    let vms: Api<VirtualMachine> = Api::namespaced(client.clone(), namespace);
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
    let lease = crate::lease::get(client, namespace, &lease_name(member)).await?;
    let view = member_view(&vm, lease.as_ref(), actor.clock().now());
    if view.state == MemberState::Conflict && !actor.identity().is_admin() {
        return Err(conflict_error(&view));
    }
    let mut forced = false;
    // A Lease that cannot be judged may be live: only its holder (or a forcing administrator)
    // releases it.
    if let Some(l) = view
        .lease
        .as_ref()
        .filter(|l| l.active || l.problem.is_some())
        && l.holder.as_deref() != Some(caller)
        && view.state != MemberState::Conflict
    {
        let holder = l.holder.clone().unwrap_or_default();
        let until = match (&l.problem, l.expires_at) {
            (Some(problem), _) => format!("an unknown time (its Lease cannot be read: {problem})"),
            (None, Some(t)) => crate::model::describe_instant(t, actor.clock().now()),
            (None, None) => "(no expiry)".into(),
        };
        if !options.force {
            // An unreadable Lease never expires by itself: no "wait until".
            let (message, wait) = match &l.problem {
                Some(problem) => (
                    format!(
                        "{member} is claimed by {holder}, but its Lease {} cannot be read \
                         ({problem}), so it may be live; only {holder} can release it",
                        lease_name(member)
                    ),
                    String::new(),
                ),
                None => (
                    format!(
                        "{member} is claimed by {holder} until {until}; only {holder} can \
                         release it"
                    ),
                    format!(", or wait until the Lease expires at {until}"),
                ),
            };
            return Err(Error::Refused {
                message,
                suggestion: Some(format!(
                    "ask {holder} to release it{wait}; an administrator ({ADMIN_GROUP}) can take \
                     it back now with `corral-vdi unassign {member} --force`"
                )),
            });
        }
        // The guard lets only administrators release someone else's claim: say so before
        // anything (its refusal of the first write would say it less plainly).
        if !actor.identity().is_admin()
            && crate::guard::status(client)
                .await
                .is_ok_and(|s| s.enforced())
        {
            return Err(Error::rejected(
                ErrorKind::Forbidden,
                format!(
                    "{caller} may not force-release {member} from {holder}: with the cluster's \
                     Corral VDI guard only administrators ({ADMIN_GROUP}) release someone \
                     else's desktop; nothing was changed"
                ),
                format!(
                    "ask {holder} to release it, or wait until the Lease expires at {until}, or \
                     ask a member of {ADMIN_GROUP}"
                ),
            ));
        }
        forced = true;
    }

    // The claim changes first and the power last: whether the Lease may be deleted (RBAC, the
    // guard) is asked with a dry run before anything changes, so a refusal leaves the VM as it
    // was. The Lease itself goes last, so nobody claims the member while it stops.
    if let Some(lease) = &lease {
        delete_lease(client, namespace, member, lease, true).await?;
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
        delete_lease(client, namespace, member, lease, false).await?;
    }
    if forced {
        record_force_release(actor, namespace, &vm, view.holder.as_deref().unwrap_or("")).await;
    }
    tracing::info!(%namespace, %member, caller = %caller, previous = ?view.holder, forced, "member released");
    Ok(Released {
        namespace: namespace.to_owned(),
        member: member.to_owned(),
        previous_holder: view.holder,
        lease_released: lease.is_some(),
        label_removed: has_presentation,
        power,
        forced,
    })
}

/// When a Lease written at `now` for `seconds` ends; the end of the calendar if that is
/// sooner (only a server clock gone wrong gets there: `seconds` is at most 7 days).
fn lease_end(now: Timestamp, seconds: i32) -> Timestamp {
    now.checked_add(SignedDuration::from_secs(i64::from(seconds)))
        .unwrap_or(Timestamp::MAX)
}

/// Deletes `member`'s claim Lease with its resourceVersion and uid as preconditions, or with
/// `dry_run` only asks the API server (RBAC, the guard) whether it would. Gone already is
/// fine.
///
/// Errors: [`Error::Refused`] when the Lease changed meanwhile (409: someone claimed it);
/// [`Error::Kube`] for any other refusal (a guard denial names its rule).
async fn delete_lease(
    client: &Client,
    namespace: &str,
    member: &str,
    lease: &ClaimLease,
    dry_run: bool,
) -> Result<()> {
    let params = DeleteParams {
        dry_run,
        preconditions: Some(Preconditions {
            resource_version: lease.resource_version(),
            uid: lease.uid(),
        }),
        ..Default::default()
    };
    let leases: Api<Lease> = Api::namespaced(client.clone(), namespace);
    match leases.delete(&lease.name_any(), &params).await {
        Ok(_) => Ok(()),
        Err(e) if is_status(&e, 404) => Ok(()),
        Err(e) if is_status(&e, 409) => Err(Error::Refused {
            message: format!(
                "the Lease of {member} changed while it was being released (someone claimed it \
                 meanwhile){}",
                if dry_run { "; nothing was changed" } else { "" }
            ),
            suggestion: Some("list the pool again to see who holds it".into()),
        }),
        Err(e) => Err(Error::kube(
            format!(
                "release Lease {}{}",
                lease.name_any(),
                if dry_run {
                    " (asked before anything changed: nothing was)"
                } else {
                    ""
                }
            ),
            e,
        )),
    }
}

/// Reason of the Event a forced release leaves on the VM.
pub const FORCE_RELEASE_REASON: &str = "ForceReleased";

/// Records a forced release as a Kubernetes Event on the VM (who, when, from whom); a refusal
/// to write it is logged, not fatal: the release itself has happened.
async fn record_force_release(actor: &Actor, namespace: &str, vm: &VirtualMachine, from: &str) {
    let now = actor.clock().now();
    let member = vm.name_any();
    let event = KubeEvent {
        metadata: ObjectMeta {
            generate_name: Some(format!("{member}.force-release.")),
            namespace: Some(namespace.to_owned()),
            ..Default::default()
        },
        involved_object: ObjectReference {
            api_version: Some("kubevirt.io/v1".into()),
            kind: Some("VirtualMachine".into()),
            name: Some(member.clone()),
            namespace: Some(namespace.to_owned()),
            uid: vm.uid(),
            ..Default::default()
        },
        reason: Some(FORCE_RELEASE_REASON.into()),
        message: Some(format!(
            "{} force-released {member} from {from} at {}",
            actor.username(),
            now.round(jiff::Unit::Second).unwrap_or(now)
        )),
        type_: Some("Warning".into()),
        action: Some("ForceRelease".into()),
        source: Some(EventSource {
            component: Some("corral-vdi".into()),
            ..Default::default()
        }),
        reporting_component: Some("corral-vdi".into()),
        reporting_instance: Some(actor.username().to_owned()),
        first_timestamp: Some(Time(now)),
        last_timestamp: Some(Time(now)),
        count: Some(1),
        ..Default::default()
    };
    let events: Api<KubeEvent> = Api::namespaced(actor.client().clone(), namespace);
    if let Err(e) = events.create(&PostParams::default(), &event).await {
        tracing::warn!(%member, error = %e, "could not record the forced release as an Event");
    }
}
