//! The guest agent as virt-api exposes it: the VMI subresource `userlist`
//! (`GET …/namespaces/{ns}/virtualmachineinstances/{name}/userlist`, RBAC verb `get` on
//! `virtualmachineinstances/userlist`), answering a `VirtualMachineInstanceGuestOSUserList`:
//! `{"metadata":{},"items":[{"userName":"alice","loginTime":1733300000.0}]}` (KubeVirt
//! `staging/src/kubevirt.io/api/core/v1/types.go`: `userName`, `domain` omitted when empty,
//! `loginTime` in Unix seconds as a float).
//!
//! There is no guest OS, hence no agent: the VM's annotation
//! [`super::knobs::GUEST_USERS_ANNOTATION`] stands for it. Absent, the agent is not connected;
//! `""`, it is and nobody is logged in; `"alice,bob"`, those users are, each since the VMI was
//! created. The VM controller ([`super::vm`]) reports the condition `AgentConnected` on a running
//! VMI whose VM has the annotation, as virt-handler does once the agent answers.
//!
//! Checks, in virt-api's order (`pkg/virt-api/rest/subresource.go`, `UserList`): authorization
//! (a SubjectAccessReview, 403); the VMI (missing → its NotFound); phase `Running` (else a
//! Conflict `VMI is not running`); the agent (else a Conflict `VMI does not have guest agent
//! connected`). virt-api writes these three with go-restful's `WriteError(500, err)`: status 500
//! and the error's text as a `text/plain` body, not a `Status` object; so does this.

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use kube::ResourceExt;
use kube::api::Api;
use serde_json::{Value, json};

use super::knobs::guest_users;
use super::rest::{AppState, allowed, forbidden, internal, running};
use super::types::{VirtualMachine, VirtualMachineInstance};

/// go-restful's `WriteError(500, err)`: status 500, the message as plain text.
fn plain_500(message: String) -> Response {
    (
        StatusCode::INTERNAL_SERVER_ERROR,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        message,
    )
        .into_response()
}

/// apimachinery's `NewConflict` text on a VMI, as virt-api's validation returns it.
fn conflict_text(name: &str, why: &str) -> String {
    format!("Operation cannot be fulfilled on virtualmachineinstance.kubevirt.io \"{name}\": {why}")
}

/// `GET …/virtualmachineinstances/{name}/userlist` (see the module's documentation).
pub(super) async fn userlist(
    State(state): State<AppState>,
    Path((ns, name)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    let (resource, sub) = ("virtualmachineinstances", "userlist");
    match allowed(&state.client, &headers, &ns, &name, "get", resource, sub).await {
        Ok(true) => {}
        Ok(false) => return forbidden(&headers, &ns, &name, "get", resource, sub),
        Err(e) => return internal(e),
    }
    let vmis: Api<VirtualMachineInstance> = Api::namespaced(state.client.clone(), &ns);
    let vmi = match vmis.get_opt(&name).await {
        Ok(Some(vmi)) => vmi,
        Ok(None) => {
            return plain_500(format!(
                "virtualmachineinstance.kubevirt.io \"{name}\" not found"
            ));
        }
        Err(e) => return internal(e),
    };
    if !running(&vmi) {
        return plain_500(conflict_text(&name, "VMI is not running"));
    }
    let vms: Api<VirtualMachine> = Api::namespaced(state.client.clone(), &ns);
    let users = match vms.get_opt(&name).await {
        Ok(vm) => vm.and_then(|vm| guest_users(vm.annotations())),
        Err(e) => return internal(e),
    };
    let Some(users) = users else {
        return plain_500(conflict_text(
            &name,
            "VMI does not have guest agent connected",
        ));
    };
    let since = vmi
        .creation_timestamp()
        .map_or(0.0, |t| t.0.as_millisecond() as f64 / 1000.0);
    let items: Vec<Value> = users
        .iter()
        .map(|user| json!({ "userName": user, "loginTime": since }))
        .collect();
    axum::Json(json!({ "metadata": {}, "items": items })).into_response()
}
