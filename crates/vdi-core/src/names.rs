//! Exact names Corral VDI uses on the cluster, shared with the `corral vdi` Go CLI, and the
//! reversible encoding of identities into label values.
//!
//! Interoperability rule (SPEC "Names on the cluster"): these strings must never change.

use data_encoding::BASE32_NOPAD;
use sha2::{Digest, Sha256};

/// VM label that makes a VirtualMachine a pool member: `corral.dev/vdi-pool=<pool>`.
pub const POOL_LABEL: &str = "corral.dev/vdi-pool";
/// VM label marking a golden image, a VM that pools are cloned from (value `"true"`), written by
/// pool create ([`crate::pool::mark_golden_image`]). With the guard, only administrators change
/// such a VM or delete it (`guard/guard.yaml`, policy `corral-vdi-golden-images`). A
/// `corral.dev/vdi-*` key, so clones do not copy it ([`crate::pool::CLONE_FILTERS`]).
pub const GOLDEN_IMAGE_LABEL: &str = "corral.dev/vdi-golden-image";
/// VM label presenting who a member is assigned to (encoded with [`encode_identity`]).
pub const ASSIGNED_TO_LABEL: &str = "corral.dev/vdi-assigned-to";
/// VM annotation with the RFC 3339 UTC time the member was claimed.
pub const CLAIMED_AT_ANNOTATION: &str = "corral.dev/vdi-claimed-at";
/// Lease label naming the member the Lease guards.
pub const MEMBER_LABEL: &str = "corral.dev/vdi-member";
/// Name of the member `index` (1-based) of `pool`: `<pool>-<index>`.
pub fn member_name(pool: &str, index: u32) -> String {
    format!("{pool}-{index}")
}

/// The members of a pool of `size`: `<pool>-1` … `<pool>-<size>`.
pub fn member_names(pool: &str, size: u32) -> Vec<String> {
    (1..=size).map(|i| member_name(pool, i)).collect()
}

/// Prefix of the ownership Lease's name: `corral-vdi-<member>`.
pub const LEASE_PREFIX: &str = "corral-vdi-";
/// Default `spec.leaseDurationSeconds` of a claim Lease, in seconds (one hour).
pub const DEFAULT_LEASE_SECONDS: i32 = 3600;
/// The group whose members are Corral VDI administrators: they assign desktops to others,
/// recover expired claims, resolve conflicts and force releases. The server-side guard
/// (`guard/guard.yaml`) names the same group.
pub const ADMIN_GROUP: &str = "corral-vdi:admins";
/// Start of every message the server-side guard's policies deny with (`guard/guard.yaml`):
/// how a refusal is told to be the guard's ([`crate::error::is_guard_denial`]).
pub const DENIAL_PREFIX: &str = "corral-vdi guard:";

/// Annotation on the broker's Deployment naming the image it was installed with
/// (`corral-vdi broker install --image`, the chart's `image`): an image chosen at install is
/// no change on the cluster (`corral-vdi broker status`).
pub const BROKER_IMAGE_ANNOTATION: &str = "corral.dev/broker-image";
/// Namespace of the in-cluster broker (SPEC "Broker"): its ServiceAccount, Deployment and
/// leader-election Lease live there.
pub const BROKER_NAMESPACE: &str = "corral-vdi-system";
/// Name of the broker's ServiceAccount, Deployment, and leader-election Lease (in
/// [`BROKER_NAMESPACE`]). Never a claim Lease: members are named `<pool>-<i>`, so no claim
/// Lease is `corral-vdi-broker`.
pub const BROKER_NAME: &str = "corral-vdi-broker";
/// The user the broker acts as on the cluster: its ServiceAccount
/// (`system:serviceaccount:<namespace>:<name>`, Kubernetes' service-account user names).
pub const BROKER_USER: &str = "system:serviceaccount:corral-vdi-system:corral-vdi-broker";
/// Annotation the leading broker writes on its leader Lease while it grants no claim because
/// the cluster does not enforce the claim rules (the guard is missing or differs from this
/// version's): why, in a sentence; absent while it grants.
pub const BROKER_REFUSING_ANNOTATION: &str = "corral.dev/broker-refusing";
/// VM annotation the broker writes when a claim ends (or passes to another holder) while the
/// member's VMI still runs: that VMI's uid. The last holder's session (their logged-in
/// desktop, their open streams) lives as long as that VMI, which a graceful shutdown keeps for
/// up to its `terminationGracePeriodSeconds`; so the next holder is bound only once the
/// member runs another VMI or none. Removed when the next holder is granted.
pub const LAST_SESSION_ANNOTATION: &str = "corral.dev/vdi-last-session";
/// Prefix of the per-claim Role and RoleBinding the broker makes in the member's namespace:
/// `corral-vdi-claim-<member>`.
pub const GRANT_PREFIX: &str = "corral-vdi-claim-";
/// VM annotation the broker writes once the holder's access is bound: the holder, encoded as
/// the assigned-to label is ([`encode_identity`]). Absent: no grant.
pub const GRANTED_TO_ANNOTATION: &str = "corral.dev/vdi-granted-to";
/// VM annotation the broker writes when it cannot finish a claim (one sentence naming the
/// cause and the fix, e.g. no node has a free GPU); removed once it can.
pub const BROKER_REASON_ANNOTATION: &str = "corral.dev/vdi-broker-reason";
/// Label on everything the broker makes (grants), Kubernetes' recommended `managed-by` key.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
/// Annotation on the leader-election Lease: RFC 3339 UTC time of the leader's last full
/// reconcile.
pub const BROKER_LAST_RECONCILE_ANNOTATION: &str = "corral.dev/broker-last-reconcile";
/// Prefix of the annotations on the leader-election Lease where each replica records itself:
/// `replica.corral.dev/<identity>` = RFC 3339 UTC time of its last heartbeat.
pub const BROKER_REPLICA_ANNOTATION_PREFIX: &str = "replica.corral.dev/";
/// Prefix of each broker replica's readiness record on the leader-election Lease
/// (`unready.corral.dev/<identity>`), written with its heartbeat: "since <RFC 3339>: <why>"
/// while it is not ready, "from <RFC 3339> to <RFC 3339>: <why>" for the last time it was not;
/// absent when it never was. `broker status` shows it.
pub const BROKER_UNREADY_ANNOTATION_PREFIX: &str = "unready.corral.dev/";

/// VM annotation the broker writes on a claimed member of a managed pool whose guest reports
/// no logged-in user (KubeVirt's `userlist` subresource): RFC 3339 UTC time of the first such
/// reading; removed once a user is logged in or the claim ends ([`crate::policy::reclaim`]).
pub const IDLE_SINCE_ANNOTATION: &str = "corral.dev/vdi-idle-since";
/// Claim Lease annotation naming who wrote the claim for its holder when that is someone else
/// (an administrator's `assign POOL USER`): their full identity. With the guard the API server
/// lets a request set it only to the requester's own identity, and keep it only while the
/// holder stays (guard/guard.yaml), so the broker's Events can say who asked. Absent: the holder
/// claimed for themselves.
pub const ASSIGNED_BY_ANNOTATION: &str = "corral.dev/vdi-assigned-by";
/// Claim Lease annotation an administrator writes beside [`ASSIGNED_BY_ANNOTATION`] when they
/// assign a desktop to someone its pool is not for (`assign --force`; SPEC "Entitlements"): their
/// full identity. The broker grants such a claim only with it; with the guard only
/// administrators write it, with their own identity, and it stays only while the holder does.
pub const FORCED_BY_ANNOTATION: &str = "corral.dev/vdi-forced-by";
/// VM annotation on a member of a dedicated pool ([`crate::policy::Assignment::Dedicated`]):
/// the full identity of its owner, whom the broker gives it on their first claim and who alone
/// claims it from then on. With the guard only the broker and administrators write it
/// (`corral-vdi pool owner` moves or frees it).
pub const OWNER_ANNOTATION: &str = "corral.dev/vdi-owner";
/// DesktopPool annotation naming who changed its spec (`pool set`, `pool resize`, the app's
/// Settings): their full identity. With the broker installed the API server lets a request set
/// it only to the requester's own identity (or keep it as it is: broker/members-policy.yaml), so
/// the broker's `Resized` Event can say who asked, when [`CHANGED_GENERATION_ANNOTATION`] is
/// the pool's `metadata.generation`.
pub const CHANGED_BY_ANNOTATION: &str = "corral.dev/vdi-changed-by";
/// DesktopPool annotation written beside [`CHANGED_BY_ANNOTATION`]: the `metadata.generation`
/// the change makes (the one read plus one; the write carries the resourceVersion read). A spec
/// changed later by a writer that does not say leaves it behind, so the writer is then unknown.
pub const CHANGED_GENERATION_ANNOTATION: &str = "corral.dev/vdi-changed-generation";
/// Claim Lease annotation the holder writes when they press Keep on a reclaim notice: RFC 3339
/// UTC time; an idle reclaim counts from it ([`crate::policy::reclaim`]).
pub const KEPT_AT_ANNOTATION: &str = "corral.dev/vdi-kept-at";
/// VM annotation naming why the broker removes a member of a managed pool (`shrink`, `reset`),
/// written on the member once the broker holds its Lease: clients show it as being removed.
pub const REMOVING_ANNOTATION: &str = "corral.dev/vdi-removing";

/// Name of the broker's Role and RoleBinding granting `member`'s holder access:
/// `corral-vdi-claim-<member>`.
pub fn grant_name(member: &str) -> String {
    format!("{GRANT_PREFIX}{member}")
}

/// Name of the ownership Lease of `member`: `corral-vdi-<member>`.
pub fn lease_name(member: &str) -> String {
    format!("{LEASE_PREFIX}{member}")
}

/// The member a Lease name guards, or `None` if the name is not a claim Lease's.
pub fn member_of_lease(lease: &str) -> Option<&str> {
    lease.strip_prefix(LEASE_PREFIX).filter(|m| !m.is_empty())
}

/// Maximum length of a label value, in characters (Kubernetes `validation.LabelValueMaxLength`).
pub const LABEL_VALUE_MAX: usize = 63;

/// Prefix of a label value holding an identity as unpadded, lower-case RFC 4648 base32.
pub const ENCODED_B32_PREFIX: &str = "b32.";
/// Prefix of a label value holding the first 40 hex digits of the identity's SHA-256; used when
/// base32 does not fit in 63 characters. The identity itself is the Lease's `holderIdentity`.
pub const ENCODED_SHA_PREFIX: &str = "sha.";

/// Whether `value` is a valid label value: empty, or at most 63 characters of
/// `[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?` (Kubernetes `IsValidLabelValue`).
pub fn is_valid_label_value(value: &str) -> bool {
    if value.is_empty() {
        return true;
    }
    let bytes = value.as_bytes();
    value.len() <= LABEL_VALUE_MAX
        && bytes[0].is_ascii_alphanumeric()
        && bytes[bytes.len() - 1].is_ascii_alphanumeric()
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// Whether `name` is a DNS-1123 label: 1..=63 characters of `[a-z0-9]([-a-z0-9]*[a-z0-9])?`.
pub fn is_dns1123_label(name: &str) -> bool {
    let bytes = name.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 63
        && bytes[0].is_ascii_alphanumeric()
        && bytes[bytes.len() - 1].is_ascii_alphanumeric()
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
}

/// Encodes an identity as the `corral.dev/vdi-assigned-to` label value.
///
/// The encoding is collision-free and documented:
/// - a valid label value that starts with neither `b32.` nor `sha.` is stored as it is
///   (`alice` → `alice`);
/// - otherwise, if it fits, `b32.` + unpadded lower-case base32 of its UTF-8 bytes
///   (`alice@example.com` → `b32.mfwgsy3fibsxqylnobwgkltdn5wq`); reversible alone;
/// - otherwise `sha.` + the first 40 hex digits of its SHA-256; reversible against the Lease's
///   `holderIdentity` with [`label_matches_identity`].
pub fn encode_identity(identity: &str) -> String {
    let plain = is_valid_label_value(identity)
        && !identity.is_empty()
        && !identity.starts_with(ENCODED_B32_PREFIX)
        && !identity.starts_with(ENCODED_SHA_PREFIX);
    if plain {
        return identity.to_owned();
    }
    let b32 = BASE32_NOPAD
        .encode(identity.as_bytes())
        .to_ascii_lowercase();
    if ENCODED_B32_PREFIX.len() + b32.len() <= LABEL_VALUE_MAX {
        return format!("{ENCODED_B32_PREFIX}{b32}");
    }
    let digest = Sha256::digest(identity.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("{ENCODED_SHA_PREFIX}{}", &hex[..40])
}

/// Longest identity, in characters, whose base32 label the server-side guard can check (its
/// base32 must fit in a label value: `b32.` + 59 characters).
pub const GUARD_B32_MAX_CHARS: usize = 36;

/// Whether the server-side guard (`guard/guard.yaml`) can compute `identity`'s label itself,
/// and so lets the identity label a desktop for itself: a plain label value, or printable
/// ASCII of at most [`GUARD_B32_MAX_CHARS`] characters (CEL has no SHA-256 and no way to read
/// the bytes of other characters). Other identities get their desktops from an administrator.
pub fn guard_can_check(identity: &str) -> bool {
    let plain = encode_identity(identity) == identity;
    plain
        || (identity.chars().count() <= GUARD_B32_MAX_CHARS
            && !identity.is_empty()
            && identity.chars().all(|c| (' '..='~').contains(&c)))
}

/// What a `corral.dev/vdi-assigned-to` label value says about the identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecodedLabel {
    /// The identity, recovered from the label alone.
    Identity(String),
    /// A hash form: the identity must be read from the Lease (see [`label_matches_identity`]).
    Hashed(String),
}

/// Decodes a `corral.dev/vdi-assigned-to` label value written by [`encode_identity`] (or by the
/// Phase 1 Go CLI, which stores plain user names).
pub fn decode_identity(label: &str) -> DecodedLabel {
    if let Some(b32) = label.strip_prefix(ENCODED_B32_PREFIX) {
        let decoded = BASE32_NOPAD
            .decode(b32.to_ascii_uppercase().as_bytes())
            .ok()
            .and_then(|bytes| String::from_utf8(bytes).ok());
        if let Some(identity) = decoded {
            return DecodedLabel::Identity(identity);
        }
    }
    if label.starts_with(ENCODED_SHA_PREFIX) {
        return DecodedLabel::Hashed(label.to_owned());
    }
    DecodedLabel::Identity(label.to_owned())
}

/// Whether a label value is the encoding of `identity` (works for every form).
pub fn label_matches_identity(label: &str, identity: &str) -> bool {
    encode_identity(identity) == label
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_names_stay_plain() {
        assert_eq!(encode_identity("alice"), "alice");
        assert_eq!(
            decode_identity("alice"),
            DecodedLabel::Identity("alice".into())
        );
    }

    #[test]
    fn invalid_label_values_round_trip_through_base32() {
        for id in [
            "alice@example.com",
            "system:serviceaccount:ns:sa",
            "b32.looks-encoded",
            "sha.looks-hashed",
            "Ünïcode user",
        ] {
            let label = encode_identity(id);
            assert!(is_valid_label_value(&label), "{label} is not a label value");
            assert_ne!(label, id);
            assert_eq!(decode_identity(&label), DecodedLabel::Identity(id.into()));
            assert!(label_matches_identity(&label, id));
        }
    }

    #[test]
    fn long_identities_hash_and_match_their_lease_holder() {
        let id = format!("{}@example.com", "a".repeat(58));
        for long in [id.as_str(), "system:serviceaccount:corral-vms:broker"] {
            let label = encode_identity(long);
            assert!(label.starts_with(ENCODED_SHA_PREFIX), "{long} → {label}");
            assert!(label_matches_identity(&label, long));
        }
        let label = encode_identity(&id);
        assert!(label.starts_with(ENCODED_SHA_PREFIX));
        assert!(is_valid_label_value(&label));
        assert!(label_matches_identity(&label, &id));
        assert!(!label_matches_identity(&label, "alice"));
        assert!(matches!(decode_identity(&label), DecodedLabel::Hashed(_)));
    }

    /// Every "`identity` → `label`" example in README.md and in this file's documentation is
    /// what the code writes.
    #[test]
    fn documented_examples_come_from_the_code() {
        let mut checked = 0;
        for text in [include_str!("../../../README.md"), include_str!("names.rs")] {
            for (i, _) in text.match_indices("` → `") {
                let before = &text[..i];
                let Some(start) = before.rfind('`') else {
                    continue;
                };
                let identity = &before[start + 1..];
                let after = &text[i + "` → `".len()..];
                let Some(end) = after.find('`') else { continue };
                let label = &after[..end];
                if !(label.starts_with(ENCODED_B32_PREFIX) || label.starts_with(ENCODED_SHA_PREFIX))
                {
                    continue;
                }
                assert_eq!(encode_identity(identity), label, "example for {identity}");
                checked += 1;
            }
        }
        assert!(checked >= 2, "the examples were found ({checked})");
    }

    #[test]
    fn the_guard_checks_what_cel_can_encode() {
        assert!(guard_can_check("alice"));
        assert!(guard_can_check("alice@example.com"));
        assert!(guard_can_check("x~y!\"\\"));
        assert!(!guard_can_check("system:serviceaccount:corral-vms:broker"));
        assert!(!guard_can_check("Ünïcode user"));
        let longest = "a@".repeat(18);
        assert!(guard_can_check(&longest) && !guard_can_check(&format!("{longest}x")));
    }

    #[test]
    fn label_value_rules() {
        assert!(is_valid_label_value("a-b_c.d"));
        assert!(!is_valid_label_value("-a"));
        assert!(!is_valid_label_value("a@b"));
        assert!(!is_valid_label_value(&"a".repeat(64)));
        assert!(is_dns1123_label("devpool"));
        assert!(!is_dns1123_label("DevPool"));
        assert!(!is_dns1123_label(""));
    }

    #[test]
    fn lease_names() {
        assert_eq!(lease_name("devpool-1"), "corral-vdi-devpool-1");
        assert_eq!(member_of_lease("corral-vdi-devpool-1"), Some("devpool-1"));
        assert_eq!(member_of_lease("other"), None);
    }
}
