//! The VM's power around a claim: a claim starts its member, a release stops it, through
//! KubeVirt's `start` and `stop` subresources (never by editing the run strategy). KubeVirt's
//! 409 answers that mean "nothing to do" are read here ([`start_conflict`],
//! [`stop_conflict`]), and so is what the VM's status already says.

use kube::api::Api;
use kube::runtime::wait::await_condition;
use kube::{Client, ResourceExt};
use serde::Serialize;

use crate::error::{Error, Result};
use crate::resources::{VirtualMachine, runs};
use crate::state::halted;
use crate::stream::vm_action_path;

/// What happened to the VM's power.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "bindings", derive(specta::Type))]
#[serde(rename_all = "camelCase", tag = "kind", content = "reason")]
pub enum PowerAction {
    /// The start subresource accepted a start.
    Started,
    /// No start was needed: it runs or starts already, or its run strategy keeps it running;
    /// the reason says which ("printableStatus is already Starting").
    AlreadyRunning(String),
    /// The stop subresource accepted a stop.
    Stopped,
    /// It was not running.
    AlreadyStopped,
    /// A stop was already under way (printableStatus `Stopping`, or KubeVirt refused a second
    /// stop of a `Halted` VM whose VMI is still going away).
    AlreadyStopping,
    /// With a broker: the broker started it once it had bound the holder's access (the claim
    /// waited until it ran).
    BrokerStarted,
    /// With a broker: the broker does this to it, now that the claim's Lease is gone (its
    /// pool's policy, [`crate::policy::release::ReleaseEffect::of`]).
    BrokerReleases(crate::policy::release::ReleaseView),
    /// Nothing was done to its power; the reason says why ("it is free: with a broker, …").
    LeftAsIs(String),
}

/// How long a claim waits for a VM that is still stopping (from an earlier release) before
/// starting it, in seconds.
pub const STOPPING_WAIT_SECONDS: u64 = 90;

/// Whether a VM with printableStatus `status` is still going away (its VMI not yet gone).
pub(super) fn stopping(status: &str) -> bool {
    matches!(status, "Stopping" | "Terminating")
}

/// What KubeVirt's 409 answer `message` to a start means for a claim: "VM is already
/// running", or a run strategy that keeps it running (`Always`, `Once`: "does not support
/// manual start"), are fine; `None` for any other, which is an error.
fn start_conflict(message: &str) -> Option<PowerAction> {
    if message.contains("already running") {
        Some(PowerAction::AlreadyRunning(
            "KubeVirt: VM is already running".into(),
        ))
    } else if message.contains("does not support manual start") {
        Some(PowerAction::AlreadyRunning(format!(
            "its run strategy keeps it running (KubeVirt: {message})"
        )))
    } else {
        None
    }
}

/// What KubeVirt's 409 answer `message` to a stop means for a release: not running, or a
/// second stop of a VM whose run strategy is already `Halted` while its VMI is still going
/// away (KubeVirt pkg/virt-api/rest/lifecycle.go); `None` for any other, which is an error.
fn stop_conflict(message: &str) -> Option<PowerAction> {
    if message.contains("not running") {
        Some(PowerAction::AlreadyStopped)
    } else if message.contains("Halted only supports manual stop") {
        Some(PowerAction::AlreadyStopping)
    } else {
        None
    }
}

/// A stop that is not needed, judged from the VM as read: halted and Stopped, or halted and
/// still stopping; `None` when the stop subresource must be called.
fn stop_unneeded(vm: &VirtualMachine) -> Option<PowerAction> {
    if !halted(vm) {
        return None;
    }
    match vm.printable_status() {
        "Stopped" => Some(PowerAction::AlreadyStopped),
        status if stopping(status) => Some(PowerAction::AlreadyStopping),
        _ => None,
    }
}

/// The message of a 409 answer (KubeVirt's reason for refusing a power change), if `err` is
/// one.
fn conflict_message(err: &kube::Error) -> Option<&str> {
    match err {
        kube::Error::Api(status) if status.code == 409 => Some(&status.message),
        _ => None,
    }
}

/// Calls KubeVirt's power subresource `action` (`start` or `stop`) of VM `name` (the API
/// server routes it to virt-api): `accepted` when virt-api takes it, else what `conflict`
/// reads in KubeVirt's 409 ([`start_conflict`], [`stop_conflict`]).
///
/// Errors: [`Error::Kube`] for any other answer, naming the VM and the subresource.
async fn change_power(
    client: &Client,
    namespace: &str,
    name: &str,
    action: &str,
    accepted: PowerAction,
    conflict: fn(&str) -> Option<PowerAction>,
) -> Result<PowerAction> {
    let called = match http::Request::put(vm_action_path(namespace, name, action))
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(b"{}".to_vec())
    {
        Ok(request) => client.request_text(request).await.map(|_| ()),
        Err(e) => Err(kube::Error::HttpError(e)),
    };
    match called {
        Ok(()) => Ok(accepted),
        Err(e) => match conflict_message(&e).and_then(conflict) {
            Some(settled) => Ok(settled),
            None => Err(Error::kube(
                format!("{action} VirtualMachine {name} (subresources.kubevirt.io {action})"),
                e,
            )),
        },
    }
}

/// Starts a VM unless it runs. KubeVirt's 409s are explained ([`start_conflict`]). A VM still
/// stopping (its VMI not yet gone) is waited for first, since KubeVirt refuses to start it
/// until then and it would end up stopped.
///
/// Errors: [`Error::Kube`] naming the VM and the subresource; [`Error::Invalid`] when it is
/// still stopping after [`STOPPING_WAIT_SECONDS`].
pub async fn start(client: &Client, namespace: &str, vm: &VirtualMachine) -> Result<PowerAction> {
    let name = vm.name_any();
    let mut status = vm.printable_status().to_owned();
    if stopping(&status) {
        status = wait_until_stopped(client, namespace, &name).await?;
    }
    if runs(&status) {
        return Ok(PowerAction::AlreadyRunning(format!(
            "printableStatus is already {status}"
        )));
    }
    change_power(
        client,
        namespace,
        &name,
        "start",
        PowerAction::Started,
        start_conflict,
    )
    .await
}

/// Waits (watching the VM, at most [`STOPPING_WAIT_SECONDS`]) until a stopping VM has
/// stopped; returns its printableStatus then.
async fn wait_until_stopped(client: &Client, namespace: &str, name: &str) -> Result<String> {
    let vms: Api<VirtualMachine> = Api::namespaced(client.clone(), namespace);
    let settled =
        |vm: Option<&VirtualMachine>| vm.is_none_or(|vm| !stopping(vm.printable_status()));
    let wait = await_condition(vms, name, settled);
    match tokio::time::timeout(std::time::Duration::from_secs(STOPPING_WAIT_SECONDS), wait).await {
        Ok(Ok(vm)) => Ok(vm.map_or_else(
            || "Unknown".to_owned(),
            |vm| vm.printable_status().to_owned(),
        )),
        Ok(Err(e)) => Err(Error::Config(format!("watch VirtualMachine {name}: {e}"))),
        Err(_) => Err(Error::invalid(
            format!(
                "VirtualMachine {name} is still stopping after {STOPPING_WAIT_SECONDS} s, so it cannot be started yet"
            ),
            format!("check it with `kubectl get vmi -n {namespace} {name}`"),
        )),
    }
}

/// Stops a VM unless it is halted already ([`stop_unneeded`]); KubeVirt's 409s are explained
/// ([`stop_conflict`]).
///
/// Errors: [`Error::Kube`] naming the VM and the subresource.
pub async fn stop(client: &Client, namespace: &str, vm: &VirtualMachine) -> Result<PowerAction> {
    let name = vm.name_any();
    if let Some(done) = stop_unneeded(vm) {
        return Ok(done);
    }
    change_power(
        client,
        namespace,
        &name,
        "stop",
        PowerAction::Stopped,
        stop_conflict,
    )
    .await
}

/// What KubeVirt's 409 answer `message` to a restart means: no VMI runs ("VM is not running")
/// or the run strategy is `Halted` ("Halted does not support manual restart requests"), so
/// there is nothing to restart; `None` for any other, which is an error.
fn restart_conflict(message: &str) -> Option<PowerAction> {
    (message.contains("not running") || message.contains("does not support manual restart"))
        .then_some(PowerAction::AlreadyStopped)
}

/// Restarts a VM through KubeVirt's `restart` subresource, which deletes its VMI and makes a
/// new one (KubeVirt `pkg/virt-api/rest/lifecycle.go`): every open stream of the old VMI
/// (`vnc`, `portforward`, `usbredir`, `console`) ends with it. `true` when virt-api accepted
/// it, `false` when nothing runs to restart ([`restart_conflict`]).
///
/// Errors: [`Error::Kube`] naming the VM and the subresource.
pub async fn restart(client: &Client, namespace: &str, name: &str) -> Result<bool> {
    let action = change_power(
        client,
        namespace,
        name,
        "restart",
        PowerAction::Started,
        restart_conflict,
    )
    .await?;
    Ok(action == PowerAction::Started)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vm(run_strategy: Option<&str>, running: Option<bool>, status: &str) -> VirtualMachine {
        let mut vm = VirtualMachine::new("m-1", Default::default());
        vm.spec.run_strategy = run_strategy.map(str::to_owned);
        vm.spec.running = running;
        vm.status = Some(crate::resources::VirtualMachineStatus {
            printable_status: Some(status.into()),
            ..Default::default()
        });
        vm
    }

    #[test]
    fn the_power_subresource_is_virt_apis() {
        assert_eq!(
            vm_action_path("ns", "m-1", "start"),
            "/apis/subresources.kubevirt.io/v1/namespaces/ns/virtualmachines/m-1/start"
        );
    }

    #[test]
    fn a_start_is_needed_unless_the_vm_runs_or_is_on_its_way() {
        for status in ["Running", "Starting", "Provisioning", "Migrating"] {
            assert!(runs(status), "{status}");
        }
        for status in [
            "Stopped",
            "Paused",
            "Stopping",
            "Terminating",
            "Unknown",
            "",
        ] {
            assert!(!runs(status), "{status}");
        }
        assert!(stopping("Stopping") && stopping("Terminating"));
        assert!(!stopping("Stopped") && !stopping("Running"));
    }

    #[test]
    fn kubevirts_start_conflicts_that_mean_running_are_fine_and_others_are_errors() {
        assert_eq!(
            start_conflict("VM is already running"),
            Some(PowerAction::AlreadyRunning(
                "KubeVirt: VM is already running".into()
            ))
        );
        let always = "Always does not support manual start requests";
        assert_eq!(
            start_conflict(always),
            Some(PowerAction::AlreadyRunning(format!(
                "its run strategy keeps it running (KubeVirt: {always})"
            )))
        );
        assert_eq!(start_conflict("Operation cannot be fulfilled"), None);
    }

    #[test]
    fn kubevirts_stop_conflicts_that_mean_stopped_or_stopping_are_fine_and_others_are_errors() {
        assert_eq!(
            stop_conflict("VM is not running"),
            Some(PowerAction::AlreadyStopped)
        );
        assert_eq!(
            stop_conflict(
                "RunStategy Halted only supports manual stop requests with a grace period"
            ),
            Some(PowerAction::AlreadyStopping)
        );
        assert_eq!(stop_conflict("Operation cannot be fulfilled"), None);
    }

    #[test]
    fn kubevirts_restart_conflicts_that_mean_nothing_runs_are_fine_and_others_are_errors() {
        for nothing_runs in [
            "VM is not running",
            "Halted does not support manual restart requests",
        ] {
            assert_eq!(
                restart_conflict(nothing_runs),
                Some(PowerAction::AlreadyStopped)
            );
        }
        assert_eq!(restart_conflict("Operation cannot be fulfilled"), None);
    }

    #[test]
    fn a_stop_is_skipped_only_when_the_run_strategy_already_halts_the_vm() {
        let halted = Some("Halted");
        assert_eq!(
            stop_unneeded(&vm(halted, None, "Stopped")),
            Some(PowerAction::AlreadyStopped)
        );
        assert_eq!(
            stop_unneeded(&vm(halted, None, "Terminating")),
            Some(PowerAction::AlreadyStopping)
        );
        assert_eq!(
            stop_unneeded(&vm(None, Some(false), "Stopping")),
            Some(PowerAction::AlreadyStopping)
        );
        // Started a moment ago: it still reads Stopped, but it is going to run.
        assert_eq!(stop_unneeded(&vm(Some("Always"), None, "Stopped")), None);
        assert_eq!(stop_unneeded(&vm(None, Some(true), "Stopped")), None);
        assert_eq!(stop_unneeded(&vm(None, None, "Stopped")), None);
        assert_eq!(stop_unneeded(&vm(halted, None, "Running")), None);
    }
}
