//! The device list: libusb (rusb) enumerates the devices and reads their descriptors without
//! opening them; the manufacturer, product and serial strings, which libusb could only read by
//! opening the device (root, usually), come from sysfs (`/sys/bus/usb/devices/<bus>-<ports>/`),
//! as does a HID interface's report descriptor. A recorded list stands in for libusb in
//! end-to-end tests (feature `usb-fixture`).

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::{
    CLASS_HID, CLASS_HUB, DeviceFacts, UsbDevice, device_node, device_view, node_writable,
};
use crate::error::{Error, Result};

/// The devices on this machine's USB buses, as libusb and sysfs describe them, sorted by bus
/// and address; hubs (device class 9) are left out, since they cannot be redirected.
///
/// Errors: [`Error::Usb`] when libusb cannot start or cannot list the devices (e.g. no USB
/// bus: no `/dev/bus/usb`).
pub fn list_devices() -> Result<Vec<UsbDevice>> {
    use rusb::UsbContext;
    let context = rusb::Context::new().map_err(|source| Error::Usb {
        action: "start",
        source,
    })?;
    let devices = context.devices().map_err(|source| Error::Usb {
        action: "list the USB devices",
        source,
    })?;
    let mut out = Vec::new();
    for device in devices.iter() {
        let Ok(descriptor) = device.device_descriptor() else {
            continue;
        };
        if descriptor.class_code() == CLASS_HUB {
            continue;
        }
        let facts = read_facts(&device, &descriptor);
        let writable = node_writable(&device_node(facts.bus, facts.address));
        out.push(device_view(&facts, writable));
    }
    out.sort_by_key(|d| (d.bus, d.address));
    Ok(out)
}

fn speed_word(speed: rusb::Speed) -> &'static str {
    match speed {
        rusb::Speed::Low => "low",
        rusb::Speed::Full => "full",
        rusb::Speed::High => "high",
        rusb::Speed::Super => "super",
        rusb::Speed::SuperPlus => "super+",
        _ => "unknown",
    }
}

/// The sysfs directory of a device: `/sys/bus/usb/devices/<bus>-<port>.<port>…`.
fn sysfs_dir(bus: u8, ports: &[u8]) -> PathBuf {
    let ports: Vec<String> = ports.iter().map(u8::to_string).collect();
    PathBuf::from(format!("/sys/bus/usb/devices/{bus}-{}", ports.join(".")))
}

fn sysfs_string(dir: &Path, file: &str) -> Option<String> {
    std::fs::read_to_string(dir.join(file))
        .ok()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
}

fn read_facts<T: rusb::UsbContext>(
    device: &rusb::Device<T>,
    descriptor: &rusb::DeviceDescriptor,
) -> DeviceFacts {
    let (bus, address) = (device.bus_number(), device.address());
    let dir = device
        .port_numbers()
        .map(|ports| sysfs_dir(bus, &ports))
        .unwrap_or_default();
    let config = device
        .active_config_descriptor()
        .or_else(|_| device.config_descriptor(0))
        .ok();
    let mut interface_classes = Vec::new();
    let mut hid_report_descriptors = Vec::new();
    let mut hid_unreadable = false;
    if let Some(config) = &config {
        for interface in config.interfaces() {
            for setting in interface.descriptors().take(1) {
                let class = setting.class_code();
                interface_classes.push(class);
                if class == CLASS_HID {
                    let name = dir.file_name().map(|n| n.to_string_lossy().into_owned());
                    let intf_dir = name.map(|n| {
                        dir.with_file_name(format!(
                            "{n}:{}.{}",
                            config.number(),
                            setting.interface_number()
                        ))
                    });
                    match intf_dir.and_then(|d| report_descriptor(&d)) {
                        Some(bytes) => hid_report_descriptors.push(bytes),
                        None => hid_unreadable = true,
                    }
                }
            }
        }
    }
    DeviceFacts {
        vendor_id: descriptor.vendor_id(),
        product_id: descriptor.product_id(),
        bus,
        address,
        device_class: descriptor.class_code(),
        interface_classes,
        speed: speed_word(device.speed()).to_owned(),
        manufacturer: sysfs_string(&dir, "manufacturer"),
        product: sysfs_string(&dir, "product"),
        serial: sysfs_string(&dir, "serial"),
        hid_report_descriptors,
        hid_unreadable,
        node_writable: None,
    }
}

/// The report descriptor of the HID device bound to a USB interface directory
/// (`<interface dir>/<hid id>/report_descriptor`, readable without root).
fn report_descriptor(interface_dir: &Path) -> Option<Vec<u8>> {
    std::fs::read_dir(interface_dir)
        .ok()?
        .flatten()
        .find_map(|entry| std::fs::read(entry.path().join("report_descriptor")).ok())
}

/// The device list as the app shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "bindings", derive(specta::Type))]
#[serde(rename_all = "camelCase")]
pub struct UsbList {
    /// The devices, sorted by bus and address.
    pub devices: Vec<UsbDevice>,
    /// Why the list is empty or incomplete, when it is not simply "nothing plugged in"
    /// (no USB bus, libusb unavailable).
    pub problem: Option<String>,
    /// How changes are followed: `hotplug` (libusb's plug events), `polling` (once a second),
    /// or `recording` (a recorded list, for tests).
    pub source: String,
    /// What attaching a device means ([`SECURITY_NOTICE`]), to show before attaching.
    pub notice: String,
}

/// The device list now. It comes from libusb (the shipped build), or from a recorded list (a
/// JSON array of [`DeviceFacts`]) named by `CORRAL_USB_FIXTURE` when the `usb-fixture` feature
/// is built in — for end-to-end tests on machines without a USB bus.
pub fn current() -> UsbList {
    #[cfg(feature = "usb-fixture")]
    if let Some(path) = std::env::var_os("CORRAL_USB_FIXTURE") {
        return match std::fs::read(&path)
            .map_err(|e| e.to_string())
            .and_then(|bytes| {
                serde_json::from_slice::<Vec<DeviceFacts>>(&bytes).map_err(|e| e.to_string())
            }) {
            Ok(facts) => UsbList {
                devices: facts
                    .iter()
                    .map(|f| device_view(f, f.node_writable.unwrap_or(true)))
                    .collect(),
                problem: None,
                source: "recording".into(),
                notice: SECURITY_NOTICE.into(),
            },
            Err(e) => UsbList {
                devices: Vec::new(),
                problem: Some(format!("the recorded device list cannot be read: {e}")),
                source: "recording".into(),
                notice: SECURITY_NOTICE.into(),
            },
        };
    }
    let source = if rusb::has_hotplug() {
        "hotplug"
    } else {
        "polling"
    };
    let no_bus = cfg!(target_os = "linux") && !std::path::Path::new("/dev/bus/usb").exists();
    match list_devices() {
        Ok(devices) => UsbList {
            problem: (devices.is_empty() && no_bus).then(|| {
                "this machine has no USB bus (there is no /dev/bus/usb), so no device can be redirected from it"
                    .to_owned()
            }),
            devices,
            source: source.into(),
            notice: SECURITY_NOTICE.into(),
        },
        Err(error) => UsbList {
            devices: Vec::new(),
            problem: Some(problem(&error, no_bus)),
            source: source.into(),
            notice: SECURITY_NOTICE.into(),
        },
    }
}

/// What a list says when [`list_devices`] failed: the error and its fix, or, on a machine with
/// no USB bus at all (`no_bus`), that first.
fn problem(error: &Error, no_bus: bool) -> String {
    if no_bus {
        format!("this machine has no USB bus (no /dev/bus/usb): {error}")
    } else {
        match error.suggestion() {
            Some(fix) => format!("{error}; {fix}"),
            None => error.to_string(),
        }
    }
}

/// What attaching a device means, shown before it is attached (SPEC "USB redirection").
pub const SECURITY_NOTICE: &str = "While it is attached, the device leaves this machine: \
     nothing here can use it. Live migration of the desktop's VM is blocked. The guest gets \
     full control of the device (a security key or smartcard then answers to whoever controls \
     the desktop).";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    #[test]
    fn a_listing_libusb_refuses_names_libusb_and_the_fix() {
        let refused = Error::Usb {
            action: "start",
            source: rusb::Error::Access,
        };
        assert_eq!(refused.kind(), ErrorKind::Other);
        assert!(!refused.retryable());
        let said = problem(&refused, false);
        assert!(
            said.starts_with("libusb could not start on this machine: Access denied")
                && said.contains("/dev/bus/usb"),
            "{said}"
        );
        let said = problem(&refused, true);
        assert!(
            said.starts_with(
                "this machine has no USB bus (no /dev/bus/usb): libusb could not start"
            ),
            "{said}"
        );
    }
}
