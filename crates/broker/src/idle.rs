//! Who is logged in to a claimed desktop's guest, for a managed pool's `idleTimeout` (SPEC
//! "Pool policy and lifecycle"; the rule in `vdi_core::policy::reclaim`).
//!
//! KubeVirt's virt-api answers `GET /apis/subresources.kubevirt.io/v1/namespaces/<ns>/
//! virtualmachineinstances/<name>/userlist` (RBAC: `get` on `virtualmachineinstances/userlist`)
//! from the QEMU guest agent with a `VirtualMachineInstanceGuestOSUserList`: `items` of
//! `{userName, domain, loginTime}` (KubeVirt `staging/src/kubevirt.io/api/core/v1/types.go`).
//! Without a connected agent, or a VMI that does not run, it answers an error (a 409 or 500).
//!
//! The reconcile asks only for a granted claim on a running member of a pool with an
//! `idleTimeout` ([`crate::decide::Decision::idle_poll`]), at most every [`POLL_INTERVAL`] per
//! member and [`POLLS_AT_ONCE`] members at a time ([`Polls`]). Nobody logged in: the VM gets
//! `corral.dev/vdi-idle-since` (now, RFC 3339) unless it has it; someone: it loses it; an error
//! is no reading (the annotation stays as it is; logged at debug).

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use kube::Client;
use serde::Deserialize;
use tokio::sync::{Semaphore, SemaphorePermit};

/// How often one member's guest is asked, at most.
pub const POLL_INTERVAL: Duration = Duration::from_secs(30);
/// How many guests are asked at once, at most.
pub const POLLS_AT_ONCE: usize = 4;
/// How long one answer is waited for.
pub const POLL_TIMEOUT: Duration = Duration::from_secs(10);

/// The guest's users as virt-api reports them (only what is read).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct GuestUsers {
    /// The logged-in users (`null` or absent: none).
    #[serde(default, deserialize_with = "null_is_empty")]
    pub items: Vec<GuestUser>,
}

/// One logged-in user (`VirtualMachineInstanceGuestOSUser`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GuestUser {
    /// `userName`.
    #[serde(default)]
    pub user_name: String,
}

fn null_is_empty<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<GuestUser>, D::Error> {
    Ok(Option::<Vec<GuestUser>>::deserialize(d)?.unwrap_or_default())
}

impl GuestUsers {
    /// Whether anyone is logged in (a user with a name).
    pub fn anyone(&self) -> bool {
        self.items.iter().any(|u| !u.user_name.is_empty())
    }
}

/// The collection path of the VMIs in `namespace` under virt-api's `subresources.kubevirt.io`.
fn vmis_path(namespace: &str) -> String {
    format!("/apis/subresources.kubevirt.io/v1/namespaces/{namespace}/virtualmachineinstances")
}

/// Asks the guest of VMI `name` who is logged in (`GET <vmis>/<name>/userlist`).
///
/// Errors: virt-api's refusal (no agent connected, not running, 403) or the request failed.
pub async fn users(
    client: &Client,
    namespace: &str,
    name: &str,
) -> Result<GuestUsers, kube::Error> {
    let request = kube::core::Request::new(vmis_path(namespace))
        .get_subresource("userlist", name)
        .map_err(kube::Error::BuildRequest)?;
    client.request::<GuestUsers>(request).await
}

/// When each member (keyed by `K`) was last asked, and the permits that bound how many are
/// asked at once.
pub struct Polls<K> {
    last: Mutex<HashMap<K, Instant>>,
    permits: Semaphore,
}

impl<K> Default for Polls<K> {
    fn default() -> Self {
        Polls {
            last: Mutex::default(),
            permits: Semaphore::new(POLLS_AT_ONCE),
        }
    }
}

impl<K: Eq + Hash + Clone> Polls<K> {
    /// How long until `key` may be asked again; `None`: now (never asked, or
    /// [`POLL_INTERVAL`] ago), and it counts as asked from `now` on.
    pub fn wait(&self, key: &K, now: Instant) -> Option<Duration> {
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(at) = last.get(key) {
            let since = now.saturating_duration_since(*at);
            if since < POLL_INTERVAL {
                return Some(POLL_INTERVAL - since);
            }
        }
        last.insert(key.clone(), now);
        None
    }

    /// `key` is no longer asked (its claim ended or it stopped): the next ask is at once.
    pub fn forget(&self, key: &K) {
        self.last
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key);
    }

    /// A permit to ask (waits while [`POLLS_AT_ONCE`] are asking).
    pub async fn permit(&self) -> Option<SemaphorePermit<'_>> {
        self.permits.acquire().await.ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubevirts_user_list_reads_with_and_without_users() {
        let list: GuestUsers = serde_json::from_str(
            r#"{"metadata":{},"items":[{"userName":"alice","domain":"LAB","loginTime":1733300000.5}]}"#,
        )
        .unwrap();
        assert!(list.anyone());
        assert_eq!(list.items[0].user_name, "alice");
        for empty in [
            r#"{"metadata":{},"items":[]}"#,
            r#"{"items":null}"#,
            r#"{"metadata":{}}"#,
            r#"{"items":[{"userName":""}]}"#,
        ] {
            let list: GuestUsers = serde_json::from_str(empty).unwrap();
            assert!(!list.anyone(), "{empty}");
        }
    }

    #[test]
    fn the_request_is_virt_apis_userlist() {
        let request = kube::core::Request::new(vmis_path("ns"))
            .get_subresource("userlist", "dev-1")
            .unwrap();
        assert_eq!(request.method(), "GET");
        assert_eq!(
            request.uri().path(),
            "/apis/subresources.kubevirt.io/v1/namespaces/ns/virtualmachineinstances/dev-1/userlist"
        );
    }

    #[test]
    fn a_member_is_asked_at_most_once_per_interval_and_at_once_when_forgotten() {
        let polls = Polls::default();
        let key = ("ns", "dev-1");
        let t0 = Instant::now();
        assert_eq!(polls.wait(&key, t0), None);
        assert_eq!(
            polls.wait(&key, t0 + Duration::from_secs(10)),
            Some(Duration::from_secs(20))
        );
        assert_eq!(polls.wait(&key, t0 + POLL_INTERVAL), None);
        polls.forget(&key);
        assert_eq!(polls.wait(&key, t0 + POLL_INTERVAL), None);
    }
}
