//! Managed pools: the `DesktopPool` custom resource (`corral.dev/v1alpha1`, shipped as
//! `broker/desktoppool-crd.yaml` and installed with the broker) that holds a pool's policy and
//! status (SPEC "Pool policy and lifecycle").
//!
//! Membership stays the VM label `corral.dev/vdi-pool=<pool>`; a DesktopPool named like the
//! pool, in its namespace, makes the pool *managed*: the broker keeps its size (live resize),
//! its warm buffer, reclaims its claims by the policy and applies `onRelease`. A pool without
//! one is *unmanaged* and behaves as the seed describes.
//!
//! Cluster data is untrusted: [`DesktopPool::policy`] checks every value against the same
//! bounds as the CRD's schema (an object written before the schema was installed, or by an
//! older version, may hold anything) and says which field is wrong; a pool whose policy cannot
//! be read is left as it is by the broker and shown with its problem.

pub mod duration;
pub mod plan;
pub mod reclaim;
pub mod release;
pub mod usage;

use jiff::SignedDuration;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use serde::{Deserialize, Serialize};

use crate::names::DEFAULT_LEASE_SECONDS;

/// The CRD, as shipped (`broker/desktoppool-crd.yaml`).
pub const CRD: &str = include_str!("../../../../broker/desktoppool-crd.yaml");
/// The CRD's name.
pub const CRD_NAME: &str = "desktoppools.corral.dev";
/// The largest `size` (and `warm`) the schema admits, as pool create does
/// ([`crate::pool::MAX_POOL_SIZE`]).
pub const MAX_SIZE: i32 = 500;
/// Shortest `disconnectGrace`, `maxSession` and `idleTimeout` (10 s): shorter ones would have
/// clients renew several times a second.
pub const MIN_DURATION: SignedDuration = SignedDuration::from_secs(10);
/// Longest `disconnectGrace` (7 days; it becomes the Lease's int32 `leaseDurationSeconds`).
pub const MAX_DISCONNECT_GRACE: SignedDuration = SignedDuration::from_secs(7 * 86_400);
/// Longest `maxSession` and `idleTimeout` (366 days).
pub const MAX_TIMEOUT: SignedDuration = SignedDuration::from_secs(366 * 86_400);

/// The spec of a `DesktopPool` (`corral.dev/v1alpha1`): the policy of the pool of the same
/// name in the same namespace. Durations are [`duration`] texts (`"15m"`).
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq)]
#[kube(
    group = "corral.dev",
    version = "v1alpha1",
    kind = "DesktopPool",
    namespaced,
    status = "DesktopPoolStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct DesktopPoolSpec {
    /// The golden VM members are cloned from (grow, reset), in the pool's namespace.
    pub golden: String,
    /// Members wanted: `<pool>-1` … `<pool>-<size>`, 1 ..= [`MAX_SIZE`].
    pub size: i32,
    /// Free members kept running (0 ..= `size`); absent: 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warm: Option<i32>,
    /// The claim Lease's `leaseDurationSeconds`; clients renew while a session is open.
    /// Absent: one hour ([`DEFAULT_LEASE_SECONDS`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disconnect_grace: Option<String>,
    /// The longest claim, from the Lease's `acquireTime`. Absent: no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_session: Option<String>,
    /// How long the guest may report no logged-in user before the claim is reclaimed.
    /// Absent: never.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_timeout: Option<String>,
    /// What a release does to the member. Absent: [`OnRelease::Keep`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_release: Option<OnRelease>,
    /// Whether a member goes back to the pool when its claim ends. Absent:
    /// [`Assignment::Floating`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub assignment: Option<Assignment>,
}

/// How a pool hands out its members (SPEC "Pool policy and lifecycle": assignment).
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "bindings", derive(specta::Type))]
#[serde(rename_all = "camelCase")]
pub enum Assignment {
    /// A released member goes back to the pool, for anyone (the seed's behaviour).
    #[default]
    Floating,
    /// A user's first claim makes the member theirs ([`crate::names::OWNER_ANNOTATION`], which
    /// the broker writes): later claims give them that member again and no one else; release
    /// and reclaim stop it (`onRelease: keep`; restart and reset are refused) but it stays
    /// theirs; only an administrator moves or frees ownership.
    Dedicated,
}

impl Assignment {
    /// The spec's text: `floating`, `dedicated`.
    pub fn as_str(self) -> &'static str {
        match self {
            Assignment::Floating => "floating",
            Assignment::Dedicated => "dedicated",
        }
    }
}

/// What a release (by the holder, a reclaim or a force release) does to the member.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "bindings", derive(specta::Type))]
#[serde(rename_all = "camelCase")]
pub enum OnRelease {
    /// Stop it; its disk is kept for the next holder (the seed's behaviour).
    #[default]
    Keep,
    /// Restart it (a new VMI: every stream of the last holder ends), disk kept.
    Restart,
    /// Delete it and clone it again from the golden VM: the next holder gets a fresh disk.
    Reset,
}

impl OnRelease {
    /// The spec's text: `keep`, `restart`, `reset`.
    pub fn as_str(self) -> &'static str {
        match self {
            OnRelease::Keep => "keep",
            OnRelease::Restart => "restart",
            OnRelease::Reset => "reset",
        }
    }
}

/// The status the broker writes on a `DesktopPool` (the `status` subresource).
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DesktopPoolStatus {
    /// The spec generation this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Members that exist (VMs with the pool label).
    #[serde(default)]
    pub members: i32,
    /// Members no one holds.
    #[serde(default)]
    pub free: i32,
    /// Members with a claim (assigned, claiming or granting).
    #[serde(default)]
    pub claimed: i32,
    /// Free members running (the warm buffer).
    #[serde(default)]
    pub warm: i32,
    /// Members being cloned (grow or reset).
    #[serde(default)]
    pub creating: i32,
    /// `Ready` (size and warm reached), `Resizing`, `PolicyValid`, … (Kubernetes conditions).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// Hourly usage, oldest first, seven days at most ([`usage`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub usage: Vec<usage::UsageBucket>,
}

/// A DesktopPool's spec, checked and parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// The golden VM.
    pub golden: String,
    /// Members wanted, 1 ..= [`MAX_SIZE`].
    pub size: u32,
    /// Free members kept running, 0 ..= `size`.
    pub warm: u32,
    /// The claim Lease's duration ([`MIN_DURATION`] ..= [`MAX_DISCONNECT_GRACE`]).
    pub disconnect_grace: SignedDuration,
    /// The longest claim, if limited.
    pub max_session: Option<SignedDuration>,
    /// The longest time without a logged-in user, if limited.
    pub idle_timeout: Option<SignedDuration>,
    /// What a release does.
    pub on_release: OnRelease,
    /// How members are handed out.
    pub assignment: Assignment,
}

impl Policy {
    /// Whether members stay their first holder's ([`Assignment::Dedicated`]).
    pub fn dedicated(&self) -> bool {
        self.assignment == Assignment::Dedicated
    }

    /// `disconnect_grace` in whole seconds, as a Lease's `leaseDurationSeconds`.
    pub fn lease_seconds(&self) -> i32 {
        i32::try_from(self.disconnect_grace.as_secs()).unwrap_or(DEFAULT_LEASE_SECONDS)
    }

    /// The spec that reads back as this policy (durations in [`duration::format`]).
    pub fn to_spec(&self) -> DesktopPoolSpec {
        DesktopPoolSpec {
            golden: self.golden.clone(),
            size: self.size as i32,
            warm: Some(self.warm as i32),
            disconnect_grace: Some(duration::format(self.disconnect_grace)),
            max_session: self.max_session.map(duration::format),
            idle_timeout: self.idle_timeout.map(duration::format),
            on_release: Some(self.on_release),
            assignment: Some(self.assignment),
        }
    }
}

/// A field of [`DesktopPoolSpec`] that a policy check can refuse.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicyField {
    /// `spec.golden`.
    Golden,
    /// `spec.size`.
    Size,
    /// `spec.warm`.
    Warm,
    /// `spec.disconnectGrace`.
    DisconnectGrace,
    /// `spec.maxSession`.
    MaxSession,
    /// `spec.idleTimeout`.
    IdleTimeout,
    /// `spec.onRelease` with `spec.assignment`: a dedicated pool keeps its members.
    OnRelease,
}

impl PolicyField {
    /// The field's name in the spec (`disconnectGrace`).
    pub fn name(self) -> &'static str {
        match self {
            PolicyField::Golden => "golden",
            PolicyField::Size => "size",
            PolicyField::Warm => "warm",
            PolicyField::DisconnectGrace => "disconnectGrace",
            PolicyField::MaxSession => "maxSession",
            PolicyField::IdleTimeout => "idleTimeout",
            PolicyField::OnRelease => "onRelease",
        }
    }
}

/// Why a spec is no policy: the first field out of range or unreadable, and the sentence
/// (`spec.size: 0 is out of range (1 to 500)`), which is what it displays.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyError {
    /// The field.
    pub field: PolicyField,
    /// The sentence, starting `spec.<field>`.
    pub message: String,
}

impl std::fmt::Display for PolicyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for PolicyError {}

impl PolicyError {
    fn new(field: PolicyField, what: impl std::fmt::Display) -> Self {
        PolicyError {
            field,
            message: format!("spec.{}{what}", field.name()),
        }
    }

    /// The sentence without the `spec.<field>` it starts with, for a form that marks the field
    /// itself ("5 is out of range (0 to the size, 4)").
    pub fn reason(&self) -> &str {
        let prefix = format!("spec.{}", self.field.name());
        let rest = self.message.strip_prefix(&prefix).unwrap_or(&self.message);
        rest.strip_prefix(": ").unwrap_or(rest).trim_start()
    }
}

/// `text` parsed and within `min ..= max`, or why not.
fn bounded(
    field: PolicyField,
    text: &str,
    min: SignedDuration,
    max: SignedDuration,
) -> Result<SignedDuration, PolicyError> {
    let d = duration::parse(text).map_err(|e| PolicyError::new(field, format!(": {e}")))?;
    if d < min || d > max {
        return Err(PolicyError::new(
            field,
            format!(
                ": \"{text}\" is out of range ({} to {})",
                duration::format(min),
                duration::format(max)
            ),
        ));
    }
    Ok(d)
}

impl DesktopPoolSpec {
    /// Every field [`DesktopPoolSpec::policy`] refuses, in its order, not only the first: each
    /// refused field is set back to its default (a refused size to the largest, so that warm is
    /// judged on its own bound) and the spec judged again. Empty when the spec is a policy.
    pub fn problems(&self) -> Vec<PolicyError> {
        let mut spec = self.clone();
        let mut found: Vec<PolicyError> = Vec::new();
        while let Err(e) = spec.policy() {
            // Each field is reset once at most, to a value its rule takes: this ends.
            if found.iter().any(|f| f.field == e.field) {
                break;
            }
            match e.field {
                PolicyField::Golden => spec.golden = "golden".into(),
                PolicyField::Size => spec.size = MAX_SIZE,
                PolicyField::Warm => spec.warm = None,
                PolicyField::DisconnectGrace => spec.disconnect_grace = None,
                PolicyField::MaxSession => spec.max_session = None,
                PolicyField::IdleTimeout => spec.idle_timeout = None,
                PolicyField::OnRelease => spec.on_release = None,
            }
            found.push(e);
        }
        found
    }

    /// The spec checked against the CRD's bounds and parsed.
    ///
    /// Errors: the first field out of range or unreadable, with its sentence
    /// (`spec.size: 0 is out of range (1 to 500)`).
    pub fn policy(&self) -> Result<Policy, PolicyError> {
        if self.golden.is_empty() {
            return Err(PolicyError::new(
                PolicyField::Golden,
                " is empty: name the golden VM",
            ));
        }
        if !(1..=MAX_SIZE).contains(&self.size) {
            return Err(PolicyError::new(
                PolicyField::Size,
                format!(": {} is out of range (1 to {MAX_SIZE})", self.size),
            ));
        }
        let warm = self.warm.unwrap_or(0);
        if !(0..=self.size).contains(&warm) {
            return Err(PolicyError::new(
                PolicyField::Warm,
                format!(": {warm} is out of range (0 to the size, {})", self.size),
            ));
        }
        let disconnect_grace = match &self.disconnect_grace {
            Some(text) => bounded(
                PolicyField::DisconnectGrace,
                text,
                MIN_DURATION,
                MAX_DISCONNECT_GRACE,
            )?,
            None => SignedDuration::from_secs(DEFAULT_LEASE_SECONDS.into()),
        };
        let max_session = self
            .max_session
            .as_deref()
            .map(|t| bounded(PolicyField::MaxSession, t, MIN_DURATION, MAX_TIMEOUT))
            .transpose()?;
        let idle_timeout = self
            .idle_timeout
            .as_deref()
            .map(|t| bounded(PolicyField::IdleTimeout, t, MIN_DURATION, MAX_TIMEOUT))
            .transpose()?;
        let on_release = self.on_release.unwrap_or_default();
        let assignment = self.assignment.unwrap_or_default();
        if assignment == Assignment::Dedicated && on_release != OnRelease::Keep {
            return Err(PolicyError::new(
                PolicyField::OnRelease,
                format!(
                    ": {} is refused in a dedicated pool (its members stay their owners', disk \
                     and all): keep",
                    on_release.as_str()
                ),
            ));
        }
        Ok(Policy {
            golden: self.golden.clone(),
            size: self.size as u32,
            warm: warm as u32,
            disconnect_grace,
            max_session,
            idle_timeout,
            on_release,
            assignment,
        })
    }
}

impl DesktopPool {
    /// This pool's policy ([`DesktopPoolSpec::policy`]).
    ///
    /// Errors: those of [`DesktopPoolSpec::policy`].
    pub fn policy(&self) -> Result<Policy, PolicyError> {
        self.spec.policy()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> DesktopPoolSpec {
        DesktopPoolSpec {
            golden: "golden-desktop".into(),
            size: 4,
            ..Default::default()
        }
    }

    #[test]
    fn every_refused_field_is_named_with_its_reason() {
        let bad = DesktopPoolSpec {
            size: 0,
            warm: Some(600),
            disconnect_grace: Some("5".into()),
            idle_timeout: Some("1h1h".into()),
            on_release: Some(OnRelease::Reset),
            assignment: Some(Assignment::Dedicated),
            ..spec()
        };
        let problems = bad.problems();
        let fields: Vec<PolicyField> = problems.iter().map(|p| p.field).collect();
        assert_eq!(
            fields,
            [
                PolicyField::Size,
                PolicyField::Warm,
                PolicyField::DisconnectGrace,
                PolicyField::IdleTimeout,
                PolicyField::OnRelease
            ]
        );
        assert_eq!(
            problems[0],
            bad.policy().unwrap_err(),
            "the first is policy()'s"
        );
        assert_eq!(problems[0].reason(), "0 is out of range (1 to 500)");
        assert_eq!(
            problems[1].reason(),
            "600 is out of range (0 to the size, 500)"
        );
        assert!(
            problems.iter().all(|p| !p.reason().contains("spec.")),
            "{problems:?}"
        );
        assert!(spec().problems().is_empty());
    }

    #[test]
    fn a_dedicated_pool_keeps_its_members_on_release() {
        let dedicated = DesktopPoolSpec {
            assignment: Some(Assignment::Dedicated),
            ..spec()
        };
        assert!(dedicated.policy().unwrap().dedicated());
        for refused in [OnRelease::Restart, OnRelease::Reset] {
            let e = DesktopPoolSpec {
                on_release: Some(refused),
                ..dedicated.clone()
            }
            .policy()
            .unwrap_err();
            assert_eq!(e.field, PolicyField::OnRelease);
            assert!(e.message.contains("dedicated pool"), "{e}");
        }
        assert!(!spec().policy().unwrap().dedicated());
    }

    #[test]
    fn defaults_are_the_unmanaged_behaviour() {
        let p = spec().policy().unwrap();
        assert_eq!(p.warm, 0);
        assert_eq!(p.lease_seconds(), DEFAULT_LEASE_SECONDS);
        assert_eq!(p.max_session, None);
        assert_eq!(p.idle_timeout, None);
        assert_eq!(p.on_release, OnRelease::Keep);
    }

    #[test]
    fn every_out_of_range_value_names_its_field() {
        let cases: Vec<(DesktopPoolSpec, &str)> = vec![
            (DesktopPoolSpec { size: 0, ..spec() }, "spec.size"),
            (
                DesktopPoolSpec {
                    size: 501,
                    ..spec()
                },
                "spec.size",
            ),
            (
                DesktopPoolSpec {
                    warm: Some(5),
                    ..spec()
                },
                "spec.warm",
            ),
            (
                DesktopPoolSpec {
                    warm: Some(-1),
                    ..spec()
                },
                "spec.warm",
            ),
            (
                DesktopPoolSpec {
                    golden: String::new(),
                    ..spec()
                },
                "spec.golden",
            ),
            (
                DesktopPoolSpec {
                    disconnect_grace: Some("5s".into()),
                    ..spec()
                },
                "spec.disconnectGrace",
            ),
            (
                DesktopPoolSpec {
                    disconnect_grace: Some("9999999h".into()),
                    ..spec()
                },
                "spec.disconnectGrace",
            ),
            (
                DesktopPoolSpec {
                    max_session: Some("soon".into()),
                    ..spec()
                },
                "spec.maxSession",
            ),
            (
                DesktopPoolSpec {
                    idle_timeout: Some("9999999h".into()),
                    ..spec()
                },
                "spec.idleTimeout",
            ),
        ];
        for (spec, field) in cases {
            let err = spec.policy().unwrap_err();
            assert!(err.message.starts_with(field), "{field}: {err}");
            assert_eq!(format!("spec.{}", err.field.name()), field);
        }
    }

    #[test]
    fn a_policy_reads_back_from_its_spec() {
        let p = DesktopPoolSpec {
            warm: Some(2),
            disconnect_grace: Some("15m".into()),
            max_session: Some("8h".into()),
            idle_timeout: Some("30m".into()),
            on_release: Some(OnRelease::Reset),
            ..spec()
        }
        .policy()
        .unwrap();
        assert_eq!(p.lease_seconds(), 900);
        assert_eq!(p.to_spec().policy().unwrap(), p);
    }

    #[test]
    fn the_shipped_crd_names_this_type() {
        let crd: serde_json::Value = serde_yaml::from_str(CRD).unwrap();
        assert_eq!(crd["metadata"]["name"], CRD_NAME);
        assert_eq!(crd["spec"]["group"], "corral.dev");
        assert_eq!(crd["spec"]["names"]["kind"], "DesktopPool");
        assert_eq!(crd["spec"]["versions"][0]["name"], "v1alpha1");
        let schema = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
        let fields: Vec<&str> = schema["properties"]
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        let ours = serde_json::to_value(DesktopPoolSpec {
            warm: Some(1),
            disconnect_grace: Some("1m".into()),
            max_session: Some("1m".into()),
            idle_timeout: Some("1m".into()),
            on_release: Some(OnRelease::Keep),
            assignment: Some(Assignment::Floating),
            ..spec()
        })
        .unwrap();
        let mut ours: Vec<&str> = ours
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        let mut theirs = fields.clone();
        ours.sort_unstable();
        theirs.sort_unstable();
        assert_eq!(ours, theirs);
        assert_eq!(schema["properties"]["size"]["maximum"], MAX_SIZE);
    }
}
