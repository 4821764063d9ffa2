//! The redirect check: everything that can refuse a USB redirection, asked before anything
//! starts (the redirection itself is a session of kind `usb`, started after it).

use std::path::PathBuf;

use kube::api::Api;

use super::{DeviceSpec, UsbDevice, current};
use crate::error::{Error, ErrorKind, is_status};
use crate::programs::HelperSearch;

/// Checks everything that can refuse a redirection before anything starts: the member is
/// assigned to `actor` (the identity from the cluster), it is a running KubeVirt VM with
/// `clientPassthrough`, the device is present here and its node writable, and `usbredirect`
/// is installed. Returns the device and the `usbredirect` program.
///
/// Errors, each naming the object and the fix: [`crate::Error::Invalid`] bad names;
/// [`crate::Error::Rejected`] with kind `Forbidden` (someone else's desktop, naming the
/// holder), `Invalid` (not running; no `clientPassthrough`; not a KubeVirt VM: unsupported),
/// `NotFound` (device not present; `usbredirect` missing, with packages), `Forbidden` (device
/// node not writable, with the udev rule).
pub async fn check_redirect(
    actor: &crate::identity::Actor,
    namespace: &str,
    member: &str,
    spec: &DeviceSpec,
) -> crate::Result<(UsbDevice, PathBuf)> {
    crate::validate::namespace(namespace)?;
    crate::validate::member_name(member)?;
    let client = actor.client();
    let vms: Api<crate::resources::VirtualMachine> = Api::namespaced(client.clone(), namespace);
    let vm = match vms.get_opt(member).await {
        Ok(Some(vm)) => vm,
        Ok(None) => {
            return Err(Error::rejected(
                ErrorKind::Invalid,
                format!(
                    "{member} is not a KubeVirt VirtualMachine in namespace \"{namespace}\": USB \
                     redirection is supported only for KubeVirt VMs"
                ),
                "check the member name and namespace (corral-vdi pool list)",
            ));
        }
        Err(e) if is_status(&e, 404) => {
            return Err(Error::rejected(
                ErrorKind::Invalid,
                "this cluster serves no KubeVirt VirtualMachines: USB redirection is supported only \
                 for KubeVirt VMs (unsupported backend)",
                "pick the context of a cluster with KubeVirt",
            ));
        }
        Err(e) => {
            return Err(Error::kube(
                format!("read VirtualMachine {member} in namespace \"{namespace}\""),
                e,
            ));
        }
    };
    let lease = crate::lease::get(client, namespace, &crate::names::lease_name(member)).await?;
    let view = crate::state::member_view(&vm, lease.as_ref(), actor.clock().now());
    let me = actor.username();
    let mine = match &view.lease {
        Some(l) if l.active => {
            l.holder.as_deref() == Some(me) && view.state != crate::state::MemberState::Conflict
        }
        _ => view.label_holder.as_deref() == Some(me),
    };
    if !mine {
        let whose = match view.holder.as_deref() {
            Some(holder) => format!("it is assigned to {holder}"),
            None => "it is not assigned to anyone".to_owned(),
        };
        return Err(Error::rejected(
            ErrorKind::Forbidden,
            format!(
                "{member} is not your desktop ({whose}): a USB device may be redirected only into \
                 a desktop assigned to you ({me})"
            ),
            format!("claim a desktop first (Get a desktop, or corral-vdi assign <pool> {me})"),
        ));
    }
    if vm.printable_status() != "Running" {
        return Err(Error::rejected(
            ErrorKind::Invalid,
            format!("{member} is {}, not running", vm.printable_status()),
            "start it (assign resumes it), wait for Running, then redirect the device",
        ));
    }
    let passthrough = vm
        .spec
        .template
        .as_ref()
        .and_then(|t| t.pointer("/spec/domain/devices/clientPassthrough"))
        .is_some();
    if !passthrough {
        return Err(Error::rejected(
            ErrorKind::Invalid,
            format!(
                "{member} is not configured for USB redirection: its VM lacks \
                 spec.template.spec.domain.devices.clientPassthrough"
            ),
            "add `clientPassthrough: {}` to the golden VM's devices (and to this VM), then \
             restart it",
        ));
    }
    let list = current();
    let device = list
        .devices
        .iter()
        .find(|d| d.matches(spec))
        .cloned()
        .ok_or_else(|| {
            Error::rejected(
                ErrorKind::NotFound,
                format!(
                    "device {} is not present on this machine{}",
                    spec.argument(),
                    list.problem
                        .as_deref()
                        .map(|p| format!(" ({p})"))
                        .unwrap_or_default()
                ),
                "plug it in, then check with `corral-vdi usb list`",
            )
        })?;
    if !device.access.writable {
        return Err(Error::rejected(
            ErrorKind::Forbidden,
            format!(
                "you cannot open {} ({}): its node {} is not writable by you",
                device.id,
                device.describe(),
                device.access.node
            ),
            device.access.fix.clone().unwrap_or_default(),
        ));
    }
    let program = HelperSearch::on_path().usbredirect()?;
    Ok((device, program))
}
