//! A stand-in for the one part of kube-controller-manager the product observes, which the
//! sandbox does not run: the ValidatingAdmissionPolicy status controller. On a cluster it
//! type-checks each policy whose `metadata.generation` is ahead of its
//! `status.observedGeneration` and then applies `status.observedGeneration` (the generation)
//! and `status.typeChecking` (the expressions' warnings) with field manager
//! `validatingadmissionpolicy-status-controller` (Kubernetes
//! `pkg/controller/validatingadmissionpolicystatus/controller.go`, `reconcile`).
//!
//! The stand-in does the same without the type check: it reports no warnings. Corral VDI's
//! installs wait for `observedGeneration` ([`vdi_core::manifests::Manifest::install`]); without
//! a controller they would wait out their bound for each policy.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicy;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use serde_json::json;

/// The field manager of Kubernetes' controller (its `ControllerName`).
const FIELD_MANAGER: &str = "validatingadmissionpolicy-status-controller";

/// Runs the controller through `client` (one that may patch
/// `validatingadmissionpolicies/status`) until the task is dropped.
pub async fn run(client: Client) {
    let policies: Api<ValidatingAdmissionPolicy> = Api::all(client);
    Controller::new(policies.clone(), watcher::Config::default())
        .run(
            reconcile,
            |_, err: &kube::Error, _| {
                tracing::debug!(error = %err, "policy status update failed; retrying");
                Action::requeue(Duration::from_secs(1))
            },
            Arc::new(policies),
        )
        .for_each(|_| async {})
        .await;
}

/// Applies `observedGeneration` (and an empty `typeChecking`) to `policy` when its generation
/// is ahead, as Kubernetes' controller does.
async fn reconcile(
    policy: Arc<ValidatingAdmissionPolicy>,
    policies: Arc<Api<ValidatingAdmissionPolicy>>,
) -> Result<Action, kube::Error> {
    let generation = policy.metadata.generation.unwrap_or(0);
    let observed = policy
        .status
        .as_ref()
        .and_then(|s| s.observed_generation)
        .unwrap_or(0);
    if generation > observed {
        let status = json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "status": { "observedGeneration": generation, "typeChecking": {} },
        });
        policies
            .patch_status(
                &policy.name_any(),
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(status),
            )
            .await?;
    }
    Ok(Action::await_change())
}
