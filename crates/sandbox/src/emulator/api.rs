//! The emulated virt-api: `subresources.kubevirt.io/v1` served over TLS behind the API
//! server's aggregator, like KubeVirt's virt-api, so clients call the same URLs as on a real
//! cluster (`PUT /apis/subresources.kubevirt.io/v1/namespaces/{ns}/virtualmachines/{name}/start`).
//!
//! Authentication: only clients with a certificate from the front-proxy CA get through the TLS
//! handshake (the aggregator); the user is the `X-Remote-User` header it sets, groups are
//! `X-Remote-Group`. Authorization: a SubjectAccessReview against the API server, as virt-api
//! does. The start/stop/restart rules follow KubeVirt's `pkg/virt-api/rest/lifecycle.go`:
//! - start: 409 "VM is already running" if a non-final VMI exists; `Halted` → `runStrategy:
//!   Always`; `Manual`/`RerunOnFailure` → a Start state-change request; `Always`/`Once` → 409
//!   "… does not support manual start requests".
//! - stop: `Always`/`Once` → `runStrategy: Halted`; `Manual`/`RerunOnFailure` without a VMI →
//!   409 "VM is not running", with one → a Stop request; `Halted` → 409 (not running, or a
//!   stop without a shorter grace period).
//! - restart: `Halted` → 409; otherwise the VMI is deleted and the controller makes a new one.
//!
//! `softreboot` is a VMI subresource (`PUT …/virtualmachineinstances/{name}/softreboot`, RBAC
//! verb `update` on `virtualmachineinstances/softreboot`), following virt-api's
//! `SoftRebootVMIRequestHandler` (`pkg/virt-api/rest/subresource.go`): no VMI → 404; phase not
//! `Running` → 409 `VM is not running`; condition `Paused` → 409 `VMI is paused`; ACPI disabled
//! (`spec.domain.features.acpi.enabled: false`) without the condition `AgentConnected` → 409;
//! otherwise 200, virt-handler's answer. The emulated guest has no OS to restart: its display,
//! streams and phase carry on (a guest reboot keeps QEMU and its VNC server on KubeVirt too), and
//! the VMI's annotation [`super::knobs::SOFT_REBOOTS_ANNOTATION`] counts the reboots.
//!
//! A VM annotated `sandbox.corral.dev/refuse-start: <reason>` gets a 409 with that reason on
//! start, as KubeVirt answers for states it cannot start from (e.g. manual recovery required).
//!
//! `userlist` (the guest agent's logged-in users, `GET`, RBAC verb `get`) is served by
//! [`super::agent`].
//!
//! The streaming subresources of VMIs (`vnc`, `vnc/screenshot`, `portforward/{port}[/tcp|udp]`,
//! `usbredir`) are served by [`super::streams`] with virt-api's refusals and websocket
//! behaviour, in front of real guest-side servers ([`super::guests`]: Xvnc, sshd, an RDP
//! server; there is no guest OS). `console` is listed in discovery, as KubeVirt lists it, but
//! not served; `usbredir` is served but not listed, as in KubeVirt.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{Context, Result};
use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, put};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::service::TowerToHyperService;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::server::WebPkiClientVerifier;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use super::guests::Guests;
use super::knobs::SOFT_REBOOTS_ANNOTATION;
use super::rest::{
    AppState, GROUP, allowed, forbidden, internal, paused, running, status, vmi_conflict,
    vmi_not_found,
};
use super::streams::{self, vmi_path};
use super::types::{VirtualMachine, VirtualMachineInstance, run_strategy};
use crate::pki::Pki;

/// Binds 127.0.0.1 on a free port and serves until the task is aborted. Returns the port and
/// the serving future.
pub async fn bind(
    client: Client,
    pki: &Pki,
    guests: Arc<Guests>,
) -> Result<(u16, impl std::future::Future<Output = ()> + Send + 'static)> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from(pki.front_proxy_ca_der.clone()))?;
    let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .context("client certificate verifier")?;
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_client_cert_verifier(verifier)
        .with_single_cert(
            vec![CertificateDer::from(pki.virt_api.cert_der.clone())],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(pki.virt_api.key_der.clone())),
        )?;
    let acceptor = TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
    let port = listener.local_addr()?.port();
    let app = router(AppState { client, guests });
    let serve = async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                continue;
            };
            let acceptor = acceptor.clone();
            let app = app.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let service = TowerToHyperService::new(app);
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection_with_upgrades(TokioIo::new(tls), service)
                    .await;
            });
        }
    };
    Ok((port, serve))
}

fn router(state: AppState) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(|| async { "ok" }))
        .route("/apis", get(group_list))
        .route(&format!("/apis/{GROUP}"), get(group))
        .route(&format!("/apis/{GROUP}/v1"), get(resources))
        .route(
            &format!("/apis/{GROUP}/v1/namespaces/{{ns}}/virtualmachines/{{name}}/{{action}}"),
            put(vm_action),
        )
        .route(&vmi_path("softreboot"), put(vmi_softreboot))
        .route(&vmi_path("vnc"), get(streams::vnc))
        .route(&vmi_path("vnc/screenshot"), get(streams::screenshot))
        .route(&vmi_path("portforward/{port}"), get(streams::portforward))
        .route(
            &vmi_path("portforward/{port}/{protocol}"),
            get(streams::portforward_protocol),
        )
        .route(&vmi_path("usbredir"), get(streams::usbredir))
        .route(&vmi_path("userlist"), get(super::agent::userlist))
        .with_state(state)
}

fn group_json() -> Value {
    json!({ "kind": "APIGroup", "apiVersion": "v1", "name": GROUP,
        "versions": [{ "groupVersion": format!("{GROUP}/v1"), "version": "v1" }],
        "preferredVersion": { "groupVersion": format!("{GROUP}/v1"), "version": "v1" } })
}

async fn group_list() -> axum::Json<Value> {
    axum::Json(json!({ "kind": "APIGroupList", "apiVersion": "v1", "groups": [group_json()] }))
}

async fn group() -> axum::Json<Value> {
    axum::Json(group_json())
}

async fn resources() -> axum::Json<Value> {
    let vm = |sub: &str| {
        json!({ "name": format!("virtualmachines/{sub}"), "namespaced": true,
        "kind": "VirtualMachine", "verbs": ["update"] })
    };
    let vmi = |sub: &str| {
        json!({ "name": format!("virtualmachineinstances/{sub}"), "namespaced": true,
        "kind": "VirtualMachineInstance", "verbs": ["get"] })
    };
    axum::Json(json!({ "kind": "APIResourceList", "apiVersion": "v1",
        "groupVersion": format!("{GROUP}/v1"),
        "resources": [vm("start"), vm("stop"), vm("restart"),
                      vmi("vnc"), vmi("vnc/screenshot"), vmi("console"), vmi("portforward"),
                      vmi("userlist"),
                      { "name": "virtualmachineinstances/softreboot", "namespaced": true,
                        "kind": "VirtualMachineInstance", "verbs": ["update"] }] }))
}

fn conflict(name: &str, why: &str) -> Response {
    status(
        StatusCode::CONFLICT,
        "Conflict",
        format!("Operation cannot be fulfilled on virtualmachine.kubevirt.io \"{name}\": {why}"),
        None,
    )
}

async fn vm_action(
    State(state): State<AppState>,
    Path((ns, name, action)): Path<(String, String, String)>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    if !matches!(action.as_str(), "start" | "stop" | "restart") {
        return status(
            StatusCode::NOT_FOUND,
            "NotFound",
            format!("the server could not find the requested resource (virtualmachines/{action})"),
            None,
        );
    }
    match allowed(
        &state.client,
        &headers,
        &ns,
        &name,
        "update",
        "virtualmachines",
        &action,
    )
    .await
    {
        Ok(true) => {}
        Ok(false) => {
            return forbidden(&headers, &ns, &name, "update", "virtualmachines", &action);
        }
        Err(e) => return internal(e),
    }
    let options: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let dry_run = options
        .get("dryRun")
        .and_then(Value::as_array)
        .is_some_and(|d| !d.is_empty());
    let vms: Api<VirtualMachine> = Api::namespaced(state.client.clone(), &ns);
    let vmis: Api<VirtualMachineInstance> = Api::namespaced(state.client.clone(), &ns);
    let vm = match vms.get_opt(&name).await {
        Ok(Some(vm)) => vm,
        Ok(None) => {
            return status(
                StatusCode::NOT_FOUND,
                "NotFound",
                format!("virtualmachines.kubevirt.io \"{name}\" not found"),
                None,
            );
        }
        Err(e) => return internal(e),
    };
    let vmi = match vmis.get_opt(&name).await {
        Ok(vmi) => vmi,
        Err(e) => return internal(e),
    };
    let phase = vmi
        .as_ref()
        .and_then(|v| v.status.as_ref())
        .and_then(|s| s.get("phase"))
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    let vmi_live = vmi.is_some() && !matches!(phase.as_str(), "Succeeded" | "Failed");
    let strategy = run_strategy(&vm.spec.fields);
    let params = PatchParams {
        dry_run,
        ..Default::default()
    };

    if let Some(why) = vm.annotations().get(super::knobs::REFUSE_START_ANNOTATION)
        && action == "start"
    {
        return conflict(&name, why);
    }
    let result = match (action.as_str(), strategy.as_str()) {
        ("start", _) if vmi_live && !matches!(phase.as_str(), "" | "Unknown") => {
            return conflict(&name, "VM is already running");
        }
        ("start", "Halted") => set_strategy(&vms, &name, "Always", &params).await,
        ("start", "Manual" | "RerunOnFailure") => request(&vms, &vm, "Start", &params).await,
        ("start", other) => {
            return conflict(
                &name,
                &format!("{other} does not support manual start requests"),
            );
        }
        ("stop", "Always" | "Once") => set_strategy(&vms, &name, "Halted", &params).await,
        ("stop", _) if !vmi_live => return conflict(&name, "VM is not running"),
        ("stop", "Manual" | "RerunOnFailure") => request(&vms, &vm, "Stop", &params).await,
        ("stop", _) => {
            return conflict(
                &name,
                "Halted only supports manual stop requests with a shorter graceperiod",
            );
        }
        ("restart", "Halted") => {
            return conflict(&name, "Halted does not support manual restart requests");
        }
        (_, _) if !vmi_live => return conflict(&name, "VM is not running"),
        (_, _) if dry_run => Ok(()),
        (_, _) => vmis
            .delete(&name, &DeleteParams::default())
            .await
            .map(|_| ()),
    };
    match result {
        Ok(()) => StatusCode::ACCEPTED.into_response(),
        Err(kube::Error::Api(s)) if s.code == 409 => conflict(&name, &s.message),
        Err(e) => internal(e),
    }
}

/// `PUT …/virtualmachineinstances/{name}/softreboot` (see the module's documentation).
async fn vmi_softreboot(
    State(state): State<AppState>,
    Path((ns, name)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    let (resource, sub) = ("virtualmachineinstances", "softreboot");
    match allowed(&state.client, &headers, &ns, &name, "update", resource, sub).await {
        Ok(true) => {}
        Ok(false) => return forbidden(&headers, &ns, &name, "update", resource, sub),
        Err(e) => return internal(e),
    }
    let vmis: Api<VirtualMachineInstance> = Api::namespaced(state.client.clone(), &ns);
    // Counting is read-modify-write with the resourceVersion as precondition: a concurrent
    // reboot makes this one read again (and check again) rather than lose a count.
    loop {
        let vmi = match vmis.get_opt(&name).await {
            Ok(Some(vmi)) => vmi,
            Ok(None) => return vmi_not_found(&name),
            Err(e) => return internal(e),
        };
        if let Some(refusal) = softreboot_refusal(&vmi) {
            return refusal;
        }
        let reboots = vmi
            .annotations()
            .get(SOFT_REBOOTS_ANNOTATION)
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or(0);
        let patch = json!({ "metadata": {
            "uid": vmi.metadata.uid, "resourceVersion": vmi.metadata.resource_version,
            "annotations": { SOFT_REBOOTS_ANNOTATION: (reboots + 1).to_string() } } });
        match vmis
            .patch(&name, &PatchParams::default(), &Patch::Merge(patch))
            .await
        {
            Ok(_) => return StatusCode::OK.into_response(),
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(kube::Error::Api(s)) if s.code == 404 => return vmi_not_found(&name),
            Err(e) => return internal(e),
        }
    }
}

/// virt-api's checks of a VMI before a soft reboot, in its order; the refusal, if any.
fn softreboot_refusal(vmi: &VirtualMachineInstance) -> Option<Response> {
    let name = vmi.name_any();
    if !running(vmi) {
        return Some(vmi_conflict(&name, "VM is not running"));
    }
    if paused(vmi) {
        return Some(vmi_conflict(&name, "VMI is paused"));
    }
    let acpi_off = vmi
        .spec
        .fields
        .get("domain")
        .and_then(|d| d.pointer("/features/acpi/enabled"))
        .and_then(Value::as_bool)
        == Some(false);
    let agent = vmi
        .status
        .as_ref()
        .and_then(|s| s.get("conditions"))
        .and_then(Value::as_array)
        .is_some_and(|c| c.iter().any(|c| c["type"] == "AgentConnected"));
    (acpi_off && !agent).then(|| {
        vmi_conflict(
            &name,
            "VMI neither have the agent connected nor the ACPI feature enabled",
        )
    })
}

async fn set_strategy(
    vms: &Api<VirtualMachine>,
    name: &str,
    strategy: &str,
    params: &PatchParams,
) -> Result<(), kube::Error> {
    let patch = json!({ "spec": { "runStrategy": strategy, "running": null } });
    vms.patch(name, params, &Patch::Merge(patch))
        .await
        .map(|_| ())
}

async fn request(
    vms: &Api<VirtualMachine>,
    vm: &VirtualMachine,
    action: &str,
    params: &PatchParams,
) -> Result<(), kube::Error> {
    let mut requests = vm
        .status
        .as_ref()
        .and_then(|s| s.get("stateChangeRequests"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    requests.push(json!({ "action": action }));
    let patch = json!({ "status": { "stateChangeRequests": requests } });
    vms.patch_status(&vm.name_any(), params, &Patch::Merge(patch))
        .await
        .map(|_| ())
}
