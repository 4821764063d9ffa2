//! The sentences the broker writes: identities as shown, and the reasons it leaves on a
//! member.

use std::borrow::Cow;

use vdi_core::entitlement::missing_right;
use vdi_core::names::{ASSIGNED_TO_LABEL, lease_name};
use vdi_core::state::label_holder;

/// The most characters of an identity shown in an Event's note, a log line or a reason (a
/// holder is any string the Lease's writer chose; a 5,000-character one made every log line
/// 15 kB).
pub const IDENTITY_SHOWN: usize = 253;

/// `identity` as shown in notes, logs and reasons: its first [`IDENTITY_SHOWN`] characters,
/// then "…" when there are more.
pub fn shown(identity: &str) -> Cow<'_, str> {
    match identity.char_indices().nth(IDENTITY_SHOWN) {
        Some((end, _)) => Cow::Owned(format!("{}…", &identity[..end])),
        None => Cow::Borrowed(identity),
    }
}

/// The sentence written when label and Lease disagree (SPEC "Member state": conflict), naming
/// both sides and both ways out: keeping the label's user means deleting the Lease; freeing the
/// member is an administrator's force release, which also removes the label and stops the VM.
pub fn conflict_reason(member: &str, namespace: &str, label: &str, holder: &str) -> String {
    let labelled = label_holder(label);
    let labelled = shown(&labelled);
    let lease = lease_name(member);
    format!(
        "label and Lease disagree: {member} is labelled for {labelled}, but its Lease {lease} \
         is held by {}; neither gets access. An administrator resolves it: to keep it \
         {labelled}'s, delete the Lease (`kubectl delete lease {lease} -n {namespace}`); to \
         free the member, `corral-vdi unassign {member} -n {namespace} --force` (removes the \
         label too and stops the VM)",
        shown(holder)
    )
}

/// The sentence written while the claim Lease is being deleted and finalizers keep it.
pub fn deleting_reason(member: &str, namespace: &str, finalizers: &[String]) -> String {
    let lease = lease_name(member);
    format!(
        "claim Lease {lease} is stuck deleting with finalizers [{}]: an administrator removes \
         them (`kubectl patch lease {lease} -n {namespace} --type merge -p \
         '{{\"metadata\":{{\"finalizers\":null}}}}'`)",
        finalizers.join(", ")
    )
}

/// The sentence written while the claim Lease names a holder but cannot be read.
pub fn unreadable_reason(member: &str, namespace: &str, problem: &str) -> String {
    let lease = lease_name(member);
    format!(
        "claim Lease {lease} is unreadable: {problem}; no access granted: an administrator \
         corrects or deletes it (`kubectl delete lease {lease} -n {namespace}`)"
    )
}

/// Why `holder`'s claim of `member` is not granted: it is `owner`'s dedicated desktop.
pub fn owned_reason(member: &str, namespace: &str, owner: &str, holder: &str) -> String {
    format!(
        "{member} is the dedicated desktop of {}, and {} may not have it: no access granted; \
         release it (`corral-vdi unassign {member} -n {namespace}`) and claim again for a \
         desktop of your own, or an administrator moves it (`corral-vdi pool owner {member} \
         --user {} -n {namespace}`)",
        shown(owner),
        shown(holder),
        shown(holder)
    )
}

/// The sentence written while the claim Lease names one of Kubernetes' own identities
/// (`vdi_core::validate::can_be_a_person`).
pub fn not_a_person_reason(member: &str, namespace: &str, holder: &str) -> String {
    let lease = lease_name(member);
    format!(
        "claim Lease {lease} names {}, one of Kubernetes' own identities, which no person or \
         robot signs in as: no access granted; an administrator deletes it (`kubectl delete \
         lease {lease} -n {namespace}`)",
        shown(holder)
    )
}

/// Why a label-only assignment of `member` to `labelled` (decoded) is not adopted: the member is
/// `owner`'s dedicated desktop.
pub fn label_owned_reason(member: &str, namespace: &str, labelled: &str, owner: &str) -> String {
    format!(
        "{member} is labelled for {}, but it is the dedicated desktop of {}: no claim made for \
         {}; an administrator removes the label (`kubectl label vm {member} -n {namespace} \
         {ASSIGNED_TO_LABEL}-`) or moves the desktop (`corral-vdi pool owner {member} --user {} \
         -n {namespace}`)",
        shown(labelled),
        shown(owner),
        shown(labelled),
        shown(labelled)
    )
}

/// Why a label-only assignment of `member` (of `pool`) to `labelled` (decoded) is not adopted:
/// RBAC does not entitle them to the pool as far as the cluster can tell
/// (`vdi_core::entitlement::is_entitled`).
pub fn label_not_entitled_reason(
    member: &str,
    namespace: &str,
    pool: &str,
    labelled: &str,
) -> String {
    let user = shown(labelled);
    format!(
        "{member} is labelled for {user}, {}, or remove the label (`kubectl label vm {member} -n \
         {namespace} {ASSIGNED_TO_LABEL}-`); no claim made",
        missing_right(&user, namespace, pool)
    )
}

/// Why `holder`'s claim of `member`, in a dedicated pool, is not granted: they own `own` there
/// already, and a member is dedicated to one user at most once.
pub fn owns_elsewhere_reason(member: &str, namespace: &str, own: &str, holder: &str) -> String {
    let user = shown(holder);
    format!(
        "{user} owns {own} in this dedicated pool already, so {member} is not made theirs too: no \
         access granted; release it (`corral-vdi unassign {member} -n {namespace}`) and claim \
         again, which gives {user} {own}, or an administrator frees {own} (`corral-vdi pool \
         owner {own} --none -n {namespace}`)"
    )
}
