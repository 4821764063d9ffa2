//! What the emulated virt-api's handlers share ([`super::api`]'s start/stop/restart and
//! softreboot, and [`super::streams`]' stream subresources): the API group, the handlers' state,
//! Kubernetes `Status` answers worded as the API server and virt-api word them, the VMI's phase
//! and `Paused` condition as virt-api reads them, and the SubjectAccessReview that
//! authorizes every call (KubeVirt keeps these in `pkg/virt-api/rest` likewise). Beneath both,
//! so neither imports the other for them.

use std::sync::Arc;

use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::Client;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

use super::guests::Guests;
use super::types::VirtualMachineInstance;

/// API group served.
pub const GROUP: &str = "subresources.kubevirt.io";

/// What every handler gets: the admin client (for reads, SubjectAccessReviews and VMI
/// annotations) and the guests' servers.
#[derive(Clone)]
pub(super) struct AppState {
    pub(super) client: Client,
    pub(super) guests: Arc<Guests>,
}

/// A Kubernetes `Status` error response (`application/json`), with `details` when given.
pub(super) fn status(
    code: StatusCode,
    reason: &str,
    message: String,
    details: Option<Value>,
) -> Response {
    let mut body = json!({ "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code.as_u16() });
    if let Some(details) = details {
        body["details"] = details;
    }
    (code, axum::Json(body)).into_response()
}

/// apimachinery's `NewInternalError`: 500, reason `InternalError`, message `Internal error
/// occurred: <err>`, the error as the one cause.
pub(super) fn internal(err: impl std::fmt::Display) -> Response {
    status(
        StatusCode::INTERNAL_SERVER_ERROR,
        "InternalError",
        format!("Internal error occurred: {err}"),
        Some(json!({ "causes": [{ "message": err.to_string() }] })),
    )
}

fn remote_user(headers: &HeaderMap) -> &str {
    headers
        .get("X-Remote-User")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("system:anonymous")
}

/// The 403 for a refused SubjectAccessReview, worded as the API server words its own.
pub(super) fn forbidden(
    headers: &HeaderMap,
    ns: &str,
    name: &str,
    verb: &str,
    resource: &str,
    subresource: &str,
) -> Response {
    let user = remote_user(headers);
    status(
        StatusCode::FORBIDDEN,
        "Forbidden",
        format!(
            "{resource}.{GROUP} \"{name}\" is forbidden: User \"{user}\" cannot {verb} resource \"{resource}/{subresource}\" in API group \"{GROUP}\" in the namespace \"{ns}\""
        ),
        None,
    )
}

/// Asks the API server whether the front-proxied user (`X-Remote-User`, `X-Remote-Group`) may
/// `verb` the `resource/subresource` of group `subresources.kubevirt.io` named `name` in `ns`,
/// as virt-api's authorizer does (KubeVirt `pkg/virt-api/rest/authorizer.go`).
pub(super) async fn allowed(
    client: &Client,
    headers: &HeaderMap,
    ns: &str,
    name: &str,
    verb: &str,
    resource: &str,
    subresource: &str,
) -> Result<bool, kube::Error> {
    let user = headers
        .get("X-Remote-User")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let groups: Vec<String> = headers
        .get_all("X-Remote-Group")
        .iter()
        .filter_map(|v| v.to_str().ok().map(str::to_owned))
        .collect();
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(user),
            groups: Some(groups),
            resource_attributes: Some(ResourceAttributes {
                namespace: Some(ns.to_owned()),
                verb: Some(verb.to_owned()),
                group: Some(GROUP.into()),
                version: Some("v1".into()),
                resource: Some(resource.to_owned()),
                subresource: Some(subresource.to_owned()),
                name: Some(name.to_owned()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let api: Api<SubjectAccessReview> = Api::all(client.clone());
    let answer = api.create(&PostParams::default(), &review).await?;
    Ok(answer.status.is_some_and(|s| s.allowed))
}

fn vmi_details(name: &str) -> Value {
    json!({ "name": name, "group": "kubevirt.io", "kind": "virtualmachineinstance" })
}

/// virt-api's 404 for a missing VMI: `virtualmachineinstance.kubevirt.io "NAME" not found`.
pub(super) fn vmi_not_found(name: &str) -> Response {
    status(
        StatusCode::NOT_FOUND,
        "NotFound",
        format!("virtualmachineinstance.kubevirt.io \"{name}\" not found"),
        Some(vmi_details(name)),
    )
}

/// apimachinery's `NewConflict` on a VMI, as virt-api answers: 409, `Operation cannot be
/// fulfilled on virtualmachineinstance.kubevirt.io "NAME": <why>`.
pub(super) fn vmi_conflict(name: &str, why: &str) -> Response {
    status(
        StatusCode::CONFLICT,
        "Conflict",
        format!(
            "Operation cannot be fulfilled on virtualmachineinstance.kubevirt.io \"{name}\": {why}"
        ),
        Some(vmi_details(name)),
    )
}

/// Whether the VMI's `status.phase` is `Running` (a paused VMI keeps that phase).
pub(super) fn running(vmi: &VirtualMachineInstance) -> bool {
    vmi.status
        .as_ref()
        .and_then(|s| s.get("phase"))
        .and_then(Value::as_str)
        == Some("Running")
}

/// Whether the VMI reports the condition `Paused` as `True`.
pub(super) fn paused(vmi: &VirtualMachineInstance) -> bool {
    vmi.status
        .as_ref()
        .and_then(|s| s.get("conditions"))
        .and_then(Value::as_array)
        .is_some_and(|c| {
            c.iter()
                .any(|c| c["type"] == "Paused" && c["status"] == "True")
        })
}
