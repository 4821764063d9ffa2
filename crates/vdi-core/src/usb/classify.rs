//! What one device is: the facts read about it ([`DeviceFacts`], from libusb and sysfs or a
//! recording), the smartcard and security-key marks they give ([`classify`]: an interface of
//! class 0x0B is a smartcard; a HID report descriptor with the FIDO usage page 0xF1D0 — what
//! systemd's `fido_id` checks — or, when that cannot be read, a known security-key vendor is a
//! security key), and the [`UsbDevice`] shown, with whether this user may open its node
//! (`access(2)`, which honours the ACLs udev's `uaccess` tag sets) and, if not, the udev rule
//! that fixes it. Pure apart from that one `access(2)`.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::DeviceSpec;

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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "bindings", derive(specta::Type))]
#[serde(rename_all = "camelCase")]
pub enum UsbMark {
    /// An interface of class 0x0B (CCID): a smartcard reader or a token that is one.
    Smartcard,
    /// A HID interface whose report descriptor carries the FIDO usage page 0xF1D0.
    SecurityKey,
    /// A known security-key vendor; its report descriptor could not be read.
    SecurityKeyByVendor,
}

/// Whether this user may open the device node, and if not how to fix it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "bindings", derive(specta::Type))]
#[serde(rename_all = "camelCase")]
pub struct UsbAccess {
    /// Whether the node can be opened for reading and writing by this user.
    pub writable: bool,
    /// The device node, `/dev/bus/usb/BBB/DDD`.
    pub node: String,
    /// When not writable: the udev rule that gives the seat's user access, and how to load it.
    pub fix: Option<String>,
}

/// One local USB device, ready to show.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "bindings", derive(specta::Type))]
#[serde(rename_all = "camelCase")]
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
