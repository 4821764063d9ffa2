//! The VirtualMachineClone objects of pool create, read and named: which clone API the cluster
//! serves (by discovery), the name of a member's clone object, and what a clone object says
//! (its target, phase and condition). Shared by the clone run ([`super::clone`]), the free-name
//! check ([`super::free`]) and delete ([`super::delete`]); it imports none of them.

use kube::Client;
use kube::api::DynamicObject;
use kube::core::ApiResource;
use serde_json::Value;

use super::{CLONE_GROUP, CLONE_KIND, CLONE_PREFIX, CLONE_VERSIONS};
use crate::error::{Error, ErrorKind, Result};

/// Name of the VirtualMachineClone that makes `member`: `corral-vdi-clone-<member>`.
pub fn clone_name(member: &str) -> String {
    format!("{CLONE_PREFIX}{member}")
}

/// The VirtualMachineClone version to use among those the cluster serves: `v1beta1` if served,
/// else `v1alpha1`, else none (an unknown future version is not guessed at).
pub fn choose_clone_version<'a>(served: impl IntoIterator<Item = &'a str>) -> Option<&'static str> {
    let served: Vec<&str> = served.into_iter().collect();
    CLONE_VERSIONS
        .into_iter()
        .find(|preferred| served.contains(preferred))
}

/// The VirtualMachineClone API the cluster serves, found by discovery.
#[derive(Debug, Clone)]
pub struct CloneApi {
    /// The resource at the chosen version.
    pub resource: ApiResource,
    /// The chosen version (`v1beta1` or `v1alpha1`).
    pub version: String,
}

/// Finds the VirtualMachineClone API by discovery (group `clone.kubevirt.io`, version by
/// [`choose_clone_version`]).
///
/// Errors: [`Error::Rejected`] (`NotFound`) when the group or kind is not served (KubeVirt
/// missing, or too old); otherwise the discovery request's error.
pub async fn discover_clone_api(client: &Client) -> Result<CloneApi> {
    let missing = || {
        Error::rejected(
            ErrorKind::NotFound,
            "this cluster serves no VirtualMachineClone API (clone.kubevirt.io v1beta1 or \
             v1alpha1): KubeVirt is not installed, or too old to clone VMs",
            "install KubeVirt 1.0 or newer (kubectl get crd virtualmachineclones.clone.kubevirt.io \
             shows whether it is there), or pick the context of a cluster that has it",
        )
    };
    let group = match kube::discovery::group(client, CLONE_GROUP).await {
        Ok(group) => group,
        Err(kube::Error::Discovery(_)) => return Err(missing()),
        Err(e) => {
            return Err(Error::kube(
                format!("discover the {CLONE_KIND} API ({CLONE_GROUP})"),
                e,
            ));
        }
    };
    let version = choose_clone_version(group.versions()).ok_or_else(missing)?;
    let resource = group
        .versioned_resources(version)
        .into_iter()
        .map(|(resource, _)| resource)
        .find(|r| r.kind == CLONE_KIND)
        .ok_or_else(missing)?;
    Ok(CloneApi {
        resource,
        version: version.to_owned(),
    })
}

pub(super) fn status_of(obj: &DynamicObject) -> Value {
    obj.data.get("status").cloned().unwrap_or(Value::Null)
}

pub(super) fn phase_of(obj: &DynamicObject) -> String {
    status_of(obj)
        .get("phase")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned()
}

pub(super) fn target_of(obj: &DynamicObject) -> Option<String> {
    obj.data
        .pointer("/spec/target/name")
        .and_then(Value::as_str)
        .map(str::to_owned)
}

/// The clone's condition message: the Ready condition's message (else reason), else the
/// Progressing condition's. KubeVirt puts the cause of a pending or failed clone there.
pub(super) fn condition_text(status: &Value) -> String {
    let conditions = status
        .get("conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for kind in ["Ready", "Progressing"] {
        let Some(c) = conditions.iter().find(|c| c["type"] == kind) else {
            continue;
        };
        for field in ["message", "reason"] {
            if let Some(text) = c
                .get(field)
                .and_then(Value::as_str)
                .filter(|t| !t.is_empty())
            {
                return text.to_owned();
            }
        }
    }
    String::new()
}

/// `in phase X`, or `with no phase yet` before KubeVirt has set one.
pub(super) fn in_phase(phase: &str) -> String {
    if phase.is_empty() {
        "with no phase yet".to_owned()
    } else {
        format!("in phase {phase}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn clone_version_prefers_v1beta1() {
        assert_eq!(
            choose_clone_version(["v1beta1", "v1alpha1"]),
            Some("v1beta1")
        );
        assert_eq!(
            choose_clone_version(["v1alpha1", "v1beta1"]),
            Some("v1beta1")
        );
        assert_eq!(choose_clone_version(["v1alpha1"]), Some("v1alpha1"));
        assert_eq!(choose_clone_version(["v2"]), None);
        assert_eq!(choose_clone_version([]), None);
    }

    #[test]
    fn condition_text_prefers_ready_then_progressing() {
        let status = json!({ "conditions": [
            { "type": "Progressing", "status": "False", "reason": "Pending" },
            { "type": "Ready", "status": "False", "reason": "Virtual Machine volume rootdisk does not support snapshots" },
        ] });
        assert_eq!(
            condition_text(&status),
            "Virtual Machine volume rootdisk does not support snapshots"
        );
        assert_eq!(condition_text(&json!({})), "");
    }
}
