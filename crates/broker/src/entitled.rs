//! Whether a claim's holder may be granted their member for want of entitlement (SPEC
//! "Entitlements"). The guard checked a holder's own claim where it was written, with their own
//! groups; what is left to the broker:
//! - the claim is of the member's own pool: a Lease labelled with another pool than its member's
//!   VM was entitled for the wrong pool, and is never granted;
//! - an administrator's assignment to someone else (the Lease's
//!   [`ASSIGNED_BY_ANNOTATION`] names another than the holder), and a claim without a pool
//!   label (which only administrators write), is granted only when RBAC
//!   entitles the holder as far as the cluster can tell
//!   ([`vdi_core::entitlement::is_entitled`]: a SubjectAccessReview), or when the administrator
//!   forced it ([`FORCED_BY_ANNOTATION`]).
//!
//! A holder granted the member already is not asked again: losing the right ends no claim.

use kube::ResourceExt;
use vdi_core::entitlement::{is_entitled, missing_right};
use vdi_core::lease::ClaimLease;
use vdi_core::names::{
    ASSIGNED_BY_ANNOTATION, BROKER_USER, FORCED_BY_ANNOTATION, GRANTED_TO_ANNOTATION, POOL_LABEL,
    encode_identity,
};
use vdi_core::resources::VirtualMachine;

/// What the entitlement rule asks of the cluster before a grant.
#[derive(Debug, PartialEq, Eq)]
pub enum Check {
    /// Nothing: no claim to grant, granted already, the holder's own claim, or forced.
    None,
    /// Refused without asking: the reason.
    Refuse(String),
    /// Ask whether the holder is entitled to the pool.
    Ask {
        /// The pool.
        pool: String,
        /// The holder.
        holder: String,
        /// Who assigned it.
        by: String,
    },
}

/// Decides, without a request, what the rule needs for `member`'s claim `lease` held by
/// `holder` (see the module doc).
pub fn check(member: &str, vm: &VirtualMachine, lease: &ClaimLease, holder: &str) -> Check {
    let annotation = |key: &str| vm.annotations().get(key).map(String::as_str);
    if annotation(GRANTED_TO_ANNOTATION) == Some(encode_identity(holder).as_str()) {
        return Check::None;
    }
    let vm_pool = vm.labels().get(POOL_LABEL).cloned().unwrap_or_default();
    if let Some(claimed) = lease.labels().get(POOL_LABEL)
        && *claimed != vm_pool
    {
        return Check::Refuse(format!(
            "the claim Lease of {member} says pool \"{claimed}\", but {member} is a member of pool \
             \"{vm_pool}\": a claim is entitled for its member's own pool; release it and claim \
             from \"{vm_pool}\""
        ));
    }
    let forced = lease.annotations().contains_key(FORCED_BY_ANNOTATION);
    let by = lease.annotations().get(ASSIGNED_BY_ANNOTATION);
    let unlabelled = !lease.labels().contains_key(POOL_LABEL);
    match by {
        // An administrator's assignment to someone else, not forced.
        Some(by) if by != holder && !forced => Check::Ask {
            pool: vm_pool,
            holder: holder.to_owned(),
            // The broker writes a claim only for an administrator's label it adopted.
            by: if by == BROKER_USER {
                "an administrator's assigned-to label".to_owned()
            } else {
                by.clone()
            },
        },
        // A claim without a pool label, which the guard lets only administrators write: the
        // authorizer was asked about no pool.
        None if unlabelled => Check::Ask {
            pool: vm_pool,
            holder: holder.to_owned(),
            by: "an administrator".to_owned(),
        },
        _ => Check::None,
    }
}

/// Why a claim is not granted for want of entitlement.
#[derive(Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Not now: an administrator's assignment to someone RBAC does not entitle (an entitlement
    /// or force may follow; the Lease stays, as the administrator wrote it).
    NotYet(String),
    /// Never, whoever is entitled to what: a claim of another pool than its member's. The
    /// broker releases it at once, so that it blocks nobody.
    Never(String),
}

/// [`check`], asking the cluster where it must: why a grant is refused, if it is.
///
/// Errors: the SubjectAccessReview failed (the reconcile is retried).
pub async fn refusal(
    client: &kube::Client,
    namespace: &str,
    member: &str,
    vm: &VirtualMachine,
    lease: &ClaimLease,
    holder: &str,
) -> vdi_core::Result<Option<Refusal>> {
    Ok(match check(member, vm, lease, holder) {
        Check::None => None,
        Check::Refuse(why) => Some(Refusal::Never(why)),
        Check::Ask { pool, holder, by } => {
            if is_entitled(client, namespace, &pool, &holder).await? {
                None
            } else {
                Some(Refusal::NotYet(format!(
                    "{by} assigned {member} to {holder}, {}, or assign again with --force",
                    missing_right(&holder, namespace, &pool)
                )))
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn vm(granted: Option<&str>) -> VirtualMachine {
        let mut annotations = json!({});
        if let Some(g) = granted {
            annotations[GRANTED_TO_ANNOTATION] = json!(g);
        }
        serde_json::from_value(json!({
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
            "metadata": { "name": "dev-1", "labels": { POOL_LABEL: "dev" },
                          "annotations": annotations },
            "spec": {}
        }))
        .unwrap()
    }

    fn lease(pool: Option<&str>, annotations: serde_json::Value) -> ClaimLease {
        let labels = pool.map_or(json!({}), |p| json!({ POOL_LABEL: p }));
        serde_json::from_value(json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": { "name": "corral-vdi-dev-1", "labels": labels,
                          "annotations": annotations },
            "spec": { "holderIdentity": "carol" }
        }))
        .unwrap()
    }

    #[test]
    fn a_holders_own_claim_of_the_members_pool_needs_nothing_more() {
        assert_eq!(
            check("dev-1", &vm(None), &lease(Some("dev"), json!({})), "carol"),
            Check::None
        );
        // A Lease without a pool label (only an administrator writes one): asked about.
        assert_eq!(
            check("dev-1", &vm(None), &lease(None, json!({})), "carol"),
            Check::Ask {
                pool: "dev".into(),
                holder: "carol".into(),
                by: "an administrator".into()
            }
        );
    }

    #[test]
    fn a_claim_labelled_for_another_pool_is_refused() {
        let Check::Refuse(why) =
            check("dev-1", &vm(None), &lease(Some("open"), json!({})), "carol")
        else {
            panic!("granted a claim of another pool");
        };
        assert!(
            why.contains("says pool \"open\"") && why.contains("pool \"dev\""),
            "{why}"
        );
    }

    #[test]
    fn an_assignment_by_someone_else_is_asked_unless_forced_or_granted() {
        let assigned = json!({ ASSIGNED_BY_ANNOTATION: "admin" });
        assert_eq!(
            check(
                "dev-1",
                &vm(None),
                &lease(Some("dev"), assigned.clone()),
                "carol"
            ),
            Check::Ask {
                pool: "dev".into(),
                holder: "carol".into(),
                by: "admin".into()
            }
        );
        let forced = json!({ ASSIGNED_BY_ANNOTATION: "admin", FORCED_BY_ANNOTATION: "admin" });
        assert_eq!(
            check("dev-1", &vm(None), &lease(Some("dev"), forced), "carol"),
            Check::None
        );
        // Granted before: losing the right ends no claim.
        assert_eq!(
            check(
                "dev-1",
                &vm(Some("carol")),
                &lease(Some("dev"), assigned),
                "carol"
            ),
            Check::None
        );
    }
}
