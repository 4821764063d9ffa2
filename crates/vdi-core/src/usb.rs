//! Local USB devices and their redirection into a desktop (SPEC "USB redirection").
//!
//! **Listing** enumerates with libusb (rusb): vendor:product, bus/address, device and interface
//! classes and speed come from the descriptors libusb reads without opening a device; the
//! manufacturer, product and serial strings, which libusb could only read by opening the
//! device (root, usually), come from sysfs (`/sys/bus/usb/devices/<bus>-<ports>/`), as does a
//! HID interface's report descriptor. A device is marked a **smartcard** when an interface has
//! class 0x0B (CCID), and a **security key** when a HID interface's report descriptor carries
//! the FIDO usage page 0xF1D0 (what systemd's `fido_id` checks), or — when that cannot be read
//! — when its vendor is a known security-key maker. Whether this user can open the device node
//! (`/dev/bus/usb/BBB/DDD`) is checked with `access(2)`, which honours the ACLs udev's
//! `uaccess` tag sets; when not, the node and the udev rule that fixes it are named.
//!
//! **Redirecting** is what KubeVirt's own client does, with no virtctl: a loopback listener,
//! `usbredirect --device <vid:pid|bus-addr> --to 127.0.0.1:PORT`, and that one connection
//! bridged to the VMI's `usbredir` subresource stream (a session of kind `usb`).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use ts_rs::TS;

/// USB interface class of smartcard readers (CCID).
pub const CLASS_SMARTCARD: u8 = 0x0B;
/// USB interface class of HID devices.
pub const CLASS_HID: u8 = 0x03;
/// USB device class of hubs.
pub const CLASS_HUB: u8 = 0x09;
/// HID usage page of FIDO authenticators (CTAP), as a report descriptor declares it.
pub const FIDO_USAGE_PAGE: u16 = 0xF1D0;

/// Vendors that make (mostly) security keys, for when a report descriptor cannot be read:
/// (vendor id, name). A vendor match alone is a weaker mark than the FIDO usage page.
pub const SECURITY_KEY_VENDORS: [(u16, &str); 6] = [
    (0x1050, "Yubico"),
    (0x096e, "Feitian"),
    (0x20a0, "Nitrokey"),
    (0x1ea8, "Thetis"),
    (0x2ccf, "HyperSecu"),
    (0x311f, "Token2"),
];

/// What a device is, as far as redirection is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, TS, specta::Type)]
#[serde(rename_all = "camelCase")]
#[ts(export)]
pub enum UsbMark {
    /// An interface of class 0x0B (CCID): a smartcard reader or a token that is one.
    Smartcard,
    /// A HID interface whose report descriptor carries the FIDO usage page 0xF1D0.
    SecurityKey,
    /// A known security-key vendor; its report descriptor could not be read.
    SecurityKeyByVendor,
}

/// Whether this user may open the device node, and if not how to fix it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, TS, specta::Type)]
#[serde(rename_all = "camelCase")]
#[ts(export)]
pub struct UsbAccess {
    /// Whether the node can be opened for reading and writing by this user.
    pub writable: bool,
    /// The device node, `/dev/bus/usb/BBB/DDD`.
    pub node: String,
    /// When not writable: the udev rule that gives the seat's user access, and how to load it.
    pub fix: Option<String>,
}

/// One local USB device, ready to show.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, TS, specta::Type)]
#[serde(rename_all = "camelCase")]
#[ts(export)]
pub struct UsbDevice {
    /// `idVendor`.
    pub vendor_id: u16,
    /// `idProduct`.
    pub product_id: u16,
    /// `vvvv:pppp`, lower-case hex: what `usbredirect --device` takes.
    pub id: String,
    /// Bus number.
    pub bus: u8,
    /// Device address on the bus.
    pub address: u8,
    /// `BUS-ADDRESS`: the other form `usbredirect --device` takes.
    pub bus_address: String,
    /// Manufacturer string (sysfs), if the device has one.
    pub manufacturer: Option<String>,
    /// Product string (sysfs), if the device has one.
    pub product: Option<String>,
    /// Serial number string (sysfs), if the device has one.
    pub serial: Option<String>,
    /// `bDeviceClass` (0 = per interface).
    pub device_class: u8,
    /// `bInterfaceClass` of each interface of the active (else first) configuration.
    pub interface_classes: Vec<u8>,
    /// Negotiated speed: `low` (1.5 Mb/s), `full` (12), `high` (480), `super` (5 Gb/s),
    /// `super+` (10), or `unknown`.
    pub speed: String,
    /// Smartcard / security-key marks.
    pub marks: Vec<UsbMark>,
    /// Whether this user can open it.
    pub access: UsbAccess,
}

impl UsbDevice {
    /// A short description: product, else manufacturer, else the id.
    pub fn describe(&self) -> String {
        match (&self.manufacturer, &self.product) {
            (Some(m), Some(p)) => format!("{m} {p}"),
            (None, Some(p)) => p.clone(),
            (Some(m), None) => m.clone(),
            (None, None) => format!("USB device {}", self.id),
        }
    }

    /// Whether `spec` (`vid:pid` or `bus-address`) names this device.
    pub fn matches(&self, spec: &DeviceSpec) -> bool {
        match spec {
            DeviceSpec::Id { vendor, product } => {
                self.vendor_id == *vendor && self.product_id == *product
            }
            DeviceSpec::BusAddress { bus, address } => self.bus == *bus && self.address == *address,
        }
    }
}

/// How a device is named on the command line, as `usbredirect --device` takes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceSpec {
    /// `vid:pid`, hexadecimal.
    Id {
        /// Vendor id.
        vendor: u16,
        /// Product id.
        product: u16,
    },
    /// `bus-address`, decimal.
    BusAddress {
        /// Bus number.
        bus: u8,
        /// Address on the bus.
        address: u8,
    },
}

impl DeviceSpec {
    /// Parses `1050:0407` or `3-7`.
    ///
    /// Errors: [`crate::Error::Invalid`] with the two accepted forms.
    pub fn parse(text: &str) -> crate::Result<Self> {
        let bad = || {
            crate::Error::invalid(
                format!(
                    "\"{}\" is not a USB device: write vendor:product in hex (1050:0407) or bus-address (3-7)",
                    text.escape_debug()
                ),
                "`corral-vdi usb list` shows both forms for every device",
            )
        };
        if let Some((v, p)) = text.split_once(':') {
            let hex = |s: &str| {
                (s.len() == 4)
                    .then(|| u16::from_str_radix(s, 16).ok())
                    .flatten()
            };
            return match (hex(v), hex(p)) {
                (Some(vendor), Some(product)) => Ok(DeviceSpec::Id { vendor, product }),
                _ => Err(bad()),
            };
        }
        if let Some((b, a)) = text.split_once('-') {
            return match (b.parse::<u8>(), a.parse::<u8>()) {
                (Ok(bus), Ok(address)) if bus > 0 && address > 0 => {
                    Ok(DeviceSpec::BusAddress { bus, address })
                }
                _ => Err(bad()),
            };
        }
        Err(bad())
    }

    /// The argument for `usbredirect --device`.
    pub fn argument(&self) -> String {
        match self {
            DeviceSpec::Id { vendor, product } => format!("{vendor:04x}:{product:04x}"),
            DeviceSpec::BusAddress { bus, address } => format!("{bus}-{address}"),
        }
    }
}

/// What is known of one device, from wherever it was read (libusb + sysfs, or a recording):
/// the input of [`classify`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeviceFacts {
    /// Vendor id.
    pub vendor_id: u16,
    /// Product id.
    pub product_id: u16,
    /// Bus number.
    pub bus: u8,
    /// Address.
    pub address: u8,
    /// Device class.
    pub device_class: u8,
    /// Interface classes.
    pub interface_classes: Vec<u8>,
    /// Speed wording (see [`UsbDevice::speed`]).
    pub speed: String,
    /// Manufacturer string.
    pub manufacturer: Option<String>,
    /// Product string.
    pub product: Option<String>,
    /// Serial string.
    pub serial: Option<String>,
    /// Report descriptors of the HID interfaces that could be read (raw bytes).
    pub hid_report_descriptors: Vec<Vec<u8>>,
    /// Whether some HID interface's report descriptor could not be read.
    pub hid_unreadable: bool,
    /// In a recorded list only: whether the recorded user could open the device node (absent:
    /// yes). A live list asks the node itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_writable: Option<bool>,
}

/// Whether a HID report descriptor declares usage page `page`: a Usage Page item (global,
/// tag 0000, type 01: prefix `0x05` one byte, `0x06` two bytes little-endian, `0x07` four),
/// walking the descriptor item by item (HID 1.11 §6.2.2.2) so data bytes are never mistaken
/// for items.
pub fn declares_usage_page(descriptor: &[u8], page: u16) -> bool {
    let mut i = 0;
    while i < descriptor.len() {
        let prefix = descriptor[i];
        if prefix == 0xFE {
            // Long item: bDataSize, bLongItemTag, data.
            let size = descriptor.get(i + 1).copied().unwrap_or(0) as usize;
            i += 3 + size;
            continue;
        }
        let size = match prefix & 0x03 {
            3 => 4,
            n => n as usize,
        };
        let data = descriptor.get(i + 1..i + 1 + size).unwrap_or(&[]);
        if prefix & 0xFC == 0x04 {
            let value = data
                .iter()
                .enumerate()
                .fold(0u32, |acc, (k, b)| acc | (u32::from(*b) << (8 * k)));
            if value == u32::from(page) {
                return true;
            }
        }
        i += 1 + size;
    }
    false
}

/// Marks and description of a device from its facts (pure).
pub fn classify(facts: &DeviceFacts) -> Vec<UsbMark> {
    let mut marks = Vec::new();
    if facts.interface_classes.contains(&CLASS_SMARTCARD) || facts.device_class == CLASS_SMARTCARD {
        marks.push(UsbMark::Smartcard);
    }
    if facts
        .hid_report_descriptors
        .iter()
        .any(|d| declares_usage_page(d, FIDO_USAGE_PAGE))
    {
        marks.push(UsbMark::SecurityKey);
    } else if (facts.hid_unreadable || facts.hid_report_descriptors.is_empty())
        && facts.interface_classes.contains(&CLASS_HID)
        && SECURITY_KEY_VENDORS
            .iter()
            .any(|(v, _)| *v == facts.vendor_id)
    {
        marks.push(UsbMark::SecurityKeyByVendor);
    }
    marks
}

/// The udev rule that lets the seat's user open a device, and how to load it.
pub fn udev_fix(vendor: u16, product: u16) -> String {
    format!(
        "add the line SUBSYSTEM==\"usb\", ATTRS{{idVendor}}==\"{vendor:04x}\", \
         ATTRS{{idProduct}}==\"{product:04x}\", TAG+=\"uaccess\" to \
         /etc/udev/rules.d/70-corral-usb.rules, then run `sudo udevadm control --reload && sudo \
         udevadm trigger` and plug the device in again"
    )
}

/// The device node of `bus`/`address`.
pub fn device_node(bus: u8, address: u8) -> PathBuf {
    PathBuf::from(format!("/dev/bus/usb/{bus:03}/{address:03}"))
}

/// Whether this user may read and write `node` (`access(2)`, which honours ACLs).
pub fn node_writable(node: &Path) -> bool {
    rustix::fs::access(
        node,
        rustix::fs::Access::READ_OK | rustix::fs::Access::WRITE_OK,
    )
    .is_ok()
}

/// A device ready to show, from its facts and whether its node is writable.
pub fn device_view(facts: &DeviceFacts, writable: bool) -> UsbDevice {
    let node = device_node(facts.bus, facts.address);
    UsbDevice {
        vendor_id: facts.vendor_id,
        product_id: facts.product_id,
        id: format!("{:04x}:{:04x}", facts.vendor_id, facts.product_id),
        bus: facts.bus,
        address: facts.address,
        bus_address: format!("{}-{}", facts.bus, facts.address),
        manufacturer: facts.manufacturer.clone(),
        product: facts.product.clone(),
        serial: facts.serial.clone(),
        device_class: facts.device_class,
        interface_classes: facts.interface_classes.clone(),
        speed: facts.speed.clone(),
        marks: classify(facts),
        access: UsbAccess {
            writable,
            node: node.display().to_string(),
            fix: (!writable).then(|| udev_fix(facts.vendor_id, facts.product_id)),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Descriptors recorded (by hand, from `lsusb -v` and the HID report descriptors) of five
    /// common devices.
    fn recorded() -> Vec<(&'static str, DeviceFacts)> {
        // A FIDO HID report descriptor: Usage Page (0xF1D0), Usage (1), Collection, …
        let fido = vec![
            0x06, 0xD0, 0xF1, 0x09, 0x01, 0xA1, 0x01, 0x09, 0x20, 0x15, 0x00, 0x26, 0xFF, 0x00,
            0x75, 0x08, 0x95, 0x40, 0x81, 0x02, 0x09, 0x21, 0x15, 0x00, 0x26, 0xFF, 0x00, 0x75,
            0x08, 0x95, 0x40, 0x91, 0x02, 0xC0,
        ];
        // A boot keyboard: Usage Page (Generic Desktop), Usage (Keyboard), …, with data bytes
        // D0 F1 inside a logical maximum that must not be read as a usage page.
        let keyboard = vec![
            0x05, 0x01, 0x09, 0x06, 0xA1, 0x01, 0x05, 0x07, 0x19, 0xE0, 0x29, 0xE7, 0x15, 0x00,
            0x27, 0xD0, 0xF1, 0x00, 0x00, 0x75, 0x01, 0x95, 0x08, 0x81, 0x02, 0xC0,
        ];
        vec![
            (
                "YubiKey 5 NFC (OTP+FIDO+CCID)",
                DeviceFacts {
                    vendor_id: 0x1050,
                    product_id: 0x0407,
                    bus: 1,
                    address: 7,
                    interface_classes: vec![CLASS_HID, CLASS_HID, CLASS_SMARTCARD],
                    speed: "full".into(),
                    manufacturer: Some("Yubico".into()),
                    product: Some("YubiKey OTP+FIDO+CCID".into()),
                    hid_report_descriptors: vec![keyboard.clone(), fido],
                    ..Default::default()
                },
            ),
            (
                "CCID smartcard reader",
                DeviceFacts {
                    vendor_id: 0x076b,
                    product_id: 0x3031,
                    bus: 1,
                    address: 3,
                    interface_classes: vec![CLASS_SMARTCARD],
                    speed: "full".into(),
                    manufacturer: Some("OMNIKEY".into()),
                    product: Some("Smart Card Reader USB".into()),
                    ..Default::default()
                },
            ),
            (
                "keyboard",
                DeviceFacts {
                    vendor_id: 0x046d,
                    product_id: 0xc31c,
                    bus: 1,
                    address: 4,
                    interface_classes: vec![CLASS_HID, CLASS_HID],
                    speed: "low".into(),
                    hid_report_descriptors: vec![keyboard],
                    ..Default::default()
                },
            ),
            (
                "mass-storage stick",
                DeviceFacts {
                    vendor_id: 0x0781,
                    product_id: 0x5567,
                    bus: 2,
                    address: 2,
                    interface_classes: vec![0x08],
                    speed: "high".into(),
                    serial: Some("4C530001".into()),
                    ..Default::default()
                },
            ),
            (
                "hub",
                DeviceFacts {
                    vendor_id: 0x05e3,
                    product_id: 0x0608,
                    bus: 1,
                    address: 2,
                    device_class: CLASS_HUB,
                    interface_classes: vec![CLASS_HUB],
                    speed: "high".into(),
                    ..Default::default()
                },
            ),
        ]
    }

    #[test]
    fn recorded_devices_are_marked_as_they_are() {
        let marks: Vec<(&str, Vec<UsbMark>)> = recorded()
            .iter()
            .map(|(name, facts)| (*name, classify(facts)))
            .collect();
        assert_eq!(
            marks,
            vec![
                (
                    "YubiKey 5 NFC (OTP+FIDO+CCID)",
                    vec![UsbMark::Smartcard, UsbMark::SecurityKey]
                ),
                ("CCID smartcard reader", vec![UsbMark::Smartcard]),
                ("keyboard", vec![]),
                ("mass-storage stick", vec![]),
                ("hub", vec![]),
            ]
        );
    }

    #[test]
    fn a_known_vendor_marks_a_key_whose_descriptor_cannot_be_read() {
        let mut key = recorded()[0].1.clone();
        key.hid_report_descriptors.clear();
        key.hid_unreadable = true;
        key.interface_classes = vec![CLASS_HID];
        assert_eq!(classify(&key), vec![UsbMark::SecurityKeyByVendor]);
    }

    #[test]
    fn specs_parse_both_forms() {
        assert_eq!(
            DeviceSpec::parse("1050:0407").unwrap(),
            DeviceSpec::Id {
                vendor: 0x1050,
                product: 0x0407
            }
        );
        assert_eq!(
            DeviceSpec::parse("3-7").unwrap(),
            DeviceSpec::BusAddress { bus: 3, address: 7 }
        );
        for bad in [
            "",
            "1050",
            "1050:",
            "zz:0407",
            "10500:0407",
            "0-1",
            "a-b",
            "1050:0407\n",
        ] {
            assert!(DeviceSpec::parse(bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            DeviceSpec::parse("1050:0407").unwrap().argument(),
            "1050:0407"
        );
        assert_eq!(DeviceSpec::parse("3-7").unwrap().argument(), "3-7");
    }

    #[test]
    fn views_name_the_node_and_the_fix() {
        let view = device_view(&recorded()[0].1, false);
        assert_eq!(view.id, "1050:0407");
        assert_eq!(view.bus_address, "1-7");
        assert_eq!(view.access.node, "/dev/bus/usb/001/007");
        let fix = view.access.fix.clone().unwrap();
        assert!(
            fix.contains("ATTRS{idVendor}==\"1050\"") && fix.contains("uaccess"),
            "{fix}"
        );
        assert_eq!(view.describe(), "Yubico YubiKey OTP+FIDO+CCID");
    }
}

/// The devices on this machine's USB buses, as libusb and sysfs describe them, sorted by bus
/// and address; hubs (device class 9) are left out, since they cannot be redirected.
///
/// Errors: a sentence when libusb cannot start (e.g. no USB bus: no `/dev/bus/usb`).
pub fn list_devices() -> std::result::Result<Vec<UsbDevice>, String> {
    use rusb::UsbContext;
    let context = rusb::Context::new().map_err(|e| format!("libusb could not start: {e}"))?;
    let devices = context
        .devices()
        .map_err(|e| format!("libusb could not list devices: {e}"))?;
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, TS, specta::Type)]
#[serde(rename_all = "camelCase")]
#[ts(export)]
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
        Err(problem) => UsbList {
            devices: Vec::new(),
            problem: Some(if no_bus {
                format!("this machine has no USB bus (no /dev/bus/usb): {problem}")
            } else {
                problem
            }),
            source: source.into(),
            notice: SECURITY_NOTICE.into(),
        },
    }
}

/// Follows the device list: libusb hot-plug events where the platform has them, else a
/// re-list every second (cheap: descriptors are cached by the kernel). Dropping the watch
/// stops it.
pub struct UsbWatch {
    rx: tokio::sync::watch::Receiver<UsbList>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl UsbWatch {
    /// Starts following (a thread of its own: libusb's event loop blocks).
    pub fn spawn() -> Self {
        use std::sync::atomic::Ordering;
        let (tx, rx) = tokio::sync::watch::channel(current());
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopping = stop.clone();
        let spawned = std::thread::Builder::new()
            .name("usb-watch".into())
            .spawn(move || {
                let hotplug = hotplug_context();
                while !stopping.load(Ordering::Relaxed) {
                    match &hotplug {
                        Some((context, _registration)) => {
                            use rusb::UsbContext;
                            let _ = context.handle_events(Some(std::time::Duration::from_secs(1)));
                        }
                        None => std::thread::sleep(std::time::Duration::from_secs(1)),
                    }
                    let next = current();
                    tx.send_if_modified(|list| {
                        let changed = *list != next;
                        if changed {
                            *list = next;
                        }
                        changed
                    });
                }
            });
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "cannot follow USB devices");
        }
        UsbWatch { rx, stop }
    }

    /// A receiver of the list; `changed()` wakes on every plug and unplug.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<UsbList> {
        self.rx.clone()
    }
}

impl Drop for UsbWatch {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Wakes libusb's event loop on every arrival and departure; the list is re-read after it.
struct Wake;

impl<T: rusb::UsbContext> rusb::Hotplug<T> for Wake {
    fn device_arrived(&mut self, _device: rusb::Device<T>) {}
    fn device_left(&mut self, _device: rusb::Device<T>) {}
}

type HotplugContext = (rusb::Context, rusb::Registration<rusb::Context>);

fn hotplug_context() -> Option<HotplugContext> {
    if !rusb::has_hotplug() {
        return None;
    }
    let context = rusb::Context::new().ok()?;
    let registration = rusb::HotplugBuilder::new()
        .enumerate(false)
        .register(&context, Box::new(Wake))
        .ok()?;
    Some((context, registration))
}

/// What attaching a device means, shown before it is attached (SPEC "USB redirection").
pub const SECURITY_NOTICE: &str = "While it is attached, the device leaves this machine: \
     nothing here can use it. Live migration of the desktop's VM is blocked. The guest gets \
     full control of the device (a security key or smartcard then answers to whoever controls \
     the desktop).";

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
    use crate::error::ErrorKind;
    use crate::error::{Error, is_status};
    use kube::api::Api;
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
    let lease = crate::lease::get(client, namespace, &crate::labels::lease_name(member)).await?;
    let view = crate::state::member_view(&vm, lease.as_ref(), actor.clock().now());
    let me = actor.username();
    let mine = match &view.lease {
        Some(l) if l.active => {
            l.holder.as_deref() == Some(me) && view.state != crate::model::MemberState::Conflict
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
    let program = which::which("usbredirect").map_err(|_| {
        Error::rejected(
            ErrorKind::NotFound,
            "usbredirect is not installed (not found on PATH)",
            crate::connect::install_hint("usbredirect"),
        )
    })?;
    Ok((device, program))
}
